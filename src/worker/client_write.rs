//! A module of `client_conn.rs`: writing a client's output and what
//! follows, as `Client` methods the worker carries out: what the socket
//! took and whether the client stays open (`flush`, a `Flushed`: a
//! socket error, or more than `client_output_limit` bytes left
//! unwritten, closes it), and once written whether it is read again or
//! is done (`after_write`, an `AfterWrite`). Unit tests below on a
//! socket pair.

use super::Client;
use crate::worker::conn::BufPool;
use std::io::{ErrorKind, Write};

/// What writing a client's output came to ([`Client::flush`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Bytes that left its output (the worker's buffer budget drops
    /// them).
    pub written: usize,
    /// Why it closes, if it does.
    pub close: Option<WriteClose>,
}

/// Why writing closes a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteClose {
    /// Its socket failed (or the ciphertext TLS still held could not be
    /// written).
    Failed,
    /// This many bytes stay unwritten, over its output limit: it does
    /// not read its replies.
    OverLimit(usize),
}

/// What follows a client's write ([`Client::after_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterWrite {
    /// Paused, its replies drained: read it again.
    Read,
    /// Nothing more to do (quit sent, or its peer gone and every reply
    /// written): it closes.
    Close,
    /// It stays as it is.
    Stay,
}

impl Client {
    /// Write as much output as the socket takes, then lend an emptied
    /// buffer back to `bufs`; `limit`: its output limit (0: none).
    #[inline]
    pub fn flush(&mut self, limit: usize, bufs: &mut BufPool) -> Flushed {
        let mut written = 0;
        if self.sock.is_tls() && self.sock.flush().is_err() {
            let close = Some(WriteClose::Failed);
            return Flushed { written, close };
        }
        while self.has_output() {
            match self.write_output() {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    let close = Some(WriteClose::Failed);
                    return Flushed { written, close };
                }
            }
        }
        self.return_idle_output(bufs);
        let close = self.output_over(limit).map(WriteClose::OverLimit);
        Flushed { written, close }
    }

    /// Once written: read again when paused and its replies drained
    /// below `max_inflight` and `max_out` bytes (`resume_if_drained`),
    /// else closed when it is done (`finished`).
    #[inline]
    pub fn after_write(&mut self, max_inflight: usize, max_out: usize) -> AfterWrite {
        if self.resume_if_drained(max_inflight, max_out) {
            AfterWrite::Read
        } else if self.finished() {
            AfterWrite::Close
        } else {
            AfterWrite::Stay
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::client_conn::tests::client_and_peer;
    use std::io::Read;

    #[test]
    fn what_the_socket_takes_is_written_and_the_client_stays() {
        let (mut c, mut peer) = client_and_peer();
        let mut bufs = BufPool::default();
        c.queue_output(b"+OK\r\n", &mut bufs);
        let f = c.flush(100, &mut bufs);
        assert_eq!(
            f,
            Flushed {
                written: 5,
                close: None
            }
        );
        assert!(!c.has_output());
        let mut got = [0; 5];
        peer.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"+OK\r\n");
        // Nothing left to write: nothing written.
        assert_eq!(c.flush(100, &mut bufs).written, 0);
    }

    #[test]
    fn output_left_over_the_limit_or_a_failed_socket_closes_the_client_and_peer() {
        let (mut c, peer) = client_and_peer();
        let mut bufs = BufPool::default();
        // More than the socket pair buffers, the peer reading nothing.
        let n = 8 << 20;
        c.queue_output(&vec![b'x'; n], &mut bufs);
        let f = c.flush(1024, &mut bufs);
        assert!(f.written > 0 && f.written < n);
        assert_eq!(f.close, Some(WriteClose::OverLimit(n - f.written)));
        // No limit: it stays, however much is left.
        assert_eq!(c.flush(0, &mut bufs).close, None);
        drop(peer);
        assert_eq!(c.flush(0, &mut bufs).close, Some(WriteClose::Failed));
    }

    #[test]
    fn once_written_a_client_is_read_again_closed_or_left() {
        let (mut c, _peer) = client_and_peer();
        assert_eq!(c.after_write(4, 1024), AfterWrite::Stay, "open");
        // Paused by `client_max_inflight`, nothing in flight any more.
        c.end_pass(0, 0, true);
        assert_eq!(c.after_write(4, 1024), AfterWrite::Read);
        assert_eq!(c.after_write(4, 1024), AfterWrite::Stay, "resumed once");
        c.set_eof();
        assert_eq!(c.after_write(4, 1024), AfterWrite::Close, "its peer left");
    }
}
