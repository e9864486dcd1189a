//! Handing clients to a successor: on a reload the new generation of
//! workers, on a hot upgrade the new binary's workers.
//!
//! Told to hand over, a worker stops accepting and stops reading its
//! clients (what they send meanwhile waits in the kernel's socket buffer);
//! a client whose requests are all answered — nothing in flight, no
//! streamed value half passed — goes to the successor at that request
//! boundary, over `net::handover`: its descriptor, its pool's name, its
//! Redis session (AUTH done, RESP3, names), the unparsed start of its next
//! request and the replies not yet written. The successor takes it up as
//! if it had accepted it: the client notices nothing. A client in the
//! middle of a large request is read until that request is complete.
//!
//! A client whose pool is gone from the successor's configuration is
//! closed there (its listener is gone too). The successor's side, taking
//! clients up, is `handin.rs`.

use super::conn::{Client, Conn, ConnTable};
use super::pool::PoolRt;
use super::{relay, Worker};
use crate::net::handover::{self, MAX_MESSAGE};
use crate::stats::WorkerField;
use slab::Slab;
use std::os::fd::AsRawFd;

const MAGIC: &[u8; 4] = b"WNH1";
/// Room kept for the message's fixed fields and names.
const HEADER_ROOM: usize = 4096;
/// Largest unparsed input plus unwritten output a handed client carries.
pub(super) const CARRY_MAX: usize = MAX_MESSAGE - HEADER_ROOM;

/// A client's state as it crosses to the successor.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Handed {
    /// Its pool's name.
    pub pool: String,
    /// It speaks Redis (else memcached).
    pub redis: bool,
    /// Redis: RESP3 asked with HELLO 3.
    pub resp3: bool,
    /// Redis: AUTH done (or no password needed).
    pub authenticated: bool,
    /// Redis: CLIENT SETNAME.
    pub name: Option<Vec<u8>>,
    /// Redis: CLIENT SETINFO LIB-NAME.
    pub lib_name: Option<Vec<u8>>,
    /// Redis: CLIENT SETINFO LIB-VER.
    pub lib_ver: Option<Vec<u8>>,
    /// Redis: the ACL user it logged in as (`users`), by name.
    pub user: Option<Vec<u8>>,
    /// Input bytes still to discard (a refused oversized value).
    pub swallow: u64,
    /// The unparsed start of its next request.
    pub input: Vec<u8>,
    /// Replies not yet written to it.
    pub output: Vec<u8>,
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<Option<Vec<u8>>> {
        let n = self.u32()?;
        if n == u32::MAX {
            return Some(None);
        }
        Some(Some(self.take(n as usize)?.to_vec()))
    }
}

impl Handed {
    /// Client `c` of `pool` as it crosses. `output`: its unwritten
    /// replies go with it (a relayed client's stay here for the relay).
    fn of(c: &Client, pool: &PoolRt, output: bool) -> Handed {
        let s = c.session();
        Handed {
            pool: pool.cfg.name.clone(),
            redis: pool.proto == crate::proto::Protocol::Redis,
            resp3: s.resp3,
            authenticated: s.authenticated,
            name: s.names().name.clone(),
            lib_name: s.names().lib_name.clone(),
            lib_ver: s.names().lib_ver.clone(),
            user: s
                .user
                .and_then(|u| pool.cfg.security.users.get(u as usize))
                .map(|u| u.name.as_bytes().to_vec()),
            swallow: c.swallow() as u64,
            input: c.input().bytes().to_vec(),
            output: if output {
                c.output().bytes().to_vec()
            } else {
                Vec::new()
            },
        }
    }

    /// The message form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.input.len() + self.output.len());
        out.extend_from_slice(MAGIC);
        out.push(
            u8::from(self.resp3)
                | (u8::from(self.authenticated) << 1)
                | (u8::from(self.redis) << 2),
        );
        put_bytes(&mut out, Some(self.pool.as_bytes()));
        put_bytes(&mut out, self.name.as_deref());
        put_bytes(&mut out, self.lib_name.as_deref());
        put_bytes(&mut out, self.lib_ver.as_deref());
        out.extend_from_slice(&self.swallow.to_le_bytes());
        put_bytes(&mut out, Some(&self.input));
        put_bytes(&mut out, Some(&self.output));
        // Last and only when set: an older binary's message has none.
        if self.user.is_some() {
            put_bytes(&mut out, self.user.as_deref());
        }
        out
    }

    /// Parse [`Handed::encode`]'s form; `None` for anything else.
    pub fn decode(msg: &[u8]) -> Option<Handed> {
        let mut r = Reader(msg);
        if r.take(4)? != MAGIC {
            return None;
        }
        let flags = r.take(1)?[0];
        let pool = String::from_utf8(r.bytes()??).ok()?;
        let mut h = Handed {
            pool,
            redis: flags & 4 != 0,
            resp3: flags & 1 != 0,
            authenticated: flags & 2 != 0,
            name: r.bytes()?,
            lib_name: r.bytes()?,
            lib_ver: r.bytes()?,
            user: None,
            swallow: r.u64()?,
            input: r.bytes()??,
            output: r.bytes()??,
        };
        if !r.0.is_empty() {
            h.user = r.bytes()?;
        }
        r.0.is_empty().then_some(h)
    }
}

