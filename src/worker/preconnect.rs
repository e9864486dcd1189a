//! The server connections a worker opens as it starts: every connection of
//! every server of the pools that ask for it (`preconnect: true`), so the
//! first requests do not wait for a connect. The worker opens what
//! `preconnects` names.

use super::pool::PoolRt;

/// Of `pools`, the connections to open at start: (pool, server,
/// connection slot), pool by pool, server by server, each server's
/// first protocol half (`server_connections` of them).
pub fn preconnects(pools: &[PoolRt]) -> Vec<(usize, usize, usize)> {
    let mut open = Vec::new();
    for (p, pool) in pools.iter().enumerate() {
        if !pool.cfg.preconnect {
            continue;
        }
        for (s, server) in pool.servers.iter().enumerate() {
            open.extend((0..server.per_protocol()).map(|c| (p, s, c)));
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn only_pools_that_ask_are_connected_at_start() {
        let yaml = "a:\n  listen: 127.0.0.1:22995\n  servers:\n    - 127.0.0.1:11211:1 a1\n\
b:\n  listen: 127.0.0.1:22996\n  preconnect: true\n  server_connections: 2\n  servers:\n    - 127.0.0.1:11213:1 b1\n    - 127.0.0.1:11214:1 b2\n\
c:\n  listen: 127.0.0.1:22997\n  preconnect: true\n  servers:\n    - 127.0.0.1:11215:1 c1\n";
        let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
        let pools: Vec<PoolRt> = c.pools.iter().map(|p| PoolRt::new(p, &[])).collect();
        assert_eq!(
            preconnects(&pools),
            vec![(1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1), (2, 0, 0)]
        );
        assert_eq!(preconnects(&pools[..1]), vec![], "none asks");
    }
}
