//! A byte queue: appended at the back, consumed from the front by moving
//! an offset (never by shifting the rest on every message, the O(k²) copy
//! twemproxy does with pipelined replies). The unconsumed tail is moved to
//! the front only when room is needed.
//!
//! Reads go straight into the vector's spare capacity with `read(2)` (no
//! zero-filling of memory the kernel is about to overwrite). Client
//! connections borrow their buffers from the worker's pool (`Pools`, `conn::BufPool`) and
//! give them back when empty, so an idle connection holds no buffer and a
//! busy one allocates nothing per request. The same pool lends the queues
//! a client keeps its owed replies in, given back once nothing is owed.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;

/// Room below which a read first grows the buffer.
const MIN_READ_ROOM: usize = 4096;
/// A buffer that grew past this for a burst (a huge reply, a long
/// pipeline) frees its allocation once it is empty again, so a long-lived
/// server connection does not keep its high-water mark.
const SHRINK_ABOVE: usize = 1 << 20;

/// See module docs. Bytes `pos..data.len()` are the content.
#[derive(Debug, Default)]
pub struct Buffer {
    data: Vec<u8>,
    pos: usize,
}

impl Buffer {
    /// An empty buffer with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Buffer {
        Buffer {
            data: Vec::with_capacity(cap),
            pos: 0,
        }
    }

    /// Unconsumed bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.pos..]
    }

    /// Number of unconsumed bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.data.len() - self.pos
    }

    /// No unconsumed bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos == self.data.len()
    }

    /// Allocated bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// Drop `n` bytes from the front.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.pos += n.min(self.len());
        if self.pos == self.data.len() {
            self.pos = 0;
            if self.data.capacity() > SHRINK_ABOVE {
                self.data = Vec::new();
            } else {
                self.data.clear();
            }
        }
    }

    /// Make room for `extra` more bytes at the back.
    fn reserve(&mut self, extra: usize) {
        if self.data.capacity() - self.data.len() >= extra {
            return;
        }
        if self.pos > 0 {
            self.data.drain(..self.pos);
            self.pos = 0;
        }
        if self.data.capacity() - self.data.len() < extra {
            self.data.reserve(extra.max(MIN_READ_ROOM));
        }
    }

    /// Append bytes.
    #[inline]
    pub fn extend(&mut self, b: &[u8]) {
        self.reserve(b.len());
        self.data.extend_from_slice(b);
    }

    /// Append through a composer that writes into the vector (it may only
    /// push; the consumed prefix stays untouched).
    #[inline]
    pub fn append_with(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        f(&mut self.data);
    }

    /// One read from a client or server connection: `read(2)` straight
    /// into the buffer for plain sockets, decrypted plaintext for TLS.
    #[inline]
    pub fn read_stream(
        &mut self,
        sock: &mut crate::net::Stream,
        chunk: usize,
    ) -> io::Result<(usize, bool)> {
        match sock {
            crate::net::Stream::Tls(t) => self.read_from(&mut **t, chunk),
            _ => self.read_fd(std::os::fd::AsRawFd::as_raw_fd(sock), chunk),
        }
    }

    /// One `read` from a reader that needs initialised memory (TLS):
    /// zero at most `chunk` bytes of spare room and read into them.
    /// Returns the bytes read and whether the read was short.
    fn read_from(&mut self, r: &mut impl io::Read, chunk: usize) -> io::Result<(usize, bool)> {
        if self.data.capacity() - self.data.len() < MIN_READ_ROOM {
            self.reserve(chunk);
        }
        let len = self.data.len();
        let room = (self.data.capacity() - len).min(chunk.max(MIN_READ_ROOM));
        self.data.resize(len + room, 0);
        match r.read(&mut self.data[len..]) {
            Ok(n) => {
                self.data.truncate(len + n);
                Ok((n, n < room))
            }
            Err(e) => {
                self.data.truncate(len);
                Err(e)
            }
        }
    }

    /// One `read(2)` from `fd` into the spare room (grown to at least
    /// `chunk` when less than a page is free). Returns the bytes read and
    /// whether the read was short (the socket had nothing more at that
    /// moment, so another read would only return EAGAIN).
    pub fn read_fd(&mut self, fd: RawFd, chunk: usize) -> io::Result<(usize, bool)> {
        if self.data.capacity() - self.data.len() < MIN_READ_ROOM {
            self.reserve(chunk);
        }
        let len = self.data.len();
        let room = self.data.capacity() - len;
        // SAFETY: the kernel writes at most `room` bytes into the vector's
        // spare capacity; only the bytes it reports written become part of
        // the vector.
        let n = unsafe {
            libc::read(
                fd,
                self.data.as_mut_ptr().add(len) as *mut libc::c_void,
                room,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: `n` ≤ `room` bytes past `len` were initialised by read(2).
        unsafe {
            self.data.set_len(len + n);
        }
        Ok((n, n < room))
    }
}

/// Empty buffers a worker lends to its connections, and empty reply
/// queues (of `S`, a client's reply slot: `conn::BufPool`) it lends to
/// its clients.
#[derive(Debug)]
pub struct Pools<S> {
    free: Vec<Buffer>,
    replies: Vec<VecDeque<S>>,
}

impl<S> Default for Pools<S> {
    fn default() -> Self {
        Pools {
            free: Vec::new(),
            replies: Vec::new(),
        }
    }
}

/// Buffers kept in the pool; more are freed.
const POOL_MAX: usize = 256;
/// Largest buffer kept; larger ones are freed (memory returns after a burst).
const POOL_MAX_CAPACITY: usize = 256 * 1024;
/// Size of a new buffer.
pub const BUF_SIZE: usize = 16 * 1024;
/// Room of a new reply queue (a client with one request at a time needs
/// one slot; a pipelining one grows its queue while it holds it).
const REPLIES_SIZE: usize = 4;
/// Largest reply queue kept (a long pipeline's is freed).
const REPLIES_MAX_CAPACITY: usize = 64;

impl<S> Pools<S> {
    /// An empty buffer, reused when possible.
    #[inline]
    pub fn take(&mut self) -> Buffer {
        self.free
            .pop()
            .unwrap_or_else(|| Buffer::with_capacity(BUF_SIZE))
    }

    /// Give back a buffer that is empty (anything else is dropped).
    #[inline]
    pub fn give(&mut self, b: Buffer) {
        if b.is_empty()
            && b.capacity() > 0
            && b.capacity() <= POOL_MAX_CAPACITY
            && self.free.len() < POOL_MAX
        {
            self.free.push(b);
        }
    }

    /// An empty reply queue, reused when possible.
    #[inline]
    pub fn take_replies(&mut self) -> VecDeque<S> {
        self.replies
            .pop()
            .unwrap_or_else(|| VecDeque::with_capacity(REPLIES_SIZE))
    }

    /// Give back a reply queue that is empty (anything else is dropped).
    #[inline]
    pub fn give_replies(&mut self, q: VecDeque<S>) {
        if q.is_empty()
            && q.capacity() > 0
            && q.capacity() <= REPLIES_MAX_CAPACITY
            && self.replies.len() < POOL_MAX
        {
            self.replies.push(q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_allocation_freed_when_empty() {
        let mut b = Buffer::default();
        b.extend(&vec![7u8; SHRINK_ABOVE + 1]);
        b.consume(10);
        assert!(b.capacity() > SHRINK_ABOVE);
        b.consume(SHRINK_ABOVE);
        assert_eq!((b.len(), b.capacity()), (0, 0));
        b.extend(b"small");
        b.consume(5);
        assert!(b.capacity() > 0, "small buffers keep their room");
    }

    #[test]
    fn consume_compact_and_reuse() {
        let mut b = Buffer::default();
        b.extend(b"hello world");
        b.consume(6);
        assert_eq!(b.bytes(), b"world");
        b.extend(&[b'x'; 20000]);
        assert_eq!(&b.bytes()[..5], b"world");
        assert_eq!(b.len(), 20005);
        b.consume(b.len());
        assert!(b.is_empty());
        assert!(b.capacity() >= 20005);
        b.append_with(|v| v.extend_from_slice(b"abc"));
        assert_eq!(b.bytes(), b"abc");
    }

    #[test]
    fn read_fd_appends_and_reports_short_reads() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::io::Write;
        use std::os::fd::AsRawFd;
        a.write_all(b"abcd").unwrap();
        let mut buf = Buffer::default();
        assert_eq!(buf.read_fd(b.as_raw_fd(), 16).unwrap(), (4, true));
        assert_eq!(buf.bytes(), b"abcd");
    }

    #[test]
    fn pool_lends_and_keeps_empty_buffers() {
        let mut p = Pools::<u64>::default();
        let mut b = p.take();
        b.extend(b"x");
        p.give(b);
        assert!(p.free.is_empty(), "non-empty buffers are not pooled");
        let b = p.take();
        p.give(b);
        assert_eq!(p.free.len(), 1);
    }

    #[test]
    fn pool_lends_and_keeps_empty_reply_queues() {
        let mut p = Pools::<u64>::default();
        let mut q = p.take_replies();
        assert!(q.capacity() >= REPLIES_SIZE);
        q.push_back(7);
        p.give_replies(q);
        assert!(p.replies.is_empty(), "a queue with a slot is not pooled");
        let q = p.take_replies();
        p.give_replies(q);
        assert_eq!(p.replies.len(), 1);
        let big = VecDeque::with_capacity(REPLIES_MAX_CAPACITY + 1);
        p.give_replies(big);
        assert_eq!(p.replies.len(), 1, "a long pipeline's queue is freed");
        let q = p.take_replies();
        assert!(q.capacity() >= REPLIES_SIZE && p.replies.is_empty());
    }
}
