//! The pools a worker starts with: one `PoolRt` per configured pool, a
//! migrating one with its earlier configurations and the map of the keys
//! its migrator moved (the `Lineage`), a shadow's route naming the index
//! of the pool it copies to (known only once all are listed), and, on a
//! fleet member told so, its migrating pools fenced until the fleet's
//! barrier passes. `Worker::new` takes what `start_pools` builds.

use super::pool::PoolRt;
use crate::config::Config;
use crate::migrate::Lineage;

/// The pools of `config` as a worker serves them; `fenced`: a fleet
/// member's migrating pools start fenced.
pub fn start_pools(config: &Config, lineage: &Lineage, fenced: bool) -> Vec<PoolRt> {
    let mut pools: Vec<PoolRt> = config
        .pools
        .iter()
        .map(|p| {
            let mut rt = PoolRt::new(p, lineage.of(&p.name));
            if let Some(m) = rt.migration.as_mut() {
                m.set_moved_keys(lineage.moved_keys(&p.name));
            }
            rt
        })
        .collect();
    // A shadow names another pool: its index is known once all are.
    for i in 0..pools.len() {
        if let Some(sh) = &pools[i].cfg.routing.shadow {
            let to = pools.iter().position(|p| p.cfg.name == sh.pool);
            let migrating = pools[i].migration.is_some();
            pools[i].route = crate::route::PoolRoute::build(&pools[i].cfg, to, migrating);
        }
    }
    if fenced {
        for p in pools.iter_mut().filter(|p| p.migration.is_some()) {
            p.fleet_fenced = true;
        }
    }
    pools
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const YAML: &str = "a:\n  listen: 127.0.0.1:22995\n  servers:\n    - 127.0.0.1:11211:1 a1\n\
front:\n  listen: 127.0.0.1:22996\n  shadow: a\n  servers:\n    - 127.0.0.1:11213:1 f1\n";

    #[test]
    fn a_shadow_copies_to_the_pool_it_names_by_its_index() {
        let c = Config::from_str(YAML, Path::new("t.yml")).expect("config parses");
        let pools = start_pools(&c, &Lineage::default(), false);
        assert_eq!(pools.len(), 2);
        assert_eq!(pools[0].route.shadow().map(|s| s.to), None);
        assert_eq!(pools[1].route.shadow().map(|s| s.to), Some(0));
    }

    /// Pool `p` (migrating when its servers are `ports` after 30001
    /// and 30002) and pool `q`, which does not migrate.
    fn config(ports: &[u16]) -> Config {
        let mut text = String::from(
            "q:\n  listen: 127.0.0.1:22997\n  servers:\n    - 127.0.0.1:11215:1\n\
p:\n  listen: 127.0.0.1:22998\n  migration: true\n  servers:\n",
        );
        for port in ports {
            text.push_str(&format!("    - 127.0.0.1:{port}:1\n"));
        }
        Config::from_str(&text, Path::new("t.yml")).expect("config parses")
    }

    #[test]
    fn only_a_migrating_pool_of_a_fenced_fleet_member_starts_fenced() {
        let two = config(&[30001, 30002]);
        let three = config(&[30001, 30002, 30003]);
        let lineage = Lineage::default().after(&two, &three);
        let pools = start_pools(&three, &lineage, true);
        let (q, p) = (&pools[0], &pools[1]);
        assert!(q.migration.is_none() && !q.fleet_fenced);
        assert!(p.migration.is_some() && p.fleet_fenced);
        let pools = start_pools(&three, &lineage, false);
        assert!(!pools[1].fleet_fenced, "not a fenced fleet member");
        let unmoved = start_pools(&three, &Lineage::default(), true);
        assert!(unmoved[1].migration.is_none() && !unmoved[1].fleet_fenced);
    }
}
