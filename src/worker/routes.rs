//! A route or zone pool at run time (`routes:`, `zones:`): its servers are
//! the named pools' servers, one slice per pool, and a key goes to the
//! pool its longest matching prefix names (routes) or to the local zone
//! (zones), then to the server that pool's own hash, distribution and hash
//! tag pick within the slice. Requests, splits, merges and stats are a
//! pool's like any other's; a zone pool's single-key requests also know the
//! key's owner in every zone (`owners`).

use super::server_rt::ServerRt;
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
        // A stripped key is placed as its pool's own clients name it.
        let key = &key[routing.strip_len(key)..];
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

/// Remove the routes' prefixes from the keys of the Redis request written
/// at `out[start..]` (routes with `strip`), fixing each bulk length.
pub fn strip_keys(routing: &Routing, out: &mut Vec<u8>, start: usize) {
    crate::proto::redis::rewrite::cut_key_heads(out, start, |key| routing.strip_len(key));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PrefixRoute;

    #[test]
    fn prefixes_are_stripped_from_keys_only() {
        let route = |prefix: &str, strip| PrefixRoute {
            prefix: prefix.into(),
            pool: "p".into(),
            strip,
            line: 1,
        };
        let routing = Routing {
            routes: vec![route("user:", true), route("", false)],
            ..Routing::default()
        };
        let mut out = b"junk".to_vec();
        out.extend_from_slice(
            b"*5\r\n$4\r\nMSET\r\n$6\r\nuser:1\r\n$6\r\nuser:1\r\n$5\r\nother\r\n$1\r\nv\r\n",
        );
        strip_keys(&routing, &mut out, 4);
        assert_eq!(
            out,
            b"junk*5\r\n$4\r\nMSET\r\n$1\r\n1\r\n$6\r\nuser:1\r\n$5\r\nother\r\n$1\r\nv\r\n"
        );
        let mut inline = b"GET user:42\r\n".to_vec();
        strip_keys(&routing, &mut inline, 0);
        assert_eq!(inline, b"GET 42\r\n");
    }
}
