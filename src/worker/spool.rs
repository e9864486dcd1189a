//! A byte queue in fixed-size chunks, for large values the proxy has to
//! hold for a while (a reply that waits for an earlier one of its client,
//! the fragments of a merged MGET, a request's large argument that arrives
//! before the key that routes it). A `Buffer` is one contiguous vector: it
//! would need one allocation of the whole value (and twice that while it
//! grows); a spool never allocates more than [`SPOOL_CHUNK`] at a time and
//! returns each chunk as soon as it is consumed. A [`SpoolReader`] reads
//! it again from the start without consuming it (a request kept to be sent
//! again after a Redis Cluster redirection).

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

impl crate::proto::redis::merge_held::Chunks for Spool {
    fn read_line(&mut self, line: &mut Vec<u8>, max: usize) -> bool {
        Spool::read_line(self, line, max)
    }
    fn move_to(&mut self, out: &mut Self, n: usize) -> bool {
        Spool::move_to(self, out, n)
    }
    fn push(&mut self, bytes: &[u8]) {
        Spool::push(self, bytes)
    }
}

/// A read position in a [`Spool`] that leaves the spool as it is: the same
/// bytes can be read again by a new reader. Valid while nothing is consumed
/// from the spool (bytes pushed after it was made are read too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolReader {
    /// Index of the chunk it reads.
    chunk: usize,
    /// Offset in that chunk.
    off: usize,
}

impl SpoolReader {
    /// A reader at the first unconsumed byte of `spool`.
    pub fn new(spool: &Spool) -> SpoolReader {
        SpoolReader {
            chunk: 0,
            off: spool.head,
        }
    }

