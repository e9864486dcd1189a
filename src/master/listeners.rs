//! Listening sockets, created and held by the master so that a respawned
//! worker, a reloaded configuration and a new binary all take over the same
//! sockets (and their queued connections) instead of opening new ones.
//!
//! reuseport mode: one SO_REUSEPORT socket per pool and worker slot.
//! epoll_exclusive and accept_mutex modes (and unix sockets): one socket per
//! pool, shared by every worker.
//!
//! A TCP port another process listens on is refused, unless the pool says
//! `reuseport: true`: its sockets then join that process's SO_REUSEPORT
//! group (a nutcracker built from twemproxy's master with the same key,
//! another walnut), the way to take a port over without a gap. The flag
//! is read when a socket is opened; a reload keeps the sockets it finds.

use crate::config::{Config, ListenAddr, ListenerMode};
use crate::worker::ListenerFd;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Environment variable a new binary finds its inherited sockets in.
pub const INHERIT_ENV: &str = "WALNUT_LISTENERS";

/// Key of the inherited stats socket.
pub const STATS_KEY: &str = "stats#0";

/// Key of the inherited admin socket.
pub const ADMIN_KEY: &str = "admin#0";

/// Sockets keyed by "listen-address#slot".
#[derive(Default)]
pub struct ListenerSet {
    socks: HashMap<String, (OwnedFd, bool)>,
    /// Keys held before the build in progress.
    held: std::collections::HashSet<String>,
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

    /// Take the inherited admin socket, if any.
    pub fn take_admin(&mut self) -> Option<OwnedFd> {
        self.socks.remove(ADMIN_KEY).map(|(fd, _)| fd)
    }

    /// Make sure every socket `config` needs exists (reusing ones already
    /// open), drop the ones it no longer uses, and return each worker
    /// slot's listeners.
    pub fn build(
        &mut self,
        config: &Config,
        workers: usize,
    ) -> std::io::Result<Vec<Vec<ListenerFd>>> {
        let mut wanted: HashMap<String, (OwnedFd, bool)> = HashMap::new();
        match self.build_into(config, workers, &mut wanted) {
            Ok(per_worker) => {
                // Sockets of removed pools close here.
                self.socks = wanted;
                Ok(per_worker)
            }
            Err(e) => {
                // Keep every socket the running generation uses (a failed
                // reload changes nothing); new ones close.
                for (k, v) in wanted {
                    if !self.socks.contains_key(&k) && self.held.contains(&k) {
                        self.socks.insert(k, v);
                    }
                }
                Err(e)
            }
        }
    }

    fn build_into(
        &mut self,
        config: &Config,
        workers: usize,
        wanted: &mut HashMap<String, (OwnedFd, bool)>,
    ) -> std::io::Result<Vec<Vec<ListenerFd>>> {
        self.held = self.socks.keys().cloned().collect();
        let mode = config.process.listener;
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
                        // A fresh SO_REUSEPORT group would silently share a
                        // port another process (or another pool of this
                        // file) listens on: refuse that, as nutcracker
                        // does, unless the pool asks to share
                        // (`reuseport: true`, twemproxy's key for it).
                        if !shared && slot == 0 && !pool.reuseport {
                            probe(&pool.listen)?;
                        }
                        let fd = open(&pool.listen, pool.backlog, !shared || pool.reuseport)?;
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

/// Fail with "address in use" if a listening socket holds `addr` (or a
/// wildcard address over it): a bind with SO_REUSEADDR but without
/// SO_REUSEPORT is refused then, and only then (TIME_WAIT leftovers do
/// not count).
fn probe(addr: &ListenAddr) -> std::io::Result<()> {
    let ListenAddr::Tcp { host, port } = addr else {
        return Ok(());
    };
    let sa = crate::net::resolve(host, *port)?;
    let s = socket2::Socket::new(
        socket2::Domain::for_address(sa),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.set_reuse_address(true)?;
    s.bind(&sa.into()).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "listen on {}: {e} (another process, or another pool of this configuration, listens there)",
                describe(addr)
            ),
        )
    })
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
