//! The background migrator of a pool whose servers changed under a reload
//! (`migration: true`): one process per pool, forked by the master, that
//! walks every old server's keys and moves each key whose owner changed to
//! its new owner, rate-limited, then tells the master it is done (exit 0)
//! so workers stop pulling keys on demand (`worker/migrate.rs`).
//!
//! A key moves with the rules of a worker's pull: read with its TTL from
//! the old owner, written to the new owner only if absent there (a newer
//! value written meanwhile wins), deleted from the old owner. Keys go in
//! batches: Redis old owners send a batch themselves (`MIGRATE ... KEYS`,
//! no `REPLACE`) where they can; otherwise `SCAN` + pipelined
//! `DUMP`/`PTTL` → `RESTORE` (no `REPLACE`) + `DEL`, any data type;
//! memcached: `lru_crawler metadump all` (memcached ≥ 1.4.31) + pipelined
//! `mg k v f t` → `ms ... ME` + `md`. The pace follows the servers'
//! headroom (`pace.rs`). Repeating any of it is harmless, so a migrator
//! that dies is simply started again, and it ends after a full pass that
//! left nothing behind (memcached: that also moved nothing). It is a plain blocking program: it is not a worker
//! and has no event loop to keep responsive.

mod client;
pub mod commands;
mod lineage;
pub mod moved;
mod pace;
mod progress;

pub use lineage::Lineage;
pub use moved::MovedKeys;
pub use progress::{Progress, State};

use crate::config::{PoolConfig, ServerAddr};
use crate::hash::{Placement, RingServer};
use client::{Conn, Outcome};
use commands::Target;
use pace::Pace;
use std::time::{Duration, Instant};

/// What one migrator moves.
pub struct Plan<'a> {
    /// The pool as it was, newest first: more than one when the pool was
    /// changed again before an earlier migration ended (a key may then
    /// still be on the owner of any of them).
    pub olds: &'a [PoolConfig],
    /// The pool as it is now.
    pub new: &'a PoolConfig,
}

impl Plan<'_> {
    /// Whether new server `to` is one no earlier placement had (a server
    /// added). Only towards such a server does an old owner `MIGRATE`:
    /// `MIGRATE` blocks its source until the target answers, and a
    /// server that is never a source (nothing walks or pulls from it)
    /// cannot wait on one that waits on it. Between servers both
    /// placements have (a weight change moves keys both ways), two
    /// fleet members' migrators walking opposite servers would block
    /// both until `MIGRATE`'s timeout; those keys are copied instead.
    pub fn fresh(&self, to: usize) -> bool {
        let Some(s) = self.new.servers.get(to) else {
            return false;
        };
        !self
            .olds
            .iter()
            .any(|o| o.servers.iter().any(|x| x.addr == s.addr))
    }

    /// The servers to walk: every server of the previous configurations,
    /// once each, with the configuration it is reached with.
    pub fn sources(&self) -> Vec<(&ServerAddr, &PoolConfig)> {
        let mut out: Vec<(&ServerAddr, &PoolConfig)> = Vec::new();
        for old in self.olds {
            for s in &old.servers {
                if !out.iter().any(|(a, _)| **a == s.addr) {
                    out.push((&s.addr, old));
                }
            }
        }
        out
    }

    /// The servers to walk as text, in the order of [`Plan::sources`]
    /// (the progress of each is kept under that index).
    pub fn source_names(&self) -> Vec<String> {
        self.sources()
            .into_iter()
            .map(|(a, _)| addr_text(a))
            .collect()
    }
}

/// A pool's placement over its configured servers, all live (as the
/// workers build it; also names the server of a hot key).
pub fn placement(p: &PoolConfig) -> Placement {
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

/// Where keys of `plan` go: for a key found on server `from`, the new
/// servers it must be copied to, and whether `from` keeps it.
pub struct Mover {
    /// Each previous placement with its servers' addresses and replicas.
    olds: Vec<(Placement, Vec<ServerAddr>, usize)>,
    new: Placement,
    new_addrs: Vec<ServerAddr>,
    new_replicas: usize,
}

/// What to do with a key found on a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// New owners (indices of the new servers) to copy it to.
    pub to: Vec<usize>,
    /// Whether the server it was found on no longer owns it.
    pub delete: bool,
}

