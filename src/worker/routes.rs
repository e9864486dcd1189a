//! A route pool at run time (`routes:`): its servers are the routed
//! pools' servers, one slice per target pool, and a key goes to the target
//! its longest matching prefix names, then to the server that pool's own
//! hash, distribution and hash tag pick within the slice. Requests, splits,
//! merges and stats are a pool's like any other's.

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
        let (first, placement) = &self.targets[routing.target_for(key)?];
        placement.server_for(key).map(|s| first + s)
    }
}
