//! Admin `hotkeys [POOL] [N]` and the `/metrics` family of hot keys: the
//! workers' published tables (`stats/hotkeys.rs`) merged per pool, each key
//! with the server the pool's placement gives it.

use crate::config::{Config, PoolConfig};
use crate::stats::hotkeys::{merge, printable, read};
use crate::stats::shm::Region;
use std::fmt::Write;

/// Keys per pool in `/metrics` (bounded label cardinality).
const METRIC_KEYS: usize = 10;

/// A pool's hot keys, most requested first: (key, requests/s, server).
fn pool_top(cfg: &Config, r: &Region, pool: usize) -> Vec<(Vec<u8>, f64, String)> {
    let p: &PoolConfig = &cfg.pools[pool];
    // Redis Cluster pools place by slot, which only the workers know.
    let placement =
        (!p.redis_cluster && !p.servers.is_empty()).then(|| crate::migrate::placement(p));
    merge((0..r.slots()).map(|s| read(r.hotkeys(s, pool))))
        .into_iter()
        .map(|(k, rate)| {
            let server = placement
                .as_ref()
                .and_then(|pl| pl.server_for(&k))
                .and_then(|i| p.servers.get(i))
                .map_or_else(|| "-".to_string(), |s| s.stats_name());
            (k, rate, server)
        })
        .collect()
}

/// `hotkeys [POOL] [N]`: one line per key, every pool or one.
pub fn command(cfg: &Config, r: &Region, args: &[&str]) -> Result<String, String> {
    let (mut pool, mut n) = (None, 10usize);
    for a in args {
        match a.parse::<usize>() {
            Ok(v) => n = v,
            Err(_) => {
                let i = cfg
                    .pools
                    .iter()
                    .position(|p| p.name == *a)
                    .ok_or_else(|| format!("no pool '{a}'"))?;
                pool = Some(i);
            }
        }
    }
    let mut out = String::new();
    for (i, p) in cfg.pools.iter().enumerate() {
        if pool.is_some_and(|want| want != i) {
            continue;
        }
        for (k, rate, server) in pool_top(cfg, r, i).into_iter().take(n) {
            let _ = writeln!(
                out,
                "pool={} server={server} rate={rate:.0} key={}",
                p.name,
                printable(&k)
            );
        }
    }
    if out.is_empty() {
        out.push_str("no requests sampled in the last second\n");
    }
    Ok(out.trim_end().to_string())
}

/// The `/metrics` family.
pub fn metrics(cfg: &Config, r: &Region) -> String {
    let mut out = String::from(
        "# HELP walnut_hotkey_requests_per_second Requests per second of a pool's most requested keys over the last second (sampled; first key of a request).\n# TYPE walnut_hotkey_requests_per_second gauge\n",
    );
    for (i, p) in cfg.pools.iter().enumerate() {
        for (k, rate, server) in pool_top(cfg, r, i).into_iter().take(METRIC_KEYS) {
            let key = printable(&k).replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(
                out,
                "walnut_hotkey_requests_per_second{{pool=\"{}\",server=\"{}\",key=\"{key}\"}} {rate:.0}",
                p.name, server
            );
        }
    }
    out
}
