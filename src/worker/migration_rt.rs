//! Where a migrating pool's keys were before the reload (`MigrationRt`):
//! each earlier configuration's placement, the servers the pool no longer
//! has kept reachable, whether a key moved and where it may still be, and
//! per old owner the order reads of moved keys ask servers in
//! (`ReadOrder`). What the worker does with it is `migrate.rs`'.

use super::conn::Servers;
use super::server_rt::{server_rt, ServerRt};
use crate::config::PoolConfig;
use crate::hash::Placement;
use crate::migrate::MovedKeys;
use std::sync::Arc;

/// Where a pool's keys were before the reload.
#[derive(Debug)]
pub struct MigrationRt {
    /// Each earlier configuration's placement, newest first.
    olds: Vec<Old>,
    /// Room for an old placement's owners of one key, and for where a
    /// key may still be, reused (`moved_single`).
    scratch: Vec<usize>,
    found: Vec<usize>,
    /// The keys the pool's migrator moved (`migrate::moved`), when the
    /// master could make the map.
    moved: Option<Arc<MovedKeys>>,
    /// Per old owner (a server index of the pool): where reads of moved
    /// keys from it found them lately, which says which server a read
    /// asks first. Per old owner because the migrator empties one server
    /// at a time: keys of a server it has not reached yet are all still
    /// there, those of one it has walked all moved.
    reads: Vec<ReadOrder>,
}

/// One earlier configuration's placement of a migrating pool.
#[derive(Debug)]
struct Old {
    placement: Placement,
    /// Per server of it (placement index), its index in the pool's
    /// servers (servers the pool no longer has are appended there, off
    /// the ring).
    index: Vec<usize>,
    /// Its number of replicas.
    replicas: usize,
    /// It hashes keys as the pool does now (the same hash function and
    /// hash tag; only its servers changed, as in most migrations): a
    /// key's hash made for its owner now places it here too.
    same_hash: bool,
}

/// Reads of moved keys (`Moving::Read`, `migrate.rs`) ask first where most
/// were found lately: the old owners while few keys have moved, the new
/// owner once most have. Either order is correct, the better one saves a
/// round trip and a server's work per read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadOrder {
    on_new: u32,
    on_old: u32,
}

impl ReadOrder {
    /// How many reads the counts stand for before they are halved: the
    /// order follows the migration's progress within a few hundred reads.
    const WINDOW: u32 = 256;

    /// Whether the new owner is asked first.
    pub fn new_first(self) -> bool {
        self.on_new > self.on_old
    }

    /// A read found its key on the new owner (`on_new`) or an old one.
    pub fn found(&mut self, on_new: bool) {
        if on_new {
            self.on_new += 1;
        } else {
            self.on_old += 1;
        }
        if self.on_new + self.on_old >= Self::WINDOW {
            self.on_new /= 2;
            self.on_old /= 2;
        }
    }

    /// The servers a read of a key asks in turn: its old owners (newest
    /// placement first) then its new one, or, when the new owner is asked
    /// first, the new owner, the old ones, and the new one again: a key
    /// found on no old owner may have been copied over (and its old copy
    /// deleted) after the first read.
    pub fn servers(self, olds: &[usize], new: usize) -> Servers {
        if self.new_first() {
            return Self::new_first_order(olds, new);
        }
        let mut out = Servers::from_slice(olds);
        out.push(new);
        out
    }

    /// The new owner first, then the old ones, then the new one again.
    pub fn new_first_order(olds: &[usize], new: usize) -> Servers {
        let mut out = Servers::new();
        out.push(new);
        out.extend_from_slice(olds);
        out.push(new);
        out
    }
}

impl MigrationRt {
    /// The migration state of `cfg` replacing `olds` (newest first), if
    /// the placement of any of them differs and `migration` is on;
    /// servers of `olds` that `cfg` no longer has are appended to
    /// `servers` (reachable, not on the ring).
    pub fn new(
        cfg: &PoolConfig,
        olds: &[PoolConfig],
        servers: &mut Vec<ServerRt>,
    ) -> Option<Box<MigrationRt>> {
        let mut appended: Vec<crate::config::ServerAddr> = Vec::new();
        let mut out = Vec::new();
        for prev in olds
            .iter()
            .filter(|p| crate::migrate::placement_changed(p, cfg))
        {
            // Every server of it live, as the migrator places keys.
            let old = crate::migrate::placement(prev);
            let index = prev
                .servers
                .iter()
                .map(|s| {
                    if let Some(i) = cfg.servers.iter().position(|n| n.addr == s.addr) {
                        return i;
                    }
                    if let Some(j) = appended.iter().position(|a| *a == s.addr) {
                        return cfg.servers.len() + j;
                    }
                    servers.push(server_rt(prev, s));
                    appended.push(s.addr.clone());
                    servers.len() - 1
                })
                .collect();
            out.push(Old {
                same_hash: prev.hash == cfg.hash && prev.hash_tag == cfg.hash_tag,
                placement: old,
                index,
                replicas: prev.replicas.max(1) as usize,
            });
        }
        if out.is_empty() {
            return None;
        }
        crate::log_notice!(
            "pool '{}': servers changed; keys whose owner changed are pulled from their old owner until the migration is done",
            cfg.name
        );
        Some(Box::new(MigrationRt {
            olds: out,
            scratch: Vec::with_capacity(4),
            found: Vec::with_capacity(4),
            moved: None,
            reads: vec![ReadOrder::default(); servers.len()],
        }))
    }

