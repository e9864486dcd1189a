//! Clients handed to this worker by a predecessor (a reload's old
//! generation, an upgraded binary's workers; see `handover.rs` for the
//! other side): the hand-in socket, the handover connections whose
//! message has not come yet, and taking a handed client up as if it had
//! been accepted. [`HandIn`] owns the sockets and acts with the poll
//! registry passed in; what it returns is a `NewClient` (its pool and
//! what it carries) for the worker to take in as it takes an accepted
//! one (`Worker::take_in`).

use super::conn::{BufPool, Client};
use super::handover::Handed;
use super::listen::NewClient;
use super::pool::PoolRt;
use super::tokens;
use crate::config::{AclUser, PoolConfig};
use crate::net::handover::{self, Received};
use crate::proto::redis::local::{Names, Session};
use mio::{Interest, Registry};
use slab::Slab;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

/// Most handover connections accepted per wakeup (other workers of the
/// successor take the rest).
const ACCEPT_BATCH: usize = 32;

/// The hand-in socket and its connections still waiting for a message.
#[derive(Debug)]
pub(super) struct HandIn {
    /// The socket clients are handed to this worker on (gone once this
    /// worker hands its own clients over).
    sock: Option<OwnedFd>,
    /// Handover connections waiting for their message.
    waiting: Slab<OwnedFd>,
    /// The socket may hold more connections than one pass took.
    again: bool,
}

/// What one handover connection gave.
pub(super) enum Arrival {
    /// A client: its message and descriptor.
    Client(Vec<u8>, OwnedFd),
    /// Nothing to take up (its message comes later, or never).
    Nothing,
    /// No connection is left on the socket now.
    Done,
}

impl HandIn {
    /// Clients handed over on `sock`, if any.
    pub(super) fn new(sock: Option<OwnedFd>) -> HandIn {
        HandIn {
            sock,
            waiting: Slab::new(),
            again: false,
        }
    }

    /// Start taking handed clients: watch the socket.
    pub(super) fn start(&self, reg: &Registry) -> std::io::Result<()> {
        if let Some(fd) = self.sock.as_ref().map(|l| l.as_raw_fd()) {
            reg.register(
                &mut mio::unix::SourceFd(&fd),
                tokens::HANDIN,
                Interest::READABLE,
            )?;
        }
        Ok(())
    }

    /// Take no more handed clients: the successor does.
    pub(super) fn stop(&mut self, reg: &Registry) {
        if let Some(l) = self.sock.take() {
            let fd = l.as_raw_fd();
            let _ = reg.deregister(&mut mio::unix::SourceFd(&fd));
        }
    }

    /// The socket may hold more than the last pass took: look again
    /// (without waiting for an event).
    #[inline]
    pub(super) fn again(&self) -> bool {
        self.again
    }

    /// [`HandIn::again`], cleared.
    pub(super) fn take_again(&mut self) -> bool {
        std::mem::take(&mut self.again)
    }

