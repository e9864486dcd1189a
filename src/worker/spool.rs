//! A byte queue in fixed-size chunks, for large values the proxy has to
//! hold for a while (a reply that waits for an earlier one of its client,
//! the fragments of a merged MGET, a request's large argument that arrives
//! before the key that routes it). A `Buffer` is one contiguous vector: it
//! would need one allocation of the whole value (and twice that while it
//! grows); a spool never allocates more than [`SPOOL_CHUNK`] at a time and
//! returns each chunk as soon as it is consumed.

use std::collections::VecDeque;

/// Size of one chunk.
pub const SPOOL_CHUNK: usize = 64 * 1024;

/// Bytes held in chunks of [`SPOOL_CHUNK`], consumed from the front.
#[derive(Debug, Default)]
pub struct Spool {
    chunks: VecDeque<Vec<u8>>,
    /// Consumed bytes of the front chunk.
    head: usize,
    len: usize,
}

impl Spool {
    /// Append bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        while !bytes.is_empty() {
            let room = match self.chunks.back() {
                Some(c) => SPOOL_CHUNK - c.len(),
                None => 0,
            };
            if room == 0 {
                self.chunks.push_back(Vec::with_capacity(SPOOL_CHUNK));
                continue;
            }
            let n = room.min(bytes.len());
            if let Some(c) = self.chunks.back_mut() {
                c.extend_from_slice(&bytes[..n]);
            }
            bytes = &bytes[n..];
        }
    }

    /// The first unconsumed contiguous piece (empty if none).
    pub fn front(&self) -> &[u8] {
        match self.chunks.front() {
            Some(c) => &c[self.head..],
            None => &[],
        }
    }

    /// Drop `n` bytes from the front (`n` ≤ `front().len()`).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.front().len());
        self.head += n;
        self.len -= n;
        if self.chunks.front().is_some_and(|c| self.head == c.len()) {
            self.chunks.pop_front();
            self.head = 0;
        }
    }

    /// Unconsumed bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing left.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Move up to `max` bytes from the front into `out`; returns how many.
    pub fn drain_into(&mut self, out: &mut super::buffer::Buffer, max: usize) -> usize {
        let mut moved = 0;
        while moved < max && !self.is_empty() {
            let piece = self.front();
            let n = piece.len().min(max - moved);
            out.extend(&piece[..n]);
            self.consume(n);
            moved += n;
        }
        moved
    }

    /// Read the next line (up to and including its LF) into `line`, the
    /// line being at most `max` bytes. `false`: no LF within `max` bytes.
    pub fn read_line(&mut self, line: &mut Vec<u8>, max: usize) -> bool {
        line.clear();
        while line.len() < max {
            let piece = self.front();
            if piece.is_empty() {
                return false;
            }
            let want = (max - line.len()).min(piece.len());
            match memchr::memchr(b'\n', &piece[..want]) {
                Some(i) => {
                    line.extend_from_slice(&piece[..=i]);
                    self.consume(i + 1);
                    return true;
                }
                None => {
                    line.extend_from_slice(&piece[..want]);
                    self.consume(want);
                }
            }
        }
        false
    }

    /// Move exactly `n` bytes from the front to the back of `out`; `false`
    /// (and nothing moved) when fewer are held.
    pub fn move_to(&mut self, out: &mut Spool, mut n: usize) -> bool {
        if n > self.len {
            return false;
        }
        while n > 0 {
            let piece = self.front();
            let k = piece.len().min(n);
            out.push(&piece[..k]);
            self.consume(k);
            n -= k;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &Spool) -> Vec<u8> {
        s.chunks.iter().flatten().skip(s.head).copied().collect()
    }

    #[test]
    fn push_and_consume_across_chunks() {
        let mut s = Spool::default();
        let data: Vec<u8> = (0..SPOOL_CHUNK * 3 + 17).map(|i| (i % 251) as u8).collect();
        for part in data.chunks(1000) {
            s.push(part);
        }
        assert_eq!(s.len(), data.len());
        assert_eq!(s.chunks.len(), 4);
        assert!(s.chunks.iter().all(|c| c.capacity() == SPOOL_CHUNK));
        assert_eq!(bytes(&s), data);
        let mut got = Vec::new();
        while !s.is_empty() {
            let n = s.front().len().min(777);
            got.extend_from_slice(&s.front()[..n]);
            s.consume(n);
        }
        assert_eq!(got, data);
        assert!(s.chunks.is_empty());
        assert_eq!(s.front(), b"");
    }

    #[test]
    fn lines_and_moves() {
        let mut s = Spool::default();
        let value = vec![b'v'; SPOOL_CHUNK + 5];
        s.push(b"*2\r\n$");
        s.push(format!("{}\r\n", value.len()).as_bytes());
        s.push(&value);
        s.push(b"\r\n$-1\r\n");
        let mut line = Vec::new();
        assert!(s.read_line(&mut line, 64));
        assert_eq!(line, b"*2\r\n");
        assert!(s.read_line(&mut line, 64));
        assert_eq!(line, format!("${}\r\n", value.len()).as_bytes());
        let mut out = Spool::default();
        assert!(!s.move_to(&mut out, 10 * SPOOL_CHUNK));
        assert!(s.move_to(&mut out, value.len() + 2));
        assert_eq!(out.len(), value.len() + 2);
        assert!(s.read_line(&mut line, 64));
        assert_eq!(line, b"$-1\r\n");
        assert!(!s.read_line(&mut line, 64));
        // A line longer than the limit is refused.
        let mut long = Spool::default();
        long.push(b"$123456789\r\n");
        assert!(!long.read_line(&mut line, 4));
    }

    #[test]
    fn drain_into_a_buffer_is_bounded() {
        let mut s = Spool::default();
        s.push(&vec![7u8; SPOOL_CHUNK * 2]);
        let mut b = super::super::buffer::Buffer::default();
        assert_eq!(s.drain_into(&mut b, 100_000), 100_000);
        assert_eq!(b.len(), 100_000);
        assert_eq!(s.len(), SPOOL_CHUNK * 2 - 100_000);
        assert_eq!(s.drain_into(&mut b, usize::MAX), SPOOL_CHUNK * 2 - 100_000);
        assert!(s.is_empty());
    }
}
