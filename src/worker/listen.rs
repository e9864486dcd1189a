//! The worker's listening sockets: registered per listener mode (see
//! `accept.rs`), accepted from, and clients added to the loop.

use super::conn::{self, Conn};
use super::Worker;
use super::{accept, tokens};
use crate::config::ListenerMode;
use crate::stats::WorkerField;
use mio::{Interest, Token};
use std::os::fd::AsRawFd;
use std::time::Instant;

impl Worker<'_> {
    pub(super) fn stop_accepting(&mut self) {
        self.accepting = false;
        self.deregister_listeners();
        self.listeners.clear();
        if let Some(m) = self.accept.mutex {
            m.unlock(std::process::id() as u64);
        }
    }

    pub(super) fn register_listeners(&mut self) -> std::io::Result<()> {
        if self.accept.registered {
            return Ok(());
        }
        for (i, (l, _)) in self.listeners.iter_mut().enumerate() {
            let token = tokens::listener(i);
            if self.accept.mode == ListenerMode::EpollExclusive {
                accept::add_exclusive(self.poll.as_raw_fd(), l.as_raw_fd(), token.0 as u64)?;
            } else {
                self.poll
                    .registry()
                    .register(l, token, Interest::READABLE)?;
            }
        }
        self.accept.registered = true;
        Ok(())
    }

    pub(super) fn deregister_listeners(&mut self) {
        if !self.accept.registered {
            return;
        }
        for (l, _) in self.listeners.iter_mut() {
            if self.accept.mode == ListenerMode::EpollExclusive {
                // SAFETY: removing a descriptor we added to our own epoll set.
                unsafe {
                    libc::epoll_ctl(
                        self.poll.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        l.as_raw_fd(),
                        std::ptr::null_mut(),
                    );
                }
            } else {
                let _ = self.poll.registry().deregister(l);
            }
        }
        self.accept.registered = false;
    }

    /// accept_mutex mode: take the lock unless this worker is loaded well
    /// above the average, and watch the listeners only while holding it.
    pub(super) fn trylock_accept(&mut self) {
        let Some(m) = self.accept.mutex else {
            return;
        };
        let mine = self
            .region
            .worker_get(self.slot, WorkerField::CurrConnections);
        let slots = self.region.slots() as u64;
        let avg = self.region.worker_sum(WorkerField::CurrConnections) / slots.max(1);
        // The threshold: skip the lock while holding 1/8 more than the
        // average plus a small constant (as nginx's accept_mutex holds off a
        // worker past 7/8 of its connections).
        let loaded = (slots > 1 && mine > avg + avg / 8 + 4) || self.capped;
        if !loaded && m.try_lock(std::process::id() as u64) {
            self.accept.held = true;
            let _ = self.register_listeners();
        } else {
            self.deregister_listeners();
        }
    }

    pub(super) fn accept(&mut self, idx: usize, now: Instant) {
        let mut accepted = 0u64;
        loop {
            if self.capped {
                // max_connections reached: the rest waits in the backlog
                // (and an exclusive listener must not be re-added).
                return;
            }
            let Some((listener, pool)) = self.listeners.get(idx) else {
                return;
            };
            let pool = *pool;
            let sock = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if accepted == 0 {
                        self.stats.worker_add(WorkerField::AcceptEagain, 1);
                    } else if self.accept.mode == ListenerMode::EpollExclusive {
                        let fd = listener.as_raw_fd();
                        let token = tokens::listener(idx).0 as u64;
                        let _ = accept::requeue_exclusive(self.poll.as_raw_fd(), fd, token);
                    }
                    return;
                }
                Err(e) => {
                    crate::log_warn!(
                        "accept on pool '{}' failed: {}",
                        self.pools[pool].cfg.name,
                        e
                    );
                    return;
                }
            };
            accepted += 1;
            if self.max_conns > 0 {
                let open = self.stats.get_worker(WorkerField::CurrConnections) as usize;
                if open + 1 >= self.max_conns && !self.capped {
                    crate::log_notice!(
                        "{} client connections: max_connections reached, not accepting until below 90%",
                        open + 1
                    );
                    self.capped = true;
                    self.deregister_listeners();
                }
            }
            let p = &self.pools[pool];
            if p.cfg.client_connections > 0 && p.clients >= p.cfg.client_connections {
                crate::log_info!(
                    "pool '{}': client_connections limit {} reached, closing new connection",
                    p.cfg.name,
                    p.cfg.client_connections
                );
                drop(sock);
                continue;
            }
            if sock.is_tcp() {
                crate::net::tune_client(&sock, p.cfg.tcpkeepalive);
            }
            let sock = match p.tls.accepted(sock) {
                Ok(s) => s,
                Err(e) => {
                    crate::log_error!("pool '{}': cannot start TLS: {}", p.cfg.name, e);
                    continue;
                }
            };
            if self.insert_client(sock, pool, now).is_some() {
                self.stats.worker_add(WorkerField::TotalConnections, 1);
            }
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
        let id = self.next_id();
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