    /// No handover connection is waiting for its message.
    pub(super) fn none_waiting(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The clients the hand-in socket holds now, of at most
    /// `ACCEPT_BATCH` connections (other workers of the successor take the
    /// rest), each for its pool among `pools` (`new_client`); after a full
    /// batch more may wait, and [`HandIn::again`] says to look on the
    /// next pass.
    pub(super) fn arrivals(&mut self, reg: &Registry, pools: &[PoolRt]) -> Vec<NewClient> {
        let mut got = Vec::new();
        for _ in 0..ACCEPT_BATCH {
            match self.accept(reg) {
                Arrival::Client(msg, fd) => got.extend(new_client(&msg, fd, pools)),
                Arrival::Nothing => {}
                Arrival::Done => return got,
            }
        }
        self.again = true;
        got
    }

    /// The next connection on the hand-in socket: its client, or it is
    /// kept until its message comes.
    fn accept(&mut self, reg: &Registry) -> Arrival {
        let Some(l) = self.sock.as_ref().map(|l| l.as_raw_fd()) else {
            return Arrival::Done;
        };
        let conn = match handover::accept(l) {
            Ok(Some(conn)) => conn,
            Ok(None) => return Arrival::Done,
            Err(e) => {
                crate::log_warn!("handover accept failed: {e}");
                return Arrival::Done;
            }
        };
        match handover::recv(conn.as_raw_fd()) {
            Ok(Received::Client(msg, fd)) => return Arrival::Client(msg, fd),
            Ok(Received::Pending) => {
                let entry = self.waiting.vacant_entry();
                let token = tokens::handin_conn(entry.key());
                let raw = conn.as_raw_fd();
                if reg
                    .register(&mut mio::unix::SourceFd(&raw), token, Interest::READABLE)
                    .is_ok()
                {
                    entry.insert(conn);
                }
            }
            Ok(Received::Nothing) => {}
            Err(e) => crate::log_warn!("handover receive failed: {e}"),
        }
        Arrival::Nothing
    }

    /// A waiting handover connection is readable: its client (for its
    /// pool among `pools`), if its message came (the connection is done
    /// with then, client or not).
    pub(super) fn waiting_ready(
        &mut self,
        reg: &Registry,
        key: usize,
        pools: &[PoolRt],
    ) -> Option<NewClient> {
        let raw = self.waiting.get(key)?.as_raw_fd();
        let client = match handover::recv(raw) {
            Ok(Received::Pending) => return None,
            Ok(Received::Client(msg, fd)) => new_client(&msg, fd, pools),
            Ok(Received::Nothing) => None,
            Err(e) => {
                crate::log_warn!("handover receive failed: {e}");
                None
            }
        };
        let _ = reg.deregister(&mut mio::unix::SourceFd(&raw));
        self.waiting.remove(key);
        client
    }
}

/// The client handed over as `msg` on `fd`, for the pool among `pools`
/// that takes it up ([`Handed::taken_up`]), its socket tuned as an
/// accepted one's; none when no pool does (its connection closes).
fn new_client(msg: &[u8], fd: OwnedFd, pools: &[PoolRt]) -> Option<NewClient> {
    let (h, pool) = Handed::taken_up(msg, pools)?;
    let tcp = crate::net::is_tcp(&fd);
    let raw = fd.into_raw_fd();
    let sock = if tcp {
        // SAFETY: `raw` is a connected TCP socket we now own.
        crate::net::Stream::Tcp(unsafe { mio::net::TcpStream::from_raw_fd(raw) })
    } else {
        // SAFETY: `raw` is a connected unix stream socket we now own.
        crate::net::Stream::Unix(unsafe { mio::net::UnixStream::from_raw_fd(raw) })
    };
    if tcp {
        crate::net::tune_client(&sock, pools[pool].cfg.tcpkeepalive);
    }
    Some(NewClient {
        sock,
        pool,
        handed: Some(h),
    })
}

/// Why a handed client is not taken up.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Its pool is no longer configured.
    PoolGone,
    /// Its pool now speaks the other protocol.
    OtherProtocol,
}

impl Handed {
    /// The pool (index) that takes this client up, among `pools` (name,
    /// speaks Redis) in configuration order.
    pub(super) fn pool_in<'p>(
        &self,
        mut pools: impl Iterator<Item = (&'p str, bool)>,
    ) -> Result<usize, Refused> {
        let (i, (_, redis)) = pools
            .by_ref()
            .enumerate()
            .find(|(_, (name, _))| *name == self.pool)
            .ok_or(Refused::PoolGone)?;
        if redis != self.redis {
            return Err(Refused::OtherProtocol);
        }
        Ok(i)
    }

    /// The client handed over as `msg`, and the pool (index) among
    /// `pools` that takes it up; `None` (logged) when the message is not
    /// understood or no pool takes it (`pool_in`): its connection closes.
    pub(super) fn taken_up(msg: &[u8], pools: &[PoolRt]) -> Option<(Handed, usize)> {
        let Some(h) = Handed::decode(msg) else {
            crate::log_warn!("handover message not understood: connection closed");
            return None;
        };
        let by_name = pools.iter().map(|p| {
            (
                p.cfg.name.as_str(),
                p.proto == crate::proto::Protocol::Redis,
            )
        });
        match h.pool_in(by_name) {
            Ok(pool) => Some((h, pool)),
            Err(Refused::PoolGone) => {
                crate::log_notice!(
                    "handed a client of pool '{}', which is no longer configured: closing it",
                    h.pool
                );
                None
            }
            Err(Refused::OtherProtocol) => {
                crate::log_notice!(
                    "handed a client of pool '{}', which now speaks another protocol: closing it",
                    h.pool
                );
                None
            }
        }
    }

