//! TLS clients across a reload or upgrade.
//!
//! A plain client crosses to the successor as its descriptor. A TLS
//! client cannot: its session keys live in this process's rustls state,
//! and the kernel here has no TLS offload to move them with the socket.
//! So at its request boundary the client is handed over as one end of a
//! unix socket pair, and this worker keeps its TLS connection and the
//! pair's other end, and relays plaintext between them until either side
//! closes. The successor serves the client under the new configuration
//! like any other (its requests, routing, stats); only the TLS layer
//! stays here, and this worker exits when its last relay ends.

use crate::net::Stream;
use mio::{Interest, Registry};
use slab::Slab;
use std::io::{ErrorKind, Read, Write};

/// Most bytes held for one direction before reading that side pauses.
const RELAY_HELD: usize = 256 * 1024;

/// One relayed TLS client.
#[derive(Debug)]
struct Relay {
    /// The client's TLS connection.
    tls: Stream,
    /// Our end of the pair whose other end the successor holds.
    plain: mio::net::UnixStream,
    /// Plaintext from the client, not yet written to the successor.
    up: Vec<u8>,
    /// Replies from the successor, not yet written to the client.
    down: Vec<u8>,
    /// The client closed its side.
    tls_eof: bool,
    /// The successor closed its side.
    plain_eof: bool,
}

/// Read what `from` has into `held` (up to [`RELAY_HELD`]). Returns
/// whether the peer closed, or an error.
fn fill(from: &mut impl Read, held: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    while held.len() < RELAY_HELD {
        match from.read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(n) => held.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Write as much of `held` as `to` takes.
fn drain(to: &mut impl Write, held: &mut Vec<u8>) -> std::io::Result<()> {
    let mut done = 0;
    while done < held.len() {
        match to.write(&held[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                held.drain(..done);
                return Err(e);
            }
        }
    }
    held.drain(..done);
    to.flush()
}

impl Relay {
    /// Move bytes both ways until neither side has more. Returns false
    /// once the relay is over (both closed, or an error).
    fn pump(&mut self) -> bool {
        loop {
            let (up, down) = (self.up.len(), self.down.len());
            if !self.tls_eof {
                match fill(&mut self.tls, &mut self.up) {
                    Ok(eof) => self.tls_eof = eof,
                    Err(_) => return false,
                }
            }
            if drain(&mut self.plain, &mut self.up).is_err() {
                return false;
            }
            if !self.plain_eof {
                match fill(&mut self.plain, &mut self.down) {
                    Ok(eof) => self.plain_eof = eof,
                    Err(_) => return false,
                }
            }
            if drain(&mut self.tls, &mut self.down).is_err() {
                return false;
            }
            if self.tls_eof && self.up.is_empty() {
                // The client is gone: tell the successor, which closes.
                let _ = self.plain.shutdown(std::net::Shutdown::Write);
            }
            if self.plain_eof && self.down.is_empty() {
                // The successor closed the client: so do we.
                self.tls.say_goodbye();
                return false;
            }
            if self.tls_eof && self.plain_eof {
                return false;
            }
            let moved = self.up.len() != up || self.down.len() != down;
            if !moved {
                return true;
            }
        }
    }
}

/// The TLS clients this worker relays to its successor.
#[derive(Debug, Default)]
pub(super) struct Relays(Slab<Relay>);

impl Relays {
    /// None is left (the worker may exit).
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keep relaying `tls` (a client just handed over as `plain`'s pair
    /// end) with `down` its replies not yet written.
    pub(super) fn start(
        &mut self,
        reg: &Registry,
        mut tls: Stream,
        mut plain: mio::net::UnixStream,
        down: Vec<u8>,
    ) {
        let entry = self.0.vacant_entry();
        let i = entry.key();
        let (tls_token, unix_token) = super::tokens::relay(i);
        let both = Interest::READABLE | Interest::WRITABLE;
        if reg.register(&mut tls, tls_token, both).is_err()
            || reg.register(&mut plain, unix_token, both).is_err()
        {
            return;
        }
        entry.insert(Relay {
            tls,
            plain,
            up: Vec::new(),
            down,
            tls_eof: false,
            plain_eof: false,
        });
        self.event(reg, i);
    }

    /// An event on either side of relay `i`.
    pub(super) fn event(&mut self, reg: &Registry, i: usize) {
        let Some(r) = self.0.get_mut(i) else {
            return;
        };
        if r.pump() {
            return;
        }
        let mut r = self.0.remove(i);
        let _ = reg.deregister(&mut r.tls);
        let _ = reg.deregister(&mut r.plain);
        crate::log_pverb!("TLS client relay ended ({} left)", self.0.len());
    }
}

/// A unix socket pair for a relayed client: (ours, the successor's).
pub(super) fn pair() -> std::io::Result<(mio::net::UnixStream, std::os::fd::OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    theirs.set_nonblocking(true)?;
    Ok((mio::net::UnixStream::from_std(ours), theirs.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that has `left` bytes now, then would block.
    struct Source {
        left: usize,
    }

    impl Read for Source {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            buf[..n].fill(b'x');
            Ok(n)
        }
    }

    /// A peer that takes `room` bytes, then would block (or fails).
    struct Sink {
        room: usize,
        taken: Vec<u8>,
        fail: bool,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(if self.fail {
                    ErrorKind::BrokenPipe.into()
                } else {
                    ErrorKind::WouldBlock.into()
                });
            }
            let n = buf.len().min(self.room).min(3);
            self.room -= n;
            self.taken.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn reading_pauses_once_a_direction_holds_its_bound() {
        let mut held = Vec::new();
        let mut src = Source { left: 1 << 20 };
        assert!(!fill(&mut src, &mut held).unwrap());
        assert!(held.len() >= RELAY_HELD && held.len() < RELAY_HELD + 16 * 1024);
        assert!(src.left > 0, "the rest waits in the peer");
    }

    #[test]
    fn reading_tells_a_close_from_nothing_yet() {
        let mut held = Vec::new();
        assert!(!fill(&mut Source { left: 5 }, &mut held).unwrap());
        assert_eq!(held, b"xxxxx");
        let mut closed: &[u8] = b"bye";
        assert!(fill(&mut closed, &mut held).unwrap());
        assert_eq!(held, b"xxxxxbye");
    }

    #[test]
    fn what_a_peer_does_not_take_stays_held() {
        let mut held = b"hello world".to_vec();
        let mut sink = Sink {
            room: 7,
            taken: Vec::new(),
            fail: false,
        };
        drain(&mut sink, &mut held).unwrap();
        assert_eq!(
            (sink.taken.as_slice(), held.as_slice()),
            (&b"hello w"[..], &b"orld"[..])
        );
        let mut sink = Sink {
            room: 2,
            taken: Vec::new(),
            fail: true,
        };
        assert!(drain(&mut sink, &mut held).is_err());
        assert_eq!(held, b"ld", "what was written before the error is gone");
    }
}