    /// The contiguous piece at the reader's position (empty at the end).
    pub fn piece<'a>(&self, spool: &'a Spool) -> &'a [u8] {
        spool
            .chunks
            .get(self.chunk)
            .map_or(&[], |c| &c[self.off.min(c.len())..])
    }

    /// Move past `n` bytes (`n` ≤ `piece(spool).len()`).
    pub fn advance(&mut self, spool: &Spool, n: usize) {
        let Some(c) = spool.chunks.get(self.chunk) else {
            return;
        };
        self.off = (self.off + n).min(c.len());
        if self.off == SPOOL_CHUNK {
            self.chunk += 1;
            self.off = 0;
        }
    }

    /// Bytes from the reader's position to the end of `spool`.
    pub fn remaining(&self, spool: &Spool) -> usize {
        let read = self.chunk * SPOOL_CHUNK + self.off - spool.head;
        spool.len().saturating_sub(read)
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

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    fn drain(s: &mut Spool) -> Vec<u8> {
        let mut out = Vec::new();
        while !s.front().is_empty() {
            let f = s.front().to_vec();
            s.consume(f.len());
            out.extend_from_slice(&f);
        }
        out
    }

    #[test]
    fn empty() {
        let mut s = Spool::default();
        assert!(s.is_empty() && s.front().is_empty());
        assert_eq!(s.len(), 0);
        s.consume(0);
        s.consume(5);
        assert!(s.is_empty());
        let r = SpoolReader::new(&s);
        assert!(r.piece(&s).is_empty() && r.remaining(&s) == 0);
    }

    #[test]
    fn chunks_are_fixed_size_and_filled_in_order() {
        let data = pattern(3 * SPOOL_CHUNK + 100);
        let mut s = Spool::default();
        // Pushed in odd pieces that straddle chunk boundaries.
        for piece in data.chunks(1000 + 7) {
            s.push(piece);
        }
        assert_eq!(s.len(), data.len());
        assert_eq!(s.chunks.len(), 4);
        assert!(s.chunks.iter().all(|c| c.capacity() == SPOOL_CHUNK));
        assert!(s.chunks.iter().take(3).all(|c| c.len() == SPOOL_CHUNK));
        assert_eq!(s.front().len(), SPOOL_CHUNK);
        assert_eq!(drain(&mut s), data);
        assert!(s.is_empty() && s.chunks.is_empty());
    }

    #[test]
    fn consume_in_parts_frees_chunks_as_they_empty() {
        let data = pattern(2 * SPOOL_CHUNK + 5);
        let mut s = Spool::default();
        s.push(&data);
        s.consume(10);
        assert_eq!(s.len(), data.len() - 10);
        assert_eq!(s.front(), &data[10..SPOOL_CHUNK]);
        // More than the front piece: only the front piece goes.
        s.consume(SPOOL_CHUNK);
        assert_eq!(s.chunks.len(), 2);
        assert_eq!(s.front(), &data[SPOOL_CHUNK..2 * SPOOL_CHUNK]);
        assert_eq!(s.len(), SPOOL_CHUNK + 5);
        s.consume(SPOOL_CHUNK);
        assert_eq!(s.front(), &data[2 * SPOOL_CHUNK..]);
        s.consume(5);
        assert!(s.is_empty() && s.chunks.is_empty());
        // Used again after emptying.
        s.push(b"abc");
        assert_eq!(s.front(), b"abc");
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn push_after_partial_consume_continues_the_last_chunk() {
        let mut s = Spool::default();
        s.push(b"hello ");
        s.consume(2);
        s.push(b"world");
        assert_eq!(s.front(), b"llo world");
        assert_eq!(s.len(), 9);
        assert_eq!(s.chunks.len(), 1);
    }

    #[test]
    fn a_reader_reads_everything_again_and_again() {
        let data = pattern(2 * SPOOL_CHUNK + 333);
        let mut s = Spool::default();
        s.push(&data);
        for step in [1usize, 4096, SPOOL_CHUNK, usize::MAX] {
            let mut r = SpoolReader::new(&s);
            let mut out = Vec::new();
            assert_eq!(r.remaining(&s), data.len());
            loop {
                let p = r.piece(&s);
                if p.is_empty() {
                    break;
                }
                let n = p.len().min(step).min(500_000);
                out.extend_from_slice(&p[..n]);
                r.advance(&s, n);
                assert_eq!(r.remaining(&s), data.len() - out.len());
            }
            assert_eq!(out, data);
        }
        // Nothing was consumed by reading.
        assert_eq!(s.len(), data.len());
        assert_eq!(drain(&mut s), data);
    }

    #[test]
    fn a_reader_sees_bytes_pushed_after_it_caught_up() {
        let mut s = Spool::default();
        s.push(&pattern(SPOOL_CHUNK - 1));
        let mut r = SpoolReader::new(&s);
        let n = r.piece(&s).len();
        r.advance(&s, n);
        assert!(r.piece(&s).is_empty());
        s.push(b"xyz");
        assert_eq!(r.piece(&s), b"x");
        r.advance(&s, 1);
        assert_eq!(r.piece(&s), b"yz");
        assert_eq!(r.remaining(&s), 2);
    }

    #[test]
    fn a_reader_starts_at_the_unconsumed_front() {
        let data = pattern(SPOOL_CHUNK + 10);
        let mut s = Spool::default();
        s.push(&data);
        s.consume(100);
        let r = SpoolReader::new(&s);
        assert_eq!(r.piece(&s), &data[100..SPOOL_CHUNK]);
        assert_eq!(r.remaining(&s), data.len() - 100);
    }
}

/// The MGET merge of `proto/redis/merge_held.rs` over spools: the same
/// reply as the whole-buffer merge, for a value larger than a chunk.
#[cfg(test)]
mod merge_tests {
    use super::Spool;
    use crate::proto::redis::merge_held::check;

    fn drained(mut s: Spool) -> Vec<u8> {
        let mut v = Vec::new();
        while !s.is_empty() {
            let n = s.front().len();
            v.extend_from_slice(s.front());
            s.consume(n);
        }
        v
    }

    #[test]
    fn same_reply_as_the_buffered_merge() {
        check::same_reply_as_the_buffered_merge::<Spool>(200_000, drained);
    }

    #[test]
    fn malformed_fragments_are_refused() {
        check::malformed_fragments_are_refused::<Spool>();
    }
}