    /// What it carries, taken up by `c`, the client made for it in the
    /// pool configured as `cfg` now: its session under that
    /// configuration (`take_session`; open when the pool has neither
    /// password nor ACL users), the input still to discard, the unparsed
    /// start of its next request (in a buffer from `bufs`, only when
    /// there is one: an idle client holds no memory) and the replies not
    /// yet written. The bytes of output queued (0: nothing to write).
    pub(super) fn carry_into(
        mut self,
        c: &mut Client,
        cfg: &PoolConfig,
        bufs: &mut BufPool,
    ) -> usize {
        let open = cfg.redis_auth.is_none() && cfg.security.users.is_empty();
        c.set_session(self.take_session(c.session().id, open, &cfg.security.users));
        c.swallow_next(self.swallow as usize);
        if !self.input.is_empty() {
            let mut rbuf = bufs.take();
            rbuf.extend(&self.input);
            c.put_input(rbuf);
        }
        if !self.output.is_empty() {
            c.queue_output(&self.output, bufs);
        }
        self.output.len()
    }

    /// The client's session (connection `id`) under its pool's present
    /// configuration: `open` when the pool has neither password nor ACL
    /// users, `users` its ACL users. Its names are moved into it.
    pub(super) fn take_session(&mut self, id: u64, open: bool, users: &[AclUser]) -> Session {
        // Its ACL user, if this configuration still has it: a user removed
        // by the reload is logged out.
        let user = self.user.as_ref().map(|name| {
            users
                .iter()
                .position(|u| u.name.as_bytes() == name.as_slice())
        });
        let mut session = Session::new(id, None, false);
        session.resp3 = self.resp3;
        // A password set by this reload does not log out a client that
        // was in (as redis-server's CONFIG SET requirepass).
        session.authenticated = (self.authenticated && user != Some(None)) || open;
        session.user = user.flatten().map(|u| u as u16);
        session.set_names(Names {
            name: self.name.take(),
            lib_name: self.lib_name.take(),
            lib_ver: self.lib_ver.take(),
        });
        session
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> AclUser {
        AclUser {
            name: name.into(),
            password: "pw".into(),
            readonly: false,
            prefixes: Vec::new(),
        }
    }

    #[test]
    fn a_client_goes_to_its_pool_by_name_and_protocol() {
        let pools = [("cache", false), ("redis", true)];
        let h = |pool: &str, redis| Handed {
            pool: pool.into(),
            redis,
            ..Handed::default()
        };
        assert_eq!(h("redis", true).pool_in(pools.into_iter()), Ok(1));
        assert_eq!(h("cache", false).pool_in(pools.into_iter()), Ok(0));
        assert_eq!(
            h("sessions", true).pool_in(pools.into_iter()),
            Err(Refused::PoolGone)
        );
        assert_eq!(
            h("cache", true).pool_in(pools.into_iter()),
            Err(Refused::OtherProtocol)
        );
    }

    #[test]
    fn a_session_crosses_under_the_new_configuration() {
        let users = [user("ops"), user("app")];
        let mut h = Handed {
            resp3: true,
            authenticated: true,
            name: Some(b"conn-1".to_vec()),
            user: Some(b"app".to_vec()),
            ..Handed::default()
        };
        let s = h.take_session(7, false, &users);
        assert_eq!(s.id, 7);
        assert!(s.resp3 && s.authenticated);
        assert_eq!(s.user, Some(1), "found by name where it is now");
        assert_eq!(s.names().name.as_deref(), Some(&b"conn-1"[..]));
        assert_eq!(h.name, None, "the names moved into the session");
    }

    #[test]
    fn a_removed_user_is_logged_out_and_a_new_password_is_not() {
        // Its user is gone from the new configuration: logged out.
        let mut h = Handed {
            authenticated: true,
            user: Some(b"gone".to_vec()),
            ..Handed::default()
        };
        let s = h.take_session(1, false, &[user("app")]);
        assert!(!s.authenticated);
        assert_eq!(s.user, None);
        // A password set by the reload: a client that was in stays in.
        let mut h = Handed {
            authenticated: true,
            ..Handed::default()
        };
        assert!(h.take_session(1, false, &[]).authenticated);
        // One that was not stays out, unless the pool is open now.
        let mut h = Handed::default();
        assert!(!h.take_session(1, false, &[]).authenticated);
        assert!(h.take_session(1, true, &[]).authenticated);
    }

    #[test]
    fn a_handed_client_takes_up_its_input_output_and_session() {
        let cfg = |yaml: &str| {
            let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
                .expect("config parses");
            c.pools[0].clone()
        };
        let open = cfg(
            "rd:\n  listen: 127.0.0.1:22995\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 a\n",
        );
        let client = || {
            let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
            Client::new(
                crate::net::Stream::Unix(sock),
                9,
                0,
                Session::new(9, Some(b"pw"), false),
                std::time::Instant::now(),
            )
        };
        let mut bufs = BufPool::default();
        let mut c = client();
        let h = Handed {
            swallow: 3,
            input: b"*1\r\n$4\r\nPI".to_vec(),
            output: b"+PONG\r\n".to_vec(),
            ..Handed::default()
        };
        assert_eq!(
            h.carry_into(&mut c, &open, &mut bufs),
            7,
            "its replies queued"
        );
        assert_eq!(c.swallow(), 3);
        assert_eq!(c.input().bytes(), b"*1\r\n$4\r\nPI");
        assert_eq!(c.output().bytes(), b"+PONG\r\n");
        assert_eq!(c.session().id, 9, "the connection's own id");
        assert!(c.session().authenticated, "an open pool now");
        // Nothing carried: nothing queued, no buffer lent.
        let mut c = client();
        assert_eq!(Handed::default().carry_into(&mut c, &open, &mut bufs), 0);
        assert!(c.input().is_empty() && !c.has_output());
        let closed = cfg("rd:\n  listen: 127.0.0.1:22995\n  redis: true\n  redis_auth: pw\n  servers:\n    - 127.0.0.1:6379:1 a\n");
        let mut c = client();
        Handed::default().carry_into(&mut c, &closed, &mut bufs);
        assert!(!c.session().authenticated, "it never logged in");
    }

    #[test]
    fn a_handed_message_is_taken_up_by_its_pool_or_refused() {
        let c = crate::config::Config::from_str(
            "mc:\n  listen: 127.0.0.1:22995\n  servers:\n    - 127.0.0.1:11211:1 a\nrd:\n  listen: 127.0.0.1:22996\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 b\n",
            std::path::Path::new("t.yml"),
        )
        .expect("config parses");
        let pools: Vec<PoolRt> = c.pools.iter().map(|p| PoolRt::new(p, &[])).collect();
        let msg = |pool: &str, redis| {
            Handed {
                pool: pool.into(),
                redis,
                ..Handed::default()
            }
            .encode()
        };
        let (h, pool) = Handed::taken_up(&msg("rd", true), &pools).expect("taken up");
        assert_eq!((h.pool.as_str(), pool), ("rd", 1));
        assert!(Handed::taken_up(&msg("gone", true), &pools).is_none());
        assert!(
            Handed::taken_up(&msg("mc", true), &pools).is_none(),
            "another protocol now"
        );
        assert!(Handed::taken_up(b"?", &pools).is_none(), "not understood");
    }

    #[test]
    fn the_hand_in_socket_gives_what_it_holds_and_nothing_without_one() {
        let poll = mio::Poll::new().expect("poll");
        let c = crate::config::Config::from_str(
            "rd:\n  listen: 127.0.0.1:22996\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 b\n",
            std::path::Path::new("t.yml"),
        )
        .expect("config parses");
        let pools = [PoolRt::new(&c.pools[0], &[])];
        let mut none = HandIn::new(None);
        assert!(none.arrivals(poll.registry(), &pools).is_empty());
        assert!(!none.again(), "nothing to look at again");
        let name = format!("walnut-handin-test-{}", std::process::id());
        let sock = handover::listen(&name).expect("listen");
        let mut h = HandIn::new(Some(sock));
        assert!(h.arrivals(poll.registry(), &pools).is_empty());
        let msg = |pool: &str| {
            Handed {
                pool: pool.into(),
                redis: true,
                input: b"*1".to_vec(),
                ..Handed::default()
            }
            .encode()
        };
        let (client, _peer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        handover::send(&name, &msg("rd"), client.as_raw_fd()).expect("handed");
        let (gone, _peer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        handover::send(&name, &msg("gone"), gone.as_raw_fd()).expect("handed");
        let got = h.arrivals(poll.registry(), &pools);
        assert_eq!(got.len(), 1, "a client of a pool gone is not taken up");
        assert_eq!(got[0].pool, 0);
        assert!(matches!(got[0].sock, crate::net::Stream::Unix(_)));
        let carried = got[0].handed.as_ref().map(|h| h.input.as_slice());
        assert_eq!(carried, Some(&b"*1"[..]), "with what it carries");
        assert!(!h.again(), "fewer than a batch: nothing left");
        assert!(h.none_waiting());
    }
}
