//! The worker's intake of new clients: its listening sockets, registered
//! per listener mode (see `accept.rs`), the accept policy with its
//! `max_connections` cap, and accepting. [`Intake`] owns all of it and
//! acts with the poll registry passed in; what a listener gives is a
//! batch of [`NewClient`]s (`Intake::accept_all`), as the hand-in
//! socket's is (`handin.rs`). One executor, `Worker::take_in`, makes a
//! client of each ([`PoolRt::new_client`]) for the intake to admit into
//! the connection table ([`Intake::admit`]), which counts it.

use super::accept::{self, AcceptMutex, AcceptPolicy, Cap};
use super::conn::{self, Conn, ConnTable};
use super::handover::Handed;
use super::pool::PoolRt;
use super::tokens;
use super::Worker;
use crate::config::ListenerMode;
use crate::net::{Listener, Stream};
use crate::stats::shm::{Region, StatsSlot};
use crate::stats::{PoolField, WorkerField};
use mio::{Interest, Registry, Token};
use slab::Slab;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Listening sockets, how this worker takes its share of them, and
/// whether it takes any.
pub(super) struct Intake<'a> {
    /// The listening sockets, with the pool each serves.
    listeners: Vec<(Listener, usize)>,
    /// Listener mode, accept mutex, registration.
    policy: AcceptPolicy<'a>,
    /// False once stopping (graceful stop or handover): never again.
    accepting: bool,
    /// `max_connections`.
    cap: Cap,
}

/// A client new to this worker, to take in (`Worker::take_in`): its
/// socket and pool, accepted on a listener, or handed over by a
/// predecessor with what it carries.
pub(super) struct NewClient {
    pub sock: Stream,
    pub pool: usize,
    /// Handed over: its state, taken up once it is in the table.
    pub handed: Option<Handed>,
}

/// What one accept on a listener gave.
pub(super) enum Accepted {
    /// A client of this pool, to add to the loop.
    Client(Stream, usize),
    /// A connection accepted and closed at once (its pool is full, or TLS
    /// could not start): look for the next.
    Closed,
    /// Nothing more now.
    Done,
}

impl<'a> Intake<'a> {
    /// An intake of these listeners, not yet registered.
    pub(super) fn new(
        listeners: Vec<(Listener, usize)>,
        mode: ListenerMode,
        mutex: Option<&'a AcceptMutex>,
        delay_ms: u64,
        max_conns: usize,
    ) -> Self {
        Intake {
            listeners,
            policy: AcceptPolicy::new(mode, mutex, delay_ms),
            accepting: true,
            cap: Cap::new(max_conns),
        }
    }

    /// Not stopping: clients are still accepted (or will be, below the
    /// cap or with the mutex).
    #[inline]
    pub(super) fn accepting(&self) -> bool {
        self.accepting
    }

    /// Start taking clients: watch the listeners, except in accept_mutex
    /// mode, where only the mutex holder watches them.
    pub(super) fn start(&mut self, reg: &Registry) -> std::io::Result<()> {
        if self.policy.mode != ListenerMode::AcceptMutex {
            self.register(reg)?;
        }
        Ok(())
    }

    /// Stop for good (graceful stop, handover): the listeners are closed
    /// here (the master keeps its own) and the mutex given up.
    pub(super) fn stop(&mut self, reg: &Registry) {
        if !self.accepting {
            return;
        }
        self.accepting = false;
        self.deregister(reg);
        self.listeners.clear();
        if let Some(m) = self.policy.mutex {
            m.unlock(std::process::id() as u64);
        }
    }

    fn register(&mut self, reg: &Registry) -> std::io::Result<()> {
        if self.policy.registered {
            return Ok(());
        }
        for (i, (l, _)) in self.listeners.iter_mut().enumerate() {
            let token = tokens::listener(i);
            if self.policy.mode == ListenerMode::EpollExclusive {
                accept::add_exclusive(reg.as_raw_fd(), l.as_raw_fd(), token.0 as u64)?;
            } else {
                reg.register(l, token, Interest::READABLE)?;
            }
        }
        self.policy.registered = true;
        Ok(())
    }

