//! The worker's intake of new clients: its listening sockets, registered
//! per listener mode (see `accept.rs`), the accept policy with its
//! `max_connections` cap, and accepting. [`Intake`] owns all of it and
//! acts with the poll registry passed in; the worker only adds the
//! clients it returns to the loop ([`Worker::insert_client`]).

use super::accept::{self, AcceptMutex, AcceptPolicy, Cap};
use super::conn::{self, Conn};
use super::pool::PoolRt;
use super::tokens;
use super::Worker;
use crate::config::ListenerMode;
use crate::net::{Listener, Stream};
use crate::stats::shm::{Region, StatsSlot};
use crate::stats::WorkerField;
use mio::{Interest, Registry, Token};
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
    pub(super) fn trylock(
        &mut self,
        reg: &Registry,
        region: &Region,
        slot: usize,
    ) -> Option<Duration> {
        if self.policy.mode != ListenerMode::AcceptMutex || !self.accepting {
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

    /// Accept the next connection on listener `idx`; `first` says none
    /// came yet in this run of accepts. `open` is how many clients the
    /// worker holds (the cap is checked against it).
    pub(super) fn accept(
        &mut self,
        idx: usize,
        first: bool,
        open: usize,
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
        if self.cap.reached(open) {
            crate::log_notice!(
                "{} client connections: max_connections reached, not accepting until below 90%",
                open + 1
            );
            self.deregister(reg);
        }
        let p = &pools[pool];
        if p.cfg.client_connections > 0 && p.clients >= p.cfg.client_connections {
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

    /// A client left (closed or handed over): while paused at the cap,
    /// resume accepting once the clients held (`stats`' count) are below
    /// 90% of it.
    pub(super) fn client_left(&mut self, stats: &StatsSlot<'_>, reg: &Registry) {
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

impl Worker<'_> {
    /// A listener is readable: accept what it has and add the clients.
    pub(super) fn accept(&mut self, idx: usize, now: Instant) {
        let mut first = true;
        loop {
            let open = self.stats.get_worker(WorkerField::CurrConnections) as usize;
            let reg = self.poll.registry();
            match self
                .intake
                .accept(idx, first, open, reg, &self.stats, &self.pools)
            {
                Accepted::Client(sock, pool) => {
                    if self.insert_client(sock, pool, now).is_some() {
                        self.stats.worker_add(WorkerField::TotalConnections, 1);
                    }
                }
                Accepted::Closed => {}
                Accepted::Done => return,
            }
            first = false;
        }
    }

    /// Add a client connection of `pool` (accepted, or handed over by a
    /// predecessor) and watch it.
    pub(super) fn insert_client(
        &mut self,
        mut sock: crate::net::Stream,
        pool: usize,
        now: Instant,
    ) -> Option<Token> {
        let id = self.ids.next();
        crate::log_pverb!(
            "client {} connected to pool '{}'",
            crate::net::peer_of(std::os::fd::AsRawFd::as_raw_fd(&sock)),
            self.pools[pool].cfg.name
        );
        let entry = self.conns.vacant_entry();
        let token = Token(entry.key());
        self.poll
            .registry()
            .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
            .ok()?;
        entry.insert(Conn::Client(Box::new(conn::Client::new(
            sock,
            id,
            pool,
            crate::proto::redis::local::Session::new(
                id,
                self.pools[pool]
                    .cfg
                    .redis_auth
                    .as_deref()
                    .map(str::as_bytes),
                !self.pools[pool].cfg.security.users.is_empty(),
            ),
            now,
        ))));
        self.pools[pool].clients += 1;
        self.stats
            .pool_add(pool, crate::stats::PoolField::ClientConnections, 1);
        self.stats.worker_add(WorkerField::CurrConnections, 1);
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::shm::Layout;

    #[test]
    fn a_capped_intake_accepts_again_below_ninety_percent() {
        let region = Region::new(Layout::new(vec![1], vec![0]), 1).expect("stats region");
        let stats = region.slot(0);
        let poll = mio::Poll::new().expect("poll");
        let mut intake = Intake::new(Vec::new(), ListenerMode::Reuseport, None, 0, 10);
        stats.worker_set(WorkerField::CurrConnections, 5);
        intake.client_left(&stats, poll.registry());
        assert!(!intake.cap.capped(), "never capped: nothing changes");
        assert!(intake.cap.reached(9), "the tenth client caps it");
        stats.worker_set(WorkerField::CurrConnections, 9);
        intake.client_left(&stats, poll.registry());
        assert!(intake.cap.capped(), "9 of 10 is not below 90 %");
        stats.worker_set(WorkerField::CurrConnections, 8);
        intake.client_left(&stats, poll.registry());
        assert!(!intake.cap.capped(), "8 of 10 is");
    }
}