impl Mover {
    /// The mover of a plan.
    pub fn new(plan: &Plan<'_>) -> Mover {
        let addrs = |p: &PoolConfig| p.servers.iter().map(|s| s.addr.clone()).collect();
        Mover {
            olds: plan
                .olds
                .iter()
                .map(|o| (placement(o), addrs(o), o.replicas.max(1) as usize))
                .collect(),
            new: placement(plan.new),
            new_addrs: addrs(plan.new),
            new_replicas: plan.new.replicas.max(1) as usize,
        }
    }

    /// For `key` found on server `from`: `None` when its owners did not
    /// change, or when no previous placement put it on `from` (left alone:
    /// not the pool's); else the new owners other than `from` (a copy
    /// where it is absent) and whether `from` must drop it.
    pub fn plan(&self, from: &ServerAddr, key: &[u8]) -> Option<Move> {
        if self.new_replicas == 1 && self.olds.iter().all(|(_, _, r)| *r == 1) {
            return self.plan_single(from, key);
        }
        self.plan_replicas(from, key)
    }

    /// [`Mover::plan`] in general: each placement's owners as a list.
    fn plan_replicas(&self, from: &ServerAddr, key: &[u8]) -> Option<Move> {
        let mut set = Vec::new();
        self.new.replicas_for(key, self.new_replicas, &mut set);
        let news: Vec<&ServerAddr> = set.iter().map(|&i| &self.new_addrs[i]).collect();
        let (mut owned, mut moved) = (false, false);
        for (p, addrs, r) in &self.olds {
            p.replicas_for(key, *r, &mut set);
            let owners: Vec<&ServerAddr> = set.iter().map(|&i| &addrs[i]).collect();
            owned |= owners.contains(&from);
            moved |= owners.len() != news.len() || owners.iter().any(|o| !news.contains(o));
        }
        if !owned || !moved {
            return None;
        }
        let mut to = Vec::new();
        self.new.replicas_for(key, self.new_replicas, &mut set);
        for &i in &set {
            if self.new_addrs[i] != *from {
                to.push(i);
            }
        }
        let delete = !news.contains(&from);
        // Found where it belongs, with no other owner to copy to.
        (delete || !to.is_empty()).then_some(Move { to, delete })
    }
}

impl Mover {
    /// [`Mover::plan`] of a pool without replicas, where every placement
    /// gives a key one owner (no list built: the migrator asks this of
    /// every key it finds).
    fn plan_single(&self, from: &ServerAddr, key: &[u8]) -> Option<Move> {
        let to = self.new.server_for(key)?;
        let new = &self.new_addrs[to];
        let (mut owned, mut moved) = (false, false);
        for (p, addrs, _) in &self.olds {
            let Some(o) = p.server_for(key) else {
                moved = true;
                continue;
            };
            owned |= addrs[o] == *from;
            moved |= addrs[o] != *new;
        }
        (owned && moved && new != from).then(|| Move {
            to: vec![to],
            delete: true,
        })
    }
}