    fn deregister(&mut self, reg: &Registry) {
        if !self.policy.registered {
            return;
        }
        for (l, _) in self.listeners.iter_mut() {
            if self.policy.mode == ListenerMode::EpollExclusive {
                // SAFETY: removing a descriptor we added to our own epoll set.
                unsafe {
                    libc::epoll_ctl(
                        reg.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        l.as_raw_fd(),
                        std::ptr::null_mut(),
                    );
                }
            } else {
                let _ = reg.deregister(l);
            }
        }
        self.policy.registered = false;
    }

    /// accept_mutex mode, before a wait: take the lock unless this worker
    /// is loaded well above the average (`accept::loaded`) or capped, and
    /// watch the listeners only while holding it. Returns how long the
    /// wait may last at most when the lock is not held (to try again).
    /// Nothing while `gated` (no client is taken before the gate opens).
    pub(super) fn trylock(
        &mut self,
        reg: &Registry,
        region: &Region,
        slot: usize,
        gated: bool,
    ) -> Option<Duration> {
        if gated || self.policy.mode != ListenerMode::AcceptMutex || !self.accepting {
            return None;
        }
        if let Some(m) = self.policy.mutex {
            let mine = region.worker_get(slot, WorkerField::CurrConnections);
            let sum = region.worker_sum(WorkerField::CurrConnections);
            let loaded = accept::loaded(mine, sum, region.slots() as u64) || self.cap.capped();
            if !loaded && m.try_lock(std::process::id() as u64) {
                self.policy.held = true;
                let _ = self.register(reg);
            } else {
                self.deregister(reg);
            }
        }
        (!self.policy.held).then_some(self.policy.delay)
    }

    /// After the accept events of a pass: give the mutex back (nginx's
    /// posted accept events come first for this).
    pub(super) fn release(&mut self) {
        if self.policy.held {
            if let Some(m) = self.policy.mutex {
                m.unlock(std::process::id() as u64);
            }
            self.policy.held = false;
        }
    }

    /// What listener `idx` holds now, accepted: the clients for the
    /// worker to take in, until the listener has no more or the cap is
    /// reached. Each counts towards the cap and its pool's
    /// `client_connections` as if already taken in.
    pub(super) fn accept_all(
        &mut self,
        idx: usize,
        reg: &Registry,
        stats: &StatsSlot,
        pools: &[PoolRt],
    ) -> Vec<NewClient> {
        let mut got = Vec::new();
        let mut first = true;
        loop {
            match self.accept(idx, first, got.len(), reg, stats, pools) {
                Accepted::Client(sock, pool) => got.push(NewClient {
                    sock,
                    pool,
                    handed: None,
                }),
                Accepted::Closed => {}
                Accepted::Done => return got,
            }
            first = false;
        }
    }

