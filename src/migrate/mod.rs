//! The background migrator of a pool whose servers changed under a reload
//! (`migration: true`): one process per pool, forked by the master, that
//! walks every old server's keys and moves each key whose owner changed to
//! its new owner, rate-limited, then tells the master it is done (exit 0)
//! so workers stop pulling keys on demand (`worker/migrate.rs`).
//!
//! A key moves exactly as a worker pulls one: read with its TTL from the
//! old owner, written to the new owner only if absent there (a newer value
//! written meanwhile wins), deleted from the old owner. Redis: `SCAN` +
//! `DUMP`/`PTTL` → `RESTORE` (no `REPLACE`) + `DEL`, any data type;
//! memcached: `lru_crawler metadump all` (memcached ≥ 1.4.31) + `mg k v f t`
//! → `ms ... ME` + `md`. Repeating any of it is harmless, so a migrator
//! that dies is simply started again, and it ends after a full pass that
//! moved nothing. It is a plain blocking program: it is not a worker and
//! has no event loop to keep responsive.

mod client;
mod progress;

pub use progress::{Progress, State};

use crate::config::{PoolConfig, ServerAddr};
use crate::hash::{Placement, RingServer};
use client::Conn;
use std::time::{Duration, Instant};

/// What one migrator moves.
pub struct Plan<'a> {
    /// The pool as it was.
    pub old: &'a PoolConfig,
    /// The pool as it is now.
    pub new: &'a PoolConfig,
}

/// A pool's placement over its configured servers (as the workers build it).
fn placement(p: &PoolConfig) -> Placement {
    let names: Vec<String> = p.servers.iter().map(|s| s.ketama_name()).collect();
    let ring: Vec<RingServer> = p
        .servers
        .iter()
        .zip(&names)
        .map(|(s, n)| RingServer {
            name: n.as_bytes(),
            weight: s.weight,
            live: true,
        })
        .collect();
    Placement::new(p.hash, p.distribution, p.hash_tag, &ring)
}

/// Where keys of `plan` go: for a key found on old server `from`, the new
/// server it must move to, if any.
pub struct Mover {
    old: Placement,
    new: Placement,
    /// Per old server: its index among the new servers, if still there.
    same: Vec<Option<usize>>,
}

impl Mover {
    /// The mover of a plan.
    pub fn new(plan: &Plan<'_>) -> Mover {
        Mover {
            old: placement(plan.old),
            new: placement(plan.new),
            same: plan
                .old
                .servers
                .iter()
                .map(|s| plan.new.servers.iter().position(|n| n.addr == s.addr))
                .collect(),
        }
    }

    /// The new owner (an index of the new servers) of `key`, found on old
    /// server `from`, when it must move; `None` when it stays or is not
    /// `from`'s under the old placement (left alone).
    pub fn target(&self, from: usize, key: &[u8]) -> Option<usize> {
        if self.old.server_for(key) != Some(from) {
            return None;
        }
        let to = self.new.server_for(key)?;
        (self.same.get(from).copied().flatten() != Some(to)).then_some(to)
    }
}

/// Run the migration of `plan` to its end; returns true when every key
/// that had to move did (or could not: an unreachable old owner's keys
/// are counted as failed, as twemproxy loses them).
pub fn run(plan: &Plan<'_>, progress: &Progress) -> bool {
    let mover = Mover::new(plan);
    let rate = u64::from(plan.new.migration_rate.max(1));
    let mut limiter = Limiter::new(rate);
    progress.set_state(State::Running);
    crate::log_notice!(
        "migration of pool '{}': {} old servers, {} new; keys whose owner changed move at most {} per second",
        plan.new.name,
        plan.old.servers.len(),
        plan.new.servers.len(),
        rate
    );
    let mut last_log = Instant::now();
    loop {
        let mut moved_this_pass = 0u64;
        for (from, server) in plan.old.servers.iter().enumerate() {
            let mut src = match Conn::open(&server.addr, plan.old) {
                Ok(c) => c,
                Err(e) => {
                    crate::log_warn!(
                        "migration of pool '{}': old server '{}' unreachable ({e}): its keys are lost",
                        plan.new.name,
                        server.stats_name()
                    );
                    progress.add_failed(1);
                    continue;
                }
            };
            let mut dests: Vec<Option<Conn>> = plan.new.servers.iter().map(|_| None).collect();
            let mut on_key = |key: &[u8], src: &mut Conn| -> std::io::Result<()> {
                progress.add_scanned(1);
                while progress.paused() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if progress.aborted() {
                    return Err(std::io::Error::other("aborted"));
                }
                let Some(to) = mover.target(from, key) else {
                    progress.add_skipped(1);
                    return Ok(());
                };
                limiter.take();
                if dests[to].is_none() {
                    dests[to] = Some(Conn::open(&plan.new.servers[to].addr, plan.new)?);
                }
                let dst = dests[to].as_mut().expect("opened above");
                match src.move_key(key, dst) {
                    Ok(Some(bytes)) => {
                        progress.add_moved(1, bytes as u64);
                        moved_this_pass += 1;
                    }
                    Ok(None) => progress.add_skipped(1),
                    Err(e) => {
                        progress.add_failed(1);
                        dests[to] = None;
                        crate::log_info!("migration: key not moved: {e}");
                    }
                }
                if last_log.elapsed() >= Duration::from_secs(5) {
                    last_log = Instant::now();
                    progress.log(&plan.new.name);
                }
                Ok(())
            };
            let res = if plan.new.redis {
                src.scan_redis(&mut on_key)
            } else {
                src.scan_memcache(&mut on_key)
            };
            if let Err(e) = res {
                if progress.aborted() {
                    progress.set_state(State::Aborted);
                    crate::log_notice!("migration of pool '{}' aborted", plan.new.name);
                    return false;
                }
                crate::log_warn!(
                    "migration of pool '{}': old server '{}': {e}",
                    plan.new.name,
                    server.stats_name()
                );
                progress.add_failed(1);
            }
        }
        if moved_this_pass == 0 {
            break;
        }
    }
    progress.set_state(State::Done);
    progress.log(&plan.new.name);
    crate::log_notice!("migration of pool '{}' done", plan.new.name);
    true
}