/// Run the migration of `plan` to its end; returns true when every key
/// that had to move did (or could not: an unreachable old owner's keys
/// are counted as failed, as twemproxy loses them).
pub fn run(plan: &Plan<'_>, progress: &Progress, moved_keys: Option<&MovedKeys>) -> bool {
    let sources = plan.sources();
    let rate = u64::from(plan.new.migration_rate.max(1));
    progress.set_state(State::Running);
    crate::log_notice!(
        "migration of pool '{}': {} old servers, {} new; keys whose owner changed move at the servers' pace, at most {} per second",
        plan.new.name,
        sources.len(),
        plan.new.servers.len(),
        rate
    );
    let total: u64 = sources
        .iter()
        .filter_map(|&(addr, cfg)| Conn::open(addr, cfg).and_then(|mut c| c.key_count()).ok())
        .sum();
    progress.set_total(total);
    let mut walk = Walk {
        plan,
        progress,
        mover: Mover::new(plan),
        pace: Pace::new(rate),
        server_move: false,
        last_log: Instant::now(),
        moved: 0,
        unplaced: 0,
        moved_keys,
    };
    loop {
        walk.moved = 0;
        walk.unplaced = 0;
        for (si, &(from, old)) in sources.iter().enumerate() {
            if walk.source(si, from, old).is_err() {
                progress.set_state(State::Aborted);
                crate::log_notice!("migration of pool '{}' aborted", plan.new.name);
                return false;
            }
        }
        // One Redis pass is enough: nothing writes a key to a server
        // that no longer owns it once the migrator runs (it starts at the
        // placement switch), and `SCAN` lists every key that was there
        // from its start to its end. memcached's `lru_crawler metadump`
        // does not: it misses items its LRU maintainer moves between
        // lists meanwhile (a few in 10,000 just after a load), so a
        // memcached migration ends after a pass that moved nothing.
        if walk.unplaced == 0 && (plan.new.redis || walk.moved == 0) {
            break;
        }
        if walk.moved == 0 {
            // Only keys whose new owner is down or refused them are left:
            // try them again a second later.
            std::thread::sleep(Duration::from_secs(1));
            if progress.aborted() {
                progress.set_state(State::Aborted);
                return false;
            }
        }
    }
    progress.set_state(State::Done);
    progress.log(&plan.new.name);
    crate::log_notice!("migration of pool '{}' done", plan.new.name);
    true
}

/// The operator aborted the migration.
struct Aborted;

/// One pass over the old servers and what it has done so far.
struct Walk<'a> {
    plan: &'a Plan<'a>,
    progress: &'a Progress,
    mover: Mover,
    pace: Pace,
    /// Whether the server walked now moves keys itself (Redis `MIGRATE`):
    /// tried first on every server, given up for the rest of the server's
    /// walk once it refuses for another reason than a newer value.
    server_move: bool,
    last_log: Instant,
    /// Keys moved in this pass.
    moved: u64,
    /// Keys that could not be written to their new owner in this pass,
    /// and walks of old servers that broke off: they stay where they are
    /// and are tried again on the next pass, so the migration does not
    /// end leaving them behind (a new owner that is down delays it until
    /// it is back).
    unplaced: u64,
    /// Where the workers learn which keys are on their new owner now.
    moved_keys: Option<&'a MovedKeys>,
}