    /// Accept the next connection on listener `idx`; `first` says none
    /// came yet in this run of accepts, `taken` how many of it are not
    /// yet in the worker's clients (the cap and the pool's limit count
    /// them).
    fn accept(
        &mut self,
        idx: usize,
        first: bool,
        taken: usize,
        reg: &Registry,
        stats: &StatsSlot,
        pools: &[PoolRt],
    ) -> Accepted {
        if self.cap.capped() {
            // max_connections reached: the rest waits in the backlog
            // (and an exclusive listener must not be re-added).
            return Accepted::Done;
        }
        let Some((listener, pool)) = self.listeners.get(idx) else {
            return Accepted::Done;
        };
        let pool = *pool;
        let sock = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if first {
                    stats.worker_add(WorkerField::AcceptEagain, 1);
                } else if self.policy.mode == ListenerMode::EpollExclusive {
                    let fd = listener.as_raw_fd();
                    let token = tokens::listener(idx).0 as u64;
                    let _ = accept::requeue_exclusive(reg.as_raw_fd(), fd, token);
                }
                return Accepted::Done;
            }
            Err(e) => {
                crate::log_warn!("accept on pool '{}' failed: {}", pools[pool].cfg.name, e);
                return Accepted::Done;
            }
        };
        let open = stats.get_worker(WorkerField::CurrConnections) as usize + taken;
        if self.cap.reached(open) {
            crate::log_notice!(
                "{} client connections: max_connections reached, not accepting until below 90%",
                open + 1
            );
            self.deregister(reg);
        }
        let p = &pools[pool];
        if p.cfg.client_connections > 0
            && p.clients as usize + taken >= p.cfg.client_connections as usize
        {
            crate::log_info!(
                "pool '{}': client_connections limit {} reached, closing new connection",
                p.cfg.name,
                p.cfg.client_connections
            );
            drop(sock);
            return Accepted::Closed;
        }
        if sock.is_tcp() {
            crate::net::tune_client(&sock, p.cfg.tcpkeepalive);
        }
        match p.tls.accepted(sock) {
            Ok(s) => Accepted::Client(s, pool),
            Err(e) => {
                crate::log_error!("pool '{}': cannot start TLS: {}", p.cfg.name, e);
                Accepted::Closed
            }
        }
    }

    /// A new client, accepted or handed over, joins the connection table
    /// and is watched: counted in its pool (`pool`, at index `idx`) and
    /// in the worker's clients. Its token; none when it could not be
    /// watched (it is closed then, uncounted).
    pub(super) fn admit(
        &mut self,
        conns: &mut Slab<Conn>,
        reg: &Registry,
        mut c: conn::Client,
        pool: &mut PoolRt,
        stats: &StatsSlot<'_>,
    ) -> Option<Token> {
        let idx = c.pool();
        crate::log_pverb!(
            "client {} connected to pool '{}'",
            crate::net::peer_of(c.sock().as_raw_fd()),
            pool.cfg.name
        );
        let entry = conns.vacant_entry();
        let token = Token(entry.key());
        reg.register(c.sock_mut(), token, Interest::READABLE | Interest::WRITABLE)
            .ok()?;
        entry.insert(Conn::Client(Box::new(c)));
        pool.clients += 1;
        stats.pool_add(idx, PoolField::ClientConnections, 1);
        stats.worker_add(WorkerField::CurrConnections, 1);
        Some(token)
    }

    /// Client `c` left (closed or handed over, out of the connection
    /// table and no longer watched): it no longer counts in its pool
    /// (`pool`) nor in the worker's clients, and, while paused at the cap,
    /// accepting resumes once the clients held are below 90% of it.
    pub(super) fn client_left(
        &mut self,
        c: &conn::Client,
        pool: &mut PoolRt,
        stats: &StatsSlot<'_>,
        reg: &Registry,
    ) {
        pool.clients = pool.clients.saturating_sub(1);
        stats.pool_sub(c.pool(), PoolField::ClientConnections, 1);
        stats.worker_sub(WorkerField::CurrConnections, 1);
        if self.cap.capped() {
            let open = stats.get_worker(WorkerField::CurrConnections) as usize;
            self.uncap(open, reg);
        }
    }

    /// A client left, `open` are held now: resume accepting once below
    /// 90% of the cap.
    fn uncap(&mut self, open: usize, reg: &Registry) {
        if !self.cap.below(open) {
            return;
        }
        if self.accepting && self.policy.mode != ListenerMode::AcceptMutex {
            let _ = self.register(reg);
        }
        crate::log_notice!("{open} client connections: accepting again");
    }
}