/// At most `rate` keys a second (a token bucket of one second's worth).
struct Limiter {
    rate: u64,
    tokens: f64,
    at: Instant,
}

impl Limiter {
    fn new(rate: u64) -> Limiter {
        Limiter {
            rate,
            tokens: rate as f64,
            at: Instant::now(),
        }
    }

    fn take(&mut self) {
        loop {
            let now = Instant::now();
            let add = now.duration_since(self.at).as_secs_f64() * self.rate as f64;
            self.tokens = (self.tokens + add).min(self.rate as f64);
            self.at = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                return;
            }
            std::thread::sleep(Duration::from_secs_f64(
                ((1.0 - self.tokens) / self.rate as f64).max(0.0005),
            ));
        }
    }
}

/// Whether two configurations of one pool place keys differently (then a
/// migration runs, if the pool has `migration: true`).
pub fn placement_changed(old: &PoolConfig, new: &PoolConfig) -> bool {
    new.migration
        && old.redis == new.redis
        && !new.redis_cluster
        && new.replicas <= 1
        && !(old.hash == new.hash
            && old.distribution == new.distribution
            && old.hash_tag == new.hash_tag
            && old.servers.len() == new.servers.len()
            && old.servers.iter().zip(&new.servers).all(|(a, b)| {
                a.addr == b.addr && a.weight == b.weight && a.ketama_name() == b.ketama_name()
            }))
}

/// A server address as text (for logs).
pub fn addr_text(a: &ServerAddr) -> String {
    match a {
        ServerAddr::Tcp { host, port } => format!("{host}:{port}"),
        ServerAddr::Unix { path } => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(servers: &[&str]) -> PoolConfig {
        let dir = std::env::temp_dir().join(format!(
            "walnut-mig-{}-{}",
            std::process::id(),
            servers.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yml");
        let mut text = "p:\n  listen: 127.0.0.1:39999\n  migration: true\n  servers:\n".to_string();
        for s in servers {
            text.push_str(&format!("   - {s}:1\n"));
        }
        std::fs::write(&path, text).unwrap();
        crate::config::Config::load(&path).unwrap().pools.remove(0)
    }

    #[test]
    fn only_keys_whose_owner_changed_move() {
        let old = pool(&["127.0.0.1:30001", "127.0.0.1:30002"]);
        let new = pool(&["127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"]);
        assert!(placement_changed(&old, &new));
        assert!(!placement_changed(&new, &new));
        let m = Mover::new(&Plan {
            old: &old,
            new: &new,
        });
        let (mut moved, mut stayed) = (0, 0);
        for i in 0..3000 {
            let key = format!("key:{i}");
            let from = m.old.server_for(key.as_bytes()).unwrap();
            match m.target(from, key.as_bytes()) {
                Some(to) => {
                    // Adding a server only ever moves keys to it.
                    assert_eq!(to, 2);
                    moved += 1;
                }
                None => stayed += 1,
            }
            // Found on a server that does not own it: left alone.
            assert_eq!(m.target(1 - from, key.as_bytes()), None);
        }
        assert!(
            moved > 600 && stayed > 1200,
            "{moved} moved, {stayed} stayed"
        );
    }
}
