//! A byte queue: appended at the back, consumed from the front by moving
//! an offset (never by shifting the rest on every message, the O(k²) copy
//! twemproxy does with pipelined replies). The unconsumed tail is moved to
//! the front at most once per read, and an emptied large buffer is freed so
//! idle connections hold no memory.

use std::io::{self, Read};

/// Capacity kept by an emptied buffer; anything larger is released.
const KEEP_CAPACITY: usize = 16 * 1024;

/// See module docs. `data` is always initialised up to its length; bytes
/// `pos..end` are the content.
#[derive(Debug, Default)]
pub struct Buffer {
    data: Vec<u8>,
    pos: usize,
    end: usize,
}

impl Buffer {
    /// Unconsumed bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.pos..self.end]
    }

    /// Number of unconsumed bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.pos
    }

    /// No unconsumed bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos == self.end
    }

    /// Drop `n` bytes from the front.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.pos += n.min(self.len());
        if self.pos == self.end {
            self.clear();
        }
    }

    /// Drop everything, releasing a large allocation.
    pub fn clear(&mut self) {
        self.pos = 0;
        self.end = 0;
        if self.data.len() > KEEP_CAPACITY {
            self.data = Vec::new();
        }
    }

    /// Make room for `extra` more bytes at the back.
    fn reserve(&mut self, extra: usize) {
        if self.end + extra <= self.data.len() {
            return;
        }
        if self.pos > 0 {
            self.data.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end + extra > self.data.len() {
            let want = (self.end + extra).max(self.data.len() * 2).max(1024);
            self.data.resize(want, 0);
        }
    }

    /// Append bytes.
    #[inline]
    pub fn extend(&mut self, b: &[u8]) {
        self.reserve(b.len());
        self.data[self.end..self.end + b.len()].copy_from_slice(b);
        self.end += b.len();
    }

    /// Append through a composer writing into a scratch vector.
    pub fn extend_with(&mut self, scratch: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
        scratch.clear();
        f(scratch);
        self.extend(scratch);
    }

    /// One `read(2)` of up to `chunk` bytes appended at the back.
    pub fn read_from(&mut self, r: &mut impl Read, chunk: usize) -> io::Result<usize> {
        self.reserve(chunk);
        let n = r.read(&mut self.data[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// Allocated bytes (memory accounting).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_compact_and_release() {
        let mut b = Buffer::default();
        b.extend(b"hello world");
        b.consume(6);
        assert_eq!(b.bytes(), b"world");
        b.extend(&[b'x'; 2000]);
        assert_eq!(&b.bytes()[..5], b"world");
        assert_eq!(b.len(), 2005);
        b.extend(&vec![0u8; 64 * 1024]);
        b.consume(b.len());
        assert!(b.is_empty());
        assert_eq!(b.capacity(), 0);
    }

    #[test]
    fn read_appends() {
        let mut b = Buffer::default();
        let mut src: &[u8] = b"abcd";
        assert_eq!(b.read_from(&mut src, 16).unwrap(), 4);
        assert_eq!(b.bytes(), b"abcd");
    }
}