impl Walk<'_> {
    /// Every key of old server `from` (index `si` of the sources, reached
    /// with `old`'s settings) whose owner changed, moved.
    fn source(&mut self, si: usize, from: &ServerAddr, old: &PoolConfig) -> Result<(), Aborted> {
        let (plan, progress) = (self.plan, self.progress);
        let mut src = match Conn::open(from, old) {
            Ok(c) => c,
            Err(e) => {
                crate::log_warn!(
                    "migration of pool '{}': old server {} unreachable ({e}): its keys are lost",
                    plan.new.name,
                    addr_text(from)
                );
                progress.add_failed(1);
                return Ok(());
            }
        };
        // The old owner sends keys to the new one itself where it can
        // (`Target::of`), until it refuses.
        self.server_move = true;
        let mut dests: Vec<Option<Conn>> = plan.new.servers.iter().map(|_| None).collect();
        let mut on_keys = |keys: &[&[u8]], src: &mut Conn| {
            self.keys(si, from, keys, src, &mut dests)?;
            // About three batches' worth: a third of the keys moves when
            // a pool grows from two servers to three.
            Ok((self.pace.batch() * 3).clamp(100, 1500))
        };
        let res = if plan.new.redis {
            src.scan_redis(&mut on_keys)
        } else {
            src.scan_memcache(&mut on_keys)
        };
        if let Err(e) = res {
            if progress.aborted() {
                return Err(Aborted);
            }
            progress.add_failed(1);
            if e.kind() == std::io::ErrorKind::Unsupported {
                crate::log_warn!(
                    "migration of pool '{}': old server {}: {e}; its keys are not moved",
                    plan.new.name,
                    addr_text(from)
                );
            } else {
                // The walk broke off (a timeout, a connection reset):
                // the keys not walked yet are still there, so the
                // migration does not end with this pass; the next walks
                // the server again (one that can no longer be reached
                // then loses its keys, above).
                crate::log_warn!(
                    "migration of pool '{}': old server {}: {e}; walked again in the next pass",
                    plan.new.name,
                    addr_text(from)
                );
                self.unplaced += 1;
            }
        }
        Ok(())
    }

    /// Keys listed by one step of the walk of `from`: those whose owner
    /// changed moved, in batches of keys bound for the same new owners.
    /// An error ends the walk (the operator aborted).
    fn keys(
        &mut self,
        si: usize,
        from: &ServerAddr,
        keys: &[&[u8]],
        src: &mut Conn,
        dests: &mut [Option<Conn>],
    ) -> std::io::Result<()> {
        let progress = self.progress;
        let mut groups: Vec<(Move, Vec<&[u8]>)> = Vec::new();
        let mut counted = 0;
        for (i, &key) in keys.iter().enumerate() {
            let Some(mv) = self.mover.plan(from, key) else {
                progress.add_skipped(1);
                continue;
            };
            let g = match groups.iter().position(|(m, _)| *m == mv) {
                Some(g) => g,
                None => {
                    groups.push((mv, Vec::new()));
                    groups.len() - 1
                }
            };
            groups[g].1.push(key);
            if groups[g].1.len() >= self.pace.batch() {
                progress.add_scanned(si, (i + 1 - counted) as u64);
                counted = i + 1;
                let batch = std::mem::take(&mut groups[g].1);
                let mv = groups[g].0.clone();
                self.batch(si, &mv, &batch, src, dests)?;
            }
        }
        progress.add_scanned(si, (keys.len() - counted) as u64);
        for (mv, batch) in &groups {
            if !batch.is_empty() {
                self.batch(si, mv, batch, src, dests)?;
            }
        }
        Ok(())
    }

    /// One batch of keys found on `from` that go to the same new owners:
    /// moved, to the new owners' connections in `dests` (opened on first
    /// use, dropped after a failure), at the pace.
    fn batch(
        &mut self,
        si: usize,
        mv: &Move,
        keys: &[&[u8]],
        src: &mut Conn,
        dests: &mut [Option<Conn>],
    ) -> std::io::Result<()> {
        let (plan, progress) = (self.plan, self.progress);
        let n = keys.len() as u64;
        while progress.paused() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if progress.aborted() {
            return Err(std::io::Error::other("aborted"));
        }
        self.pace.take(keys.len());
        for &to in &mv.to {
            if dests[to].is_none() {
                match Conn::open(&plan.new.servers[to].addr, plan.new) {
                    Ok(c) => dests[to] = Some(c),
                    Err(e) => {
                        progress.add_failed(n);
                        self.unplaced += n;
                        crate::log_info!("migration: new owner unreachable, keys left: {e}");
                        return Ok(());
                    }
                }
            }
        }
        if self.server_move && mv.delete && mv.to.len() == 1 && plan.fresh(mv.to[0]) {
            if let Some(target) = Target::of(plan.new, &plan.new.servers[mv.to[0]].addr) {
                match src.migrate(&target, keys)? {
                    Ok(()) => {
                        // The keys a client's pull took meanwhile are
                        // counted too; their bytes are the server's.
                        progress.add_moved(si, n, 0);
                        if let Some(m) = self.moved_keys {
                            keys.iter().for_each(|k| m.mark(k));
                        }
                        self.moved += n;
                        self.probe(src, dests);
                        return Ok(());
                    }
                    // Some had a newer value on the new owner: the rest
                    // moved, those are dropped below.
                    Err(e) if e.contains("BUSYKEY") => {}
                    Err(e) => {
                        self.server_move = false;
                        crate::log_notice!(
                            "migration of pool '{}': MIGRATE refused ({e}): keys are copied by the migrator (DUMP/RESTORE) instead",
                            plan.new.name
                        );
                    }
                }
            }
        }
        let mut picked: Vec<&mut Conn> = dests
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| mv.to.contains(i))
            .filter_map(|(_, d)| d.as_mut())
            .collect();
        match src.move_batch(keys, &mut picked, mv.delete) {
            Ok(outcomes) => {
                for (o, key) in outcomes.into_iter().zip(keys) {
                    if !matches!(o, Outcome::Failed) {
                        if let Some(m) = self.moved_keys {
                            m.mark(key);
                        }
                    }
                    match o {
                        Outcome::Moved(bytes) => {
                            progress.add_moved(si, 1, bytes as u64);
                            self.moved += 1;
                        }
                        Outcome::Skipped => progress.add_skipped(1),
                        Outcome::Failed => {
                            progress.add_failed(1);
                            self.unplaced += 1;
                        }
                    }
                }
            }
            Err(e) => {
                progress.add_failed(n);
                self.unplaced += n;
                for &to in &mv.to {
                    dests[to] = None;
                }
                crate::log_info!("migration: keys not moved: {e}");
            }
        }
        self.probe(src, dests);
        Ok(())
    }

    /// When due, the servers timed for the pace (the old owner and the
    /// new ones in use; the slowest counts), and the progress logged.
    fn probe(&mut self, src: &mut Conn, dests: &mut [Option<Conn>]) {
        if self.pace.probe_due() {
            let mut rtt = src.ping().unwrap_or_default();
            for d in dests.iter_mut().flatten() {
                rtt = rtt.max(d.ping().unwrap_or_default());
            }
            self.pace.sample(rtt, self.progress.client_requests());
            self.progress
                .set_pace(self.pace.rate(), self.pace.clients());
        }
        if self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            self.progress.log(&self.plan.new.name);
            crate::log_info!(
                "migration of pool '{}': pace {} keys/s ({})",
                self.plan.new.name,
                self.pace.rate(),
                if self.pace.clients() {
                    "clients busy"
                } else {
                    "no clients"
                }
            );
        }
    }
}

