//! A route or zone pool at run time (`routes:`, `zones:`): its servers are
//! the named pools' servers, one slice per pool, and a key goes to the
//! pool its longest matching prefix names (routes) or to the local zone
//! (zones), then to the server that pool's own hash, distribution and hash
//! tag pick within the slice. Requests, splits, merges and stats are a
//! pool's like any other's; a zone pool's single-key requests also know the
//! key's owner in every zone (`owners`).

use super::pool::ServerRt;
use crate::config::Routing;
use crate::hash::{Placement, RingServer};

/// Per target pool: where its servers start and its placement over them.
#[derive(Debug)]
pub struct RouteRt {
    targets: Vec<(usize, Placement)>,
}

impl RouteRt {
    /// Placements of every target over its slice of `servers` (live ones
    /// on the ring unless `keep_ejected`).
    pub fn build(routing: &Routing, servers: &[ServerRt], keep_ejected: bool) -> RouteRt {
        let targets = routing
            .targets
            .iter()
            .map(|t| {
                let slice = &servers[t.first..(t.first + t.count).min(servers.len())];
                let ring: Vec<RingServer> = slice
                    .iter()
                    .map(|s| RingServer {
                        name: s.ring_name.as_bytes(),
                        weight: s.weight,
                        live: s.ejected_until.is_none() || keep_ejected,
                    })
                    .collect();
                let placement = Placement::new(t.hash, t.distribution, t.hash_tag, &ring);
                (t.first, placement)
            })
            .collect();
        RouteRt { targets }
    }

    /// The server (index into the route pool's servers) for `key`; `None`
    /// when no route matches or the target has no live server.
    pub fn server_for(&self, routing: &Routing, key: &[u8]) -> Option<usize> {
        let target = match routing.zones {
            Some(_) => 0,
            None => routing.target_for(key)?,
        };
        let (first, placement) = &self.targets[target];
        placement.server_for(key).map(|s| first + s)
    }

    /// Zone pools: the owner of `key` in each zone with a live server, the
    /// local zone first.
    pub fn owners(&self, key: &[u8], out: &mut Vec<usize>) {
        out.clear();
        out.extend(
            self.targets
                .iter()
                .filter_map(|(first, p)| p.server_for(key).map(|s| first + s)),
        );
    }
}