impl Client {
    /// Whether it is at a request boundary and may cross now: nothing
    /// in flight or held, no streamed value half passed, not pinned here
    /// (a transaction, a subscriber), not leaving, and what it carries
    /// fits in `carry` bytes of the message.
    fn may_cross(&self, carry: usize) -> bool {
        !self.is_closing()
            && !self.is_eof()
            && !self.has_pending()
            && self.stream().is_none()
            && self.gate().is_none()
            && self.txn().is_none()
            && self.subs().is_none()
            && self.rstream_from().is_none()
            && self.input().len() + self.out_len() <= carry
    }
}

/// The clients that cross to the successor now, in table order (the
/// rest are served here until they may).
fn crossing(conns: &Slab<Conn>) -> Vec<usize> {
    conns
        .iter()
        .filter_map(|(k, c)| match c {
            Conn::Client(c) if c.may_cross(CARRY_MAX) => Some(k),
            _ => None,
        })
        .collect()
}

/// The handover under way, if any: where this worker's clients go.
#[derive(Debug, Default)]
pub(super) struct Handover {
    target: Option<String>,
}

/// What sending one client to the successor came to
/// ([`Handover::sent`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// It crossed: it leaves this worker without being closed.
    Gone,
    /// The successor's queue is full: the rest wait for the next try.
    Later,
    /// The successor cannot be reached: the handover is over, the
    /// clients are finished here instead.
    Failed,
}

impl Handover {
    /// Begin handing every client to the workers listening on `target`.
    /// True when this begins it (the worker then stops taking clients);
    /// false when one is already under way.
    pub(super) fn begin(&mut self, target: String) -> bool {
        if self.target.is_some() {
            return false;
        }
        crate::log_notice!("handing clients over to {target}");
        self.target = Some(target);
        true
    }

    /// Whether clients are being handed over.
    #[inline]
    pub(super) fn on(&self) -> bool {
        self.target.is_some()
    }

    /// While handing over: the most a client's handover carries.
    #[inline]
    pub(super) fn carry(&self) -> Option<usize> {
        self.target.as_ref().map(|_| CARRY_MAX)
    }

    /// Where the clients go, while handing over.
    fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// What sending a client came to, given the send's `result`; a
    /// successor that cannot be reached ends the handover.
    fn sent(&mut self, result: std::io::Result<()>) -> Sent {
        match result {
            Ok(()) => Sent::Gone,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Sent::Later,
            Err(e) => {
                if let Some(target) = self.target.take() {
                    crate::log_error!(
                        "cannot hand clients over to {target}: {e}; finishing them here instead"
                    );
                }
                Sent::Failed
            }
        }
    }
}