/// Whether two configurations of one pool place keys differently (then a
/// migration runs, if the pool has `migration: true`).
pub fn placement_changed(old: &PoolConfig, new: &PoolConfig) -> bool {
    new.migration && old.redis == new.redis && !new.redis_cluster && !same_placement(old, new)
}

/// Whether two configurations of one pool put every key on the same server.
pub fn same_placement(a: &PoolConfig, b: &PoolConfig) -> bool {
    a.hash == b.hash
        && a.replicas.max(1) == b.replicas.max(1)
        && a.distribution == b.distribution
        && a.hash_tag == b.hash_tag
        && a.servers.len() == b.servers.len()
        && a.servers.iter().zip(&b.servers).all(|(x, y)| {
            x.addr == y.addr && x.weight == y.weight && x.ketama_name() == y.ketama_name()
        })
}

/// Whether two lists of a pool's configurations place every key alike,
/// one by one (the earlier configurations of two migrations).
pub fn same_placements(a: &[PoolConfig], b: &[PoolConfig]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_placement(x, y))
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
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("walnut-mig-{}-{n}", std::process::id()));
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
    fn migrate_only_towards_a_server_no_earlier_placement_had() {
        let olds = [pool(&["127.0.0.1:30001", "127.0.0.1:30002"])];
        let added = pool(&["127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"]);
        let plan = Plan {
            olds: &olds,
            new: &added,
        };
        assert!(!plan.fresh(0) && !plan.fresh(1) && plan.fresh(2));
        assert!(!plan.fresh(3));
        // One server replaced by another: only the new one is fresh.
        let swapped = pool(&["127.0.0.1:30001", "127.0.0.1:30004"]);
        let plan = Plan {
            olds: &olds,
            new: &swapped,
        };
        assert!(!plan.fresh(0) && plan.fresh(1));
    }

    #[test]
    fn only_keys_whose_owner_changed_move() {
        let old = pool(&["127.0.0.1:30001", "127.0.0.1:30002"]);
        let new = pool(&["127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"]);
        assert!(placement_changed(&old, &new));
        assert!(!placement_changed(&new, &new));
        let olds = [old];
        let plan = Plan {
            olds: &olds,
            new: &new,
        };
        assert_eq!(plan.sources().len(), 2);
        let m = Mover::new(&plan);
        let addr = |i: usize| &olds[0].servers[i].addr;
        let (mut moved, mut stayed) = (0, 0);
        for i in 0..3000 {
            let key = format!("key:{i}");
            let from = m.olds[0].0.server_for(key.as_bytes()).unwrap();
            match m.plan(addr(from), key.as_bytes()) {
                Some(mv) => {
                    // Adding a server only ever moves keys to it.
                    assert_eq!(
                        mv,
                        Move {
                            to: vec![2],
                            delete: true
                        }
                    );
                    moved += 1;
                }
                None => stayed += 1,
            }
            // Found on a server that does not own it: left alone.
            assert_eq!(m.plan(addr(1 - from), key.as_bytes()), None);
        }
        assert!(
            moved > 600 && stayed > 1200,
            "{moved} moved, {stayed} stayed"
        );
    }

    #[test]
    fn one_owner_per_key_is_planned_as_owner_lists_are() {
        let a = pool(&["127.0.0.1:30001", "127.0.0.1:30002"]);
        let b = pool(&["127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"]);
        let c = pool(&["127.0.0.1:30002", "127.0.0.1:30003", "127.0.0.1:30004"]);
        let olds = [b.clone(), a.clone()];
        let m = Mover::new(&Plan {
            olds: &olds,
            new: &c,
        });
        for i in 0..3000 {
            let key = format!("key:{i}");
            for s in a.servers.iter().chain(&b.servers).chain(&c.servers) {
                let k = key.as_bytes();
                assert_eq!(
                    m.plan_single(&s.addr, k),
                    m.plan_replicas(&s.addr, k),
                    "{key}"
                );
            }
        }
    }

    #[test]
    fn a_second_change_moves_keys_from_either_earlier_owner() {
        let a = pool(&["127.0.0.1:30001", "127.0.0.1:30002"]);
        let b = pool(&["127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"]);
        let c = pool(&["127.0.0.1:30002", "127.0.0.1:30003", "127.0.0.1:30004"]);
        let olds = [b.clone(), a.clone()];
        let plan = Plan {
            olds: &olds,
            new: &c,
        };
        // Every server of either earlier configuration is walked, once.
        assert_eq!(plan.sources().len(), 3);
        let m = Mover::new(&plan);
        let (pa, pb, pc) = (placement(&a), placement(&b), placement(&c));
        for i in 0..3000 {
            let key = format!("key:{i}");
            let k = key.as_bytes();
            let to = pc.server_for(k).unwrap();
            for (p, cfg) in [(&pa, &a), (&pb, &b)] {
                let from = &cfg.servers[p.server_for(k).unwrap()].addr;
                let want = (c.servers[to].addr != *from).then(|| Move {
                    to: vec![to],
                    delete: true,
                });
                assert_eq!(m.plan(from, k), want, "{key}");
            }
        }
    }

    #[test]
    fn replicated_keys_are_copied_to_every_new_owner() {
        let mut a = pool(&["127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"]);
        let mut b = pool(&[
            "127.0.0.1:30001",
            "127.0.0.1:30002",
            "127.0.0.1:30003",
            "127.0.0.1:30004",
        ]);
        a.replicas = 2;
        b.replicas = 2;
        assert!(placement_changed(&a, &b));
        let olds = [a.clone()];
        let m = Mover::new(&Plan {
            olds: &olds,
            new: &b,
        });
        let (pa, pb) = (placement(&a), placement(&b));
        let (mut set, mut moved) = (Vec::new(), 0);
        for i in 0..2000 {
            let key = format!("key:{i}");
            let k = key.as_bytes();
            pb.replicas_for(k, 2, &mut set);
            let news: Vec<usize> = set.clone();
            pa.replicas_for(k, 2, &mut set);
            let olds: Vec<usize> = set.clone();
            let same = olds.iter().all(|o| news.contains(o));
            for &o in &olds {
                let got = m.plan(&a.servers[o].addr, k);
                if same {
                    assert_eq!(got, None, "{key}");
                    continue;
                }
                moved += 1;
                let mv = got.expect("a moved key is planned");
                // Copied to every new owner but itself; dropped where it
                // no longer belongs.
                let want: Vec<usize> = news.iter().copied().filter(|&n| n != o).collect();
                assert_eq!(mv.to, want, "{key}");
                assert_eq!(mv.delete, !news.contains(&o), "{key}");
            }
        }
        assert!(moved > 200, "{moved}");
    }
}