impl PoolRt {
    /// A new client of this pool (at index `idx`) on `sock`, connection
    /// `id`: its session starts logged in unless the pool has a password
    /// (`redis_auth`) or ACL users.
    pub(super) fn new_client(
        &self,
        sock: Stream,
        idx: usize,
        id: u64,
        now: Instant,
    ) -> conn::Client {
        let auth = self.cfg.redis_auth.as_deref().map(str::as_bytes);
        let users = !self.cfg.security.users.is_empty();
        let session = crate::proto::redis::local::Session::new(id, auth, users);
        conn::Client::new(sock, id, idx, session, now)
    }
}

impl Worker<'_> {
    /// Take in the clients `arrived`, accepted or handed over: each made
    /// a client of its pool and admitted; one handed over takes up what
    /// it carries and is read at once (what it sent meanwhile waits in
    /// its socket, behind the carried input).
    pub(super) fn take_in(&mut self, arrived: impl IntoIterator<Item = NewClient>, now: Instant) {
        for NewClient { sock, pool, handed } in arrived {
            let c = self.pools[pool].new_client(sock, pool, self.ids.next(), now);
            let (reg, p) = (self.poll.registry(), &mut self.pools[pool]);
            let Some(token) = self.intake.admit(&mut self.conns, reg, c, p, &self.stats) else {
                continue;
            };
            let Some(h) = handed else {
                self.stats.worker_add(WorkerField::TotalConnections, 1);
                continue;
            };
            self.stats.worker_add(WorkerField::HandedIn, 1);
            let Some(c) = self.conns.client_mut(token.0) else {
                continue;
            };
            let out = h.carry_into(c, &self.pools[pool].cfg, &mut self.bufs);
            if out > 0 {
                self.dirty.client(token);
                self.add_out(out);
            }
            self.read_client(token, now, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::shm::Layout;

    /// Redis pool `a` (one server) as configured with `extra`.
    fn pool(extra: &str) -> PoolRt {
        let yaml = format!(
            "a:\n  listen: 127.0.0.1:22121\n  redis: true\n{extra}  servers:\n   - 127.0.0.1:6379:1\n"
        );
        let c = crate::config::Config::from_str(&yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    /// A client of pool 0 on one end of a socket pair (the other kept).
    fn client(p: &PoolRt, id: u64) -> (conn::Client, mio::net::UnixStream) {
        let (sock, peer) = mio::net::UnixStream::pair().expect("socket pair");
        (
            p.new_client(Stream::Unix(sock), 0, id, Instant::now()),
            peer,
        )
    }

    #[test]
    fn a_new_client_is_logged_in_unless_its_pool_has_a_password() {
        let open = pool("");
        let (c, _peer) = client(&open, 7);
        assert!(c.session().authenticated && c.id() == 7 && c.pool() == 0);
        let shut = pool("  redis_auth: secret\n");
        let (c, _peer) = client(&shut, 8);
        assert!(!c.session().authenticated);
    }

    /// A unix listener of pool 0 with `n` connections waiting (their
    /// client ends kept), at a path of its own named `name`.
    fn listening(name: &str, n: usize) -> (Listener, Vec<std::os::unix::net::UnixStream>) {
        let dir = std::env::temp_dir().join(format!("walnut-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = mio::net::UnixListener::bind(&dir).expect("listen");
        let peers = (0..n)
            .map(|_| std::os::unix::net::UnixStream::connect(&dir).expect("connect"))
            .collect();
        let _ = std::fs::remove_file(&dir);
        (Listener::Unix(l), peers)
    }

    #[test]
    fn a_listener_gives_its_clients_up_to_the_pools_limit_and_the_cap() {
        let region = Region::new(Layout::new(vec![1], vec![0]), 1).expect("stats region");
        let stats = region.slot(0);
        let poll = mio::Poll::new().expect("poll");
        let reg = poll.registry();
        let (l, _peers) = listening("accept-all", 3);
        let mut intake = Intake::new(vec![(l, 0)], ListenerMode::Reuseport, None, 0, 0);
        let pools = [pool("  client_connections: 2\n")];
        let got = intake.accept_all(0, reg, &stats, &pools);
        assert_eq!(got.len(), 2, "the third is past the pool's limit");
        assert!(got.iter().all(|c| c.pool == 0 && c.handed.is_none()));
        assert!(intake.accept_all(0, reg, &stats, &pools).is_empty());
        assert_eq!(stats.get_worker(WorkerField::AcceptEagain), 1);
        let (l, _peers) = listening("accept-cap", 3);
        let mut intake = Intake::new(vec![(l, 0)], ListenerMode::Reuseport, None, 0, 2);
        let got = intake.accept_all(0, reg, &stats, &[pool("")]);
        assert_eq!(got.len(), 2, "the cap reached by the second");
        assert!(intake.cap.capped());
    }

    #[test]
    fn no_accept_lock_is_tried_while_the_gate_is_shut() {
        let region = Region::new(Layout::new(vec![1], vec![0]), 1).expect("stats region");
        let poll = mio::Poll::new().expect("poll");
        let mut intake = Intake::new(Vec::new(), ListenerMode::AcceptMutex, None, 5, 0);
        let reg = poll.registry();
        assert_eq!(intake.trylock(reg, &region, 0, true), None);
        let retry = intake.trylock(reg, &region, 0, false);
        assert_eq!(
            retry,
            Some(Duration::from_millis(5)),
            "not held: tried again"
        );
        let mut other = Intake::new(Vec::new(), ListenerMode::Reuseport, None, 5, 0);
        assert_eq!(other.trylock(reg, &region, 0, false), None, "no mutex mode");
    }

    #[test]
    fn clients_admitted_and_left_are_counted_and_a_capped_intake_accepts_again_below_ninety_percent(
    ) {
        let region = Region::new(Layout::new(vec![1], vec![0]), 1).expect("stats region");
        let stats = region.slot(0);
        let poll = mio::Poll::new().expect("poll");
        let reg = poll.registry();
        let mut intake = Intake::new(Vec::new(), ListenerMode::Reuseport, None, 0, 10);
        let mut p = pool("");
        let mut conns = Slab::new();
        let mut peers = Vec::new();
        for id in 0..9 {
            let (c, peer) = client(&p, id);
            peers.push(peer);
            assert!(intake.admit(&mut conns, reg, c, &mut p, &stats).is_some());
        }
        assert_eq!(p.clients, 9);
        assert_eq!(stats.get_pool(0, PoolField::ClientConnections), 9);
        assert_eq!(stats.get_worker(WorkerField::CurrConnections), 9);
        let leave = |conns: &mut Slab<Conn>, intake: &mut Intake, p: &mut PoolRt| {
            let k = conns.iter().next().map(|(k, _)| k).expect("a client");
            let Conn::Client(c) = conns.remove(k) else {
                panic!("a client");
            };
            intake.client_left(&c, p, &stats, reg);
        };
        leave(&mut conns, &mut intake, &mut p);
        assert_eq!((p.clients, conns.len()), (8, 8));
        assert_eq!(stats.get_pool(0, PoolField::ClientConnections), 8);
        assert!(!intake.cap.capped(), "never capped: nothing changes");
        for id in 9..11 {
            // The tenth client caps it.
            let open = stats.get_worker(WorkerField::CurrConnections) as usize;
            assert_eq!(intake.cap.reached(open), open == 9);
            let (c, peer) = client(&p, id);
            peers.push(peer);
            intake.admit(&mut conns, reg, c, &mut p, &stats);
        }
        leave(&mut conns, &mut intake, &mut p);
        assert!(intake.cap.capped(), "9 of 10 is not below 90 %");
        leave(&mut conns, &mut intake, &mut p);
        assert!(!intake.cap.capped(), "8 of 10 is");
        assert_eq!(stats.get_worker(WorkerField::CurrConnections), 8);
    }
}