    /// Where the workers learn which keys the migrator moved.
    pub fn set_moved_keys(&mut self, moved: Option<Arc<MovedKeys>>) {
        self.moved = moved;
    }

    /// Whether the migrator says `key` is on its new owner (or another
    /// key of its bit: see `migrate::moved`).
    pub fn known_moved(&self, key: &[u8]) -> bool {
        self.moved.as_ref().is_some_and(|m| m.has(key))
    }

    /// `key` is being pulled to its new owner (see `known_moved`).
    pub fn mark_moved(&self, key: &[u8]) {
        if let Some(m) = &self.moved {
            m.mark(key);
        }
    }

    /// The order reads of moved keys from old owner `old` ask servers in.
    pub fn read_order(&self, old: usize) -> ReadOrder {
        self.reads.get(old).copied().unwrap_or_default()
    }

    /// A read of a key moved from `old` found it on the new owner
    /// (`on_new`) or an old one.
    pub fn read_found(&mut self, old: usize, on_new: bool) {
        if let Some(o) = self.reads.get_mut(old) {
            o.found(on_new);
        }
    }

    /// Whether an earlier placement put `key` elsewhere than on `new`, its
    /// one owner now, and it may still be somewhere: `old_owners(key,
    /// &[new])` is then not empty, and is what [`Self::take_found`] gives,
    /// found without allocating (every request of a migrating pool asks).
    /// `hash`: the key's hash its owner now was found by, if it was
    /// hashed; an earlier placement that hashes the same way places the
    /// key by it without hashing it again.
    pub fn moved_single(&mut self, key: &[u8], hash: Option<u32>, new: usize) -> bool {
        // One earlier ring of one copy, hashed as now (a server added or
        // removed): its owner, placed from the hash.
        if let ([old], Some(h)) = (&self.olds[..], hash) {
            if old.same_hash && old.replicas == 1 && old.placement.hashes() {
                self.found.clear();
                let owner = old.placement.server_for_hash(h);
                let Some(o) = owner.and_then(|i| old.index.get(i).copied()) else {
                    return false;
                };
                self.found.push(o);
                return o != new;
            }
        }
        let mut set = std::mem::take(&mut self.scratch);
        let mut found = std::mem::take(&mut self.found);
        found.clear();
        let mut moved = false;
        for old in &self.olds {
            let p = &old.placement;
            match hash {
                Some(h) if old.same_hash && old.replicas == 1 && p.hashes() => {
                    set.clear();
                    set.extend(p.server_for_hash(h));
                }
                _ => p.replicas_for(key, old.replicas, &mut set),
            }
            let mut owners = 0;
            for o in set.iter().filter_map(|&i| old.index.get(i).copied()) {
                owners += 1;
                moved |= o != new;
                if !found.contains(&o) {
                    found.push(o);
                }
            }
            moved |= owners != 1;
        }
        self.scratch = set;
        self.found = found;
        moved && !self.found.is_empty()
    }

