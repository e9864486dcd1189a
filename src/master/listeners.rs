//! Listening sockets, created and held by the master so that a respawned
//! worker, a reloaded configuration and a new binary all take over the same
//! sockets (and their queued connections) instead of opening new ones.
//!
//! reuseport mode: one SO_REUSEPORT socket per pool and worker slot.
//! epoll_exclusive and accept_mutex modes (and unix sockets): one socket per
//! pool, shared by every worker.

use crate::config::{Config, ListenAddr, ListenerMode};
use crate::worker::ListenerFd;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Environment variable a new binary finds its inherited sockets in.
pub const INHERIT_ENV: &str = "WALNUT_LISTENERS";

/// Key of the inherited stats socket.
pub const STATS_KEY: &str = "stats#0";

/// Sockets keyed by "listen-address#slot".
#[derive(Default)]
pub struct ListenerSet {
    socks: HashMap<String, (OwnedFd, bool)>,
}

fn key_of(addr: &ListenAddr, slot: usize) -> String {
    match addr {
        ListenAddr::Tcp { host, port } => format!("{host}:{port}#{slot}"),
        ListenAddr::Unix { path, .. } => format!("{}#0", path.display()),
    }
}

impl ListenerSet {
    /// Adopt sockets handed down by a previous binary (hot upgrade).
    pub fn inherit() -> ListenerSet {
        let mut set = ListenerSet::default();
        let Ok(spec) = std::env::var(INHERIT_ENV) else {
            return set;
        };
        std::env::remove_var(INHERIT_ENV);
        for item in spec.split(';').filter(|s| !s.is_empty()) {
            let mut parts = item.rsplitn(3, '=');
            let (Some(tcp), Some(fd), Some(key)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(fd) = fd.parse::<RawFd>() else {
                continue;
            };
            // SAFETY: the previous binary passed us this open descriptor.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            set_cloexec(fd, true);
            set.socks.insert(key.to_string(), (owned, tcp == "t"));
        }
        crate::log_notice!("inherited {} listening sockets", set.socks.len());
        set
    }

    /// Take the inherited stats socket, if any.
    pub fn take_stats(&mut self) -> Option<OwnedFd> {
        self.socks.remove(STATS_KEY).map(|(fd, _)| fd)
    }

    /// Make sure every socket `config` needs exists (reusing ones already
    /// open), drop the ones it no longer uses, and return each worker
    /// slot's listeners.
    pub fn build(
        &mut self,
        config: &Config,
        workers: usize,
    ) -> std::io::Result<Vec<Vec<ListenerFd>>> {
        let mode = config.process.listener;
        let mut wanted: HashMap<String, (OwnedFd, bool)> = HashMap::new();
        let mut per_worker: Vec<Vec<ListenerFd>> = (0..workers).map(|_| Vec::new()).collect();
        for (pi, pool) in config.pools.iter().enumerate() {
            let shared =
                mode != ListenerMode::Reuseport || matches!(pool.listen, ListenAddr::Unix { .. });
            let nsock = if shared { 1 } else { workers };
            for slot in 0..nsock {
                let key = key_of(&pool.listen, slot);
                let entry = match self.socks.remove(&key).or_else(|| wanted.remove(&key)) {
                    Some(e) => e,
                    None => {
                        let fd = open(&pool.listen, pool.backlog, !shared)?;
                        crate::log_notice!(
                            "pool '{}' listening on {}{}",
                            pool.name,
                            key.split('#').next().unwrap_or(""),
                            if shared {
                                String::new()
                            } else {
                                format!(" (worker {slot})")
                            }
                        );
                        (fd, matches!(pool.listen, ListenAddr::Tcp { .. }))
                    }
                };
                for (w, list) in per_worker.iter_mut().enumerate() {
                    if shared || w == slot {
                        list.push(ListenerFd {
                            pool: pi,
                            fd: entry.0.try_clone()?,
                            tcp: entry.1,
                        });
                    }
                }
                wanted.insert(key, entry);
            }
        }
        // Sockets of removed pools close here.
        self.socks = wanted;
        Ok(per_worker)
    }

    /// Descriptors of every socket held here (a new worker closes them).
    pub fn raw_fds(&self) -> Vec<RawFd> {
        self.socks.values().map(|(fd, _)| fd.as_raw_fd()).collect()
    }

    /// Close the master's copies of worker slot `slot`'s own sockets
    /// (reuseport mode) once no worker will serve them again, so the kernel
    /// stops queueing connections where nobody accepts. The caller drops
    /// the slot's per-worker copies too. A later reload opens them anew.
    pub fn close_slot(&mut self, config: &Config, slot: usize) {
        if config.process.listener != ListenerMode::Reuseport {
            return;
        }
        for pool in config.pools.iter() {
            if matches!(pool.listen, ListenAddr::Unix { .. }) {
                continue;
            }
            if self.socks.remove(&key_of(&pool.listen, slot)).is_some() {
                crate::log_notice!(
                    "pool '{}': closed the listening socket of worker {slot}",
                    pool.name
                );
            }
        }
    }

    /// Clear close-on-exec and describe every socket for a new binary.
    pub fn export_for_exec(&self) -> String {
        let mut out = String::new();
        for (key, (fd, tcp)) in &self.socks {
            set_cloexec(fd.as_raw_fd(), false);
            out.push_str(&format!(
                "{key}={}={};",
                fd.as_raw_fd(),
                if *tcp { "t" } else { "u" }
            ));
        }
        out
    }

    /// Restore close-on-exec after a failed exec.
    pub fn restore_cloexec(&self) {
        for (fd, _) in self.socks.values() {
            set_cloexec(fd.as_raw_fd(), true);
        }
    }
}

fn open(addr: &ListenAddr, backlog: u32, reuseport: bool) -> std::io::Result<OwnedFd> {
    match addr {
        ListenAddr::Tcp { host, port } => {
            let sa = crate::net::resolve(host, *port)?;
            crate::net::listen_tcp(sa, backlog, reuseport)
        }
        ListenAddr::Unix { path, perm } => crate::net::listen_unix(path, *perm, backlog),
    }
    .map_err(|e| std::io::Error::new(e.kind(), format!("listen on {}: {e}", describe(addr))))
}

fn describe(addr: &ListenAddr) -> String {
    match addr {
        ListenAddr::Tcp { host, port } => format!("{host}:{port}"),
        ListenAddr::Unix { path, .. } => path.display().to_string(),
    }
}

/// Set or clear FD_CLOEXEC.
pub fn set_cloexec(fd: RawFd, on: bool) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let new = if on {
                flags | libc::FD_CLOEXEC
            } else {
                flags & !libc::FD_CLOEXEC
            };
            libc::fcntl(fd, libc::F_SETFD, new);
        }
    }
}

/// Borrow a raw descriptor (for logging and checks).
pub fn borrow(fd: &OwnedFd) -> BorrowedFd<'_> {
    // SAFETY: the OwnedFd outlives the borrow.
    unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) }
}
