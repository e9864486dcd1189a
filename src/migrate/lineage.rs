//! Per pool, the earlier configurations a migrating pool's keys may
//! still follow (`Lineage`), kept by the master from the reload that
//! changed the pool until its migration ends, handed to each generation's
//! workers and to the migrator, and down to a new binary in a hot upgrade.

use super::{placement_changed, same_placement, same_placements, MovedKeys};
use crate::config::PoolConfig;
use std::sync::Arc;

/// Per pool, the earlier configurations whose placement a key may still
/// follow (newest first), from the reload that changed the pool's servers
/// until its migration ends. A pool changed again before its migration
/// ended has several: keys not moved yet are still where the oldest put
/// them, keys written since where a newer one did. Workers pull from each
/// of those owners in turn, and the migrator walks all their servers.
#[derive(Debug, Clone, Default)]
pub struct Lineage(Vec<LineageEntry>);

/// One pool's earlier configurations, and the map of the keys its
/// migrator moved (`moved.rs`; none if it could not be made).
type LineageEntry = (String, Vec<PoolConfig>, Option<Arc<MovedKeys>>);

impl Lineage {
    /// The earlier configurations of `pool` (empty: it does not migrate).
    pub fn of(&self, pool: &str) -> &[PoolConfig] {
        self.0
            .iter()
            .find(|(p, _, _)| p == pool)
            .map_or(&[], |(_, c, _)| c.as_slice())
    }

    /// The map of the keys `pool`'s migrator moved.
    pub fn moved_keys(&self, pool: &str) -> Option<Arc<MovedKeys>> {
        self.0
            .iter()
            .find(|(p, _, _)| p == pool)
            .and_then(|(_, _, m)| m.clone())
    }

    /// The lineage after a reload from `cur` to `next`. A pool whose
    /// migration goes on as it was (its placement and earlier ones
    /// unchanged) keeps its map of moved keys; one that changed again
    /// starts an empty one (a key moved to an owner it no longer has may
    /// have to move again).
    pub fn after(&self, cur: &crate::config::Config, next: &crate::config::Config) -> Lineage {
        let mut out = Vec::new();
        for p in &next.pools {
            let mut chain: Vec<PoolConfig> = Vec::new();
            let earlier = cur.pools.iter().find(|c| c.name == p.name);
            for o in earlier.into_iter().chain(self.of(&p.name)) {
                if placement_changed(o, p) && !chain.iter().any(|c| same_placement(c, o)) {
                    chain.push(o.clone());
                }
            }
            if chain.is_empty() {
                continue;
            }
            let before = self.of(&p.name);
            let goes_on =
                earlier.is_some_and(|c| same_placement(c, p)) && same_placements(before, &chain);
            let moved = match self.moved_keys(&p.name) {
                Some(m) if goes_on => Some(m),
                _ => MovedKeys::new().map(Arc::new).ok(),
            };
            out.push((p.name.clone(), chain, moved));
        }
        Lineage(out)
    }

    /// `pool`'s migration ended: its keys are where its configuration says.
    pub fn finished(&mut self, pool: &str) {
        self.0.retain(|(p, _, _)| p != pool);
    }

    /// Whether any pool migrates.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What a new binary needs to carry the migrations on (hot upgrade):
    /// the running configuration, then one configuration per depth of the
    /// pools' earlier ones, as YAML texts.
    pub fn export(&self, current: &crate::config::Config) -> Vec<String> {
        let rt = crate::config::show::Runtime {
            log_level: crate::log::level(),
            set: &[],
        };
        let mut out = vec![crate::config::show::to_yaml(current, &rt)];
        let depth = self.0.iter().map(|(_, c, _)| c.len()).max().unwrap_or(0);
        for k in 0..depth {
            let mut cfg = current.clone();
            cfg.pools = self
                .0
                .iter()
                .filter_map(|(_, c, _)| c.get(k).cloned())
                .collect();
            out.push(crate::config::show::to_yaml(&cfg, &rt));
        }
        out
    }

    /// The lineage a new binary starts with: what `export` wrote, applied
    /// to the configuration it loaded (as a reload from the old binary's).
    pub fn import(
        texts: &[String],
        new: &crate::config::Config,
    ) -> Result<Lineage, crate::config::ConfigErrors> {
        let path = std::path::Path::new("(migrations of the previous binary)");
        let Some((first, rest)) = texts.split_first() else {
            return Ok(Lineage::default());
        };
        let running = crate::config::Config::from_str(first, path)?;
        let mut tail: Vec<LineageEntry> = Vec::new();
        for text in rest {
            for p in crate::config::Config::from_str(text, path)?.pools {
                match tail.iter_mut().find(|(n, _, _)| *n == p.name) {
                    Some((_, chain, _)) => chain.push(p),
                    None => tail.push((p.name.clone(), vec![p], None)),
                }
            }
        }
        Ok(Lineage(tail).after(&running, new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(servers: &[u16], timeout: u32) -> crate::config::Config {
        let mut text = format!(
            "p:\n  listen: 127.0.0.1:39999\n  migration: true\n  timeout: {timeout}\n  servers:\n"
        );
        for port in servers {
            text.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
        }
        crate::config::Config::from_str(&text, std::path::Path::new("t.yml")).unwrap()
    }

    #[test]
    fn a_migration_that_goes_on_keeps_its_map_of_moved_keys() {
        let two = config(&[30001, 30002], 400);
        let three = config(&[30001, 30002, 30003], 400);
        let first = Lineage::default().after(&two, &three);
        let map = first.moved_keys("p").expect("a map for the migrating pool");
        map.mark(b"k");
        // A reload that changed something else: the same migration, the
        // same map.
        let slower = config(&[30001, 30002, 30003], 800);
        let same = first.after(&three, &slower);
        assert!(Arc::ptr_eq(&map, &same.moved_keys("p").unwrap()));
        assert_eq!(same.of("p").len(), 1);
        // Changed again: keys moved to the last owners may move again, so
        // the map starts empty.
        let four = config(&[30001, 30002, 30003, 30004], 800);
        let again = same.after(&slower, &four);
        let fresh = again.moved_keys("p").unwrap();
        assert!(!Arc::ptr_eq(&map, &fresh) && !fresh.has(b"k"));
        assert_eq!(again.of("p").len(), 2);
        // Ended: no map.
        let mut ended = again.clone();
        ended.finished("p");
        assert!(ended.moved_keys("p").is_none());
    }
}