    /// The old owners the last [`Self::moved_single`] that said moved
    /// found; given back with [`Self::give_back_found`] so that the next
    /// one reuses the room.
    pub fn take_found(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.found)
    }

    pub fn give_back_found(&mut self, found: Vec<usize>) {
        self.found = found;
    }

    /// Where `key` may still be, when an earlier placement put it on other
    /// servers than `news` (its owners now; one, or its replicas): every
    /// server an earlier placement gave it, as indices of the pool's
    /// servers, newest placement first, each once. Empty when every
    /// earlier placement agrees with `news`.
    pub fn old_owners(&self, key: &[u8], news: &[usize]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut moved = false;
        let mut set = Vec::new();
        for old in &self.olds {
            old.placement.replicas_for(key, old.replicas, &mut set);
            let owners: Vec<usize> = set
                .iter()
                .filter_map(|&i| old.index.get(i).copied())
                .collect();
            moved |= owners.len() != news.len() || owners.iter().any(|o| !news.contains(o));
            for o in owners {
                if !out.contains(&o) {
                    out.push(o);
                }
            }
        }
        if moved {
            out
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{server_rt, MigrationRt, ReadOrder};
    use crate::config::{Config, PoolConfig};

    fn pool(servers: &[u16]) -> PoolConfig {
        pool_hashed(servers, "fnv1a_64")
    }

    fn pool_hashed(servers: &[u16], hash: &str) -> PoolConfig {
        let mut text = format!(
            "p:\n  listen: 127.0.0.1:39999\n  hash: {hash}\n  migration: true\n  servers:\n"
        );
        for port in servers {
            text.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
        }
        Config::from_str(&text, std::path::Path::new("t.yml"))
            .unwrap()
            .pools
            .remove(0)
    }

    /// For 2,000 keys, whether each moved and where it may still be, as
    /// `moved_single` finds it without allocating, with the key's hash
    /// made once for its owner now and without, and as a full look
    /// (`old_owners`) finds it. The keys that moved and stayed, and the
    /// pool's servers with the ones it no longer has.
    fn moved_as_a_full_look(cfg: &PoolConfig, olds: &[PoolConfig]) -> (usize, usize, usize) {
        let mut servers: Vec<_> = cfg.servers.iter().map(|s| server_rt(cfg, s)).collect();
        let mut m = MigrationRt::new(cfg, olds, &mut servers).unwrap();
        let new_ring = crate::migrate::placement(cfg);
        assert!(new_ring.hashes());
        let (mut moved, mut stayed) = (0, 0);
        for k in 0..2000 {
            let key = format!("key:{k}");
            let new = new_ring.server_for(key.as_bytes()).unwrap();
            let full = m.old_owners(key.as_bytes(), &[new]);
            let hash = new_ring.key_hash(key.as_bytes());
            let hashed = m.moved_single(key.as_bytes(), Some(hash), new);
            let found_hashed = m.take_found();
            m.give_back_found(Vec::new());
            if m.moved_single(key.as_bytes(), None, new) {
                assert!(hashed, "{key}");
                let found = m.take_found();
                assert_eq!(found, full, "{key}");
                assert_eq!(found_hashed, full, "{key}");
                m.give_back_found(found);
                moved += 1;
            } else {
                assert!(!hashed && full.is_empty(), "{key}: {full:?}");
                stayed += 1;
            }
        }
        (moved, stayed, servers.len())
    }

    #[test]
    fn a_key_found_moved_without_allocating_has_the_old_owners_a_full_look_finds() {
        // Two earlier placements (newest first): one server added, then
        // one replaced; the new one has both changes.
        let cfg = pool(&[30001, 30002, 30004, 30005]);
        let olds = [pool(&[30001, 30002, 30004]), pool(&[30001, 30002, 30003])];
        let (moved, stayed, servers) = moved_as_a_full_look(&cfg, &olds);
        // Both cases were met, the old server off the ring among the owners.
        assert!(moved > 200 && stayed > 200, "{moved} {stayed}");
        assert_eq!(servers, 5);
        // One earlier placement, hashed as now (a server added: the key
        // placed on it from the hash made once), or by another hash
        // function (hashed again).
        for old in [
            pool(&[30001, 30002, 30004]),
            pool_hashed(&[30001, 30002, 30004], "murmur"),
        ] {
            let (moved, stayed, servers) = moved_as_a_full_look(&cfg, &[old]);
            assert!(moved > 200 && stayed > 200, "{moved} {stayed}");
            assert_eq!(servers, 4);
        }
    }

    #[test]
    fn reads_ask_the_old_owners_first_until_keys_are_found_on_the_new_one() {
        let mut o = ReadOrder::default();
        // Nothing known: the old owners (newest first), then the new one.
        assert_eq!(o.servers(&[1, 0], 2)[..], [1, 0, 2]);
        o.found(false);
        o.found(true);
        assert!(!o.new_first(), "a tie keeps the old owners first");
        o.found(true);
        // Mostly found on the new owner: it is asked first, and last again
        // (a key copied over between the first read and the old owners').
        assert!(o.new_first());
        assert_eq!(o.servers(&[1, 0], 2)[..], [2, 1, 0, 2]);
        assert_eq!(o.servers(&[0], 2)[..], [2, 0, 2]);
    }

    #[test]
    fn the_order_follows_where_keys_were_found_lately() {
        let mut o = ReadOrder::default();
        for _ in 0..10_000 {
            o.found(false);
        }
        // Counts are halved as they fill a window: a migration that moved
        // its keys turns the order within a window's reads, however long
        // it read from the old owners before.
        let mut n = 0;
        while !o.new_first() {
            o.found(true);
            n += 1;
        }
        assert!(n <= ReadOrder::WINDOW as usize, "{n}");
        assert!(o.on_new + o.on_old < ReadOrder::WINDOW);
        for _ in 0..ReadOrder::WINDOW {
            o.found(false);
        }
        assert!(!o.new_first());
    }
}