impl Worker<'_> {
    /// Hand over every client at a request boundary. Returns false when
    /// the successor cannot be reached (the caller falls back to a
    /// graceful stop).
    pub(super) fn hand_over_ready(&mut self) -> bool {
        let Some(target) = self.handover.target().map(str::to_owned) else {
            return true;
        };
        for k in crossing(&self.conns) {
            let Some(c) = self.conns.client(k) else {
                continue;
            };
            // A TLS client crosses as a unix socket this worker relays
            // to (relay.rs); its unwritten replies stay here.
            let pair = if c.sock().is_tls() {
                match relay::pair() {
                    Ok(p) => Some(p),
                    Err(e) => {
                        crate::log_error!("cannot relay a TLS client: {e}");
                        continue;
                    }
                }
            } else {
                None
            };
            let msg = Handed::of(c, &self.pools[c.pool()], pair.is_none()).encode();
            let fd = match &pair {
                Some((_, theirs)) => theirs.as_raw_fd(),
                None => c.sock().as_raw_fd(),
            };
            match self.handover.sent(handover::send(&target, &msg, fd)) {
                Sent::Gone => {
                    // It leaves without being closed: dropping it closes
                    // this process's copy of the descriptor, the successor
                    // holds the connection now (a TLS client's is relayed).
                    let Some(Conn::Client(mut c)) = self.conns.try_remove(k) else {
                        continue;
                    };
                    let reg = self.poll.registry();
                    let _ = reg.deregister(c.sock_mut());
                    self.out.sub(c.out_len(), &self.stats);
                    self.stats.worker_add(WorkerField::HandedOut, 1);
                    let p = &mut self.pools[c.pool()];
                    self.intake.client_left(&c, p, &self.stats, reg);
                    if let Some((ours, _)) = pair {
                        let (sock, out) = c.into_sock_and_output();
                        self.relays.start(reg, sock, ours, out.bytes().to_vec());
                    }
                }
                Sent::Later => break,
                Sent::Failed => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_begins_once_and_ends_when_its_successor_is_gone() {
        use std::io::{Error, ErrorKind};
        let mut h = Handover::default();
        assert!(!h.on() && h.carry().is_none());
        assert!(h.begin("/run/next".into()));
        assert!(!h.begin("/run/other".into()), "one under way stays");
        assert_eq!(h.target(), Some("/run/next"));
        assert_eq!(h.carry(), Some(CARRY_MAX));
        assert_eq!(h.sent(Ok(())), Sent::Gone);
        assert_eq!(h.sent(Err(ErrorKind::WouldBlock.into())), Sent::Later);
        assert!(h.on(), "a full queue is tried again");
        let refused = Error::from(ErrorKind::ConnectionRefused);
        assert_eq!(h.sent(Err(refused)), Sent::Failed);
        assert!(!h.on() && h.carry().is_none(), "finished here instead");
    }

    #[test]
    fn state_round_trips() {
        let h = Handed {
            pool: "alpha".into(),
            redis: true,
            resp3: true,
            authenticated: false,
            name: Some(b"conn-1".to_vec()),
            lib_name: None,
            lib_ver: Some(Vec::new()),
            user: Some(b"app".to_vec()),
            swallow: 12,
            input: b"*2\r\n$3\r\nGET".to_vec(),
            output: b"+OK\r\n".to_vec(),
        };
        assert_eq!(Handed::decode(&h.encode()), Some(h));
        assert_eq!(
            Handed::decode(&Handed::default().encode()),
            Some(Handed::default())
        );
    }

    #[test]
    fn damaged_messages_are_refused() {
        let h = Handed {
            pool: "p".into(),
            input: b"get k".to_vec(),
            ..Handed::default()
        };
        let m = h.encode();
        for cut in 0..m.len() {
            assert_eq!(Handed::decode(&m[..cut]), None, "cut at {cut}");
        }
        let mut longer = m.clone();
        longer.push(0);
        assert_eq!(Handed::decode(&longer), None);
        let mut bad = m;
        bad[0] = b'X';
        assert_eq!(Handed::decode(&bad), None);
    }

    #[test]
    fn a_client_crosses_at_a_request_boundary_with_what_fits() {
        use crate::worker::conn::{BufPool, ReplySlot};
        let client = || {
            let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
            let session = crate::proto::redis::local::Session::new(1, None, false);
            Client::new(
                crate::net::Stream::Unix(sock),
                1,
                0,
                session,
                std::time::Instant::now(),
            )
        };
        let mut conns = Slab::new();
        let idle = conns.insert(Conn::Client(Box::new(client())));
        let mut c = client();
        c.push_reply(ReplySlot::default());
        let owed = conns.insert(Conn::Client(Box::new(c)));
        let mut c = client();
        c.set_eof();
        let gone = conns.insert(Conn::Client(Box::new(c)));
        let mut c = client();
        c.queue_output(&[b'x'; 60], &mut BufPool::default());
        let output = conns.insert(Conn::Client(Box::new(c)));
        assert_eq!(
            crossing(&conns),
            vec![idle, output],
            "not while owed a reply nor once gone"
        );
        let Some(Conn::Client(c)) = conns.get(owed) else {
            panic!("a client");
        };
        assert!(!c.may_cross(CARRY_MAX));
        let Some(Conn::Client(c)) = conns.get(gone) else {
            panic!("a client");
        };
        assert!(!c.may_cross(CARRY_MAX));
        let Some(Conn::Client(c)) = conns.get(output) else {
            panic!("a client");
        };
        assert!(c.may_cross(60) && !c.may_cross(59), "its output must fit");
    }
}
