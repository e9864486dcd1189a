//! A pool made of one pool per zone (`zones:`, the local zone first), as
//! mcrouter's and memcached-proxy's zones or Dynomite's racks: a
//! single-key read goes to the key's owner in the local zone and fails
//! over to its owner in the next zone on an error (and on a miss, with
//! `zone_failover: miss`); a write goes to the local zone, and to the
//! other zones as copies, fire and forget (`zone_writes: async`), or to
//! every zone, answered with the first success (`sync`, single-key
//! writes). Multi-key reads are served by the local zone.

use super::forward::{reads_only, routing_key};
use super::Worker;
use crate::proto::{Protocol, Request};
use mio::Token;
use smallvec::SmallVec;
use std::time::Instant;

/// Whether `reply` says the key is not there (a single-key read). Redis:
/// a null, or an empty collection (LRANGE, SMEMBERS, HGETALL of a missing
/// key; an existing key's empty range is asked of the next zone too).
pub(super) fn is_miss(proto: Protocol, reply: &[u8]) -> bool {
    match proto {
        Protocol::Memcache => reply == b"END\r\n" || reply.starts_with(b"EN\r\n"),
        Protocol::Redis => matches!(
            reply,
            b"$-1\r\n" | b"_\r\n" | b"*-1\r\n" | b"*0\r\n" | b"%0\r\n" | b"~0\r\n"
        ),
    }
}

impl Worker<'_> {
    /// A single-key request of a zone pool: reads, and writes with
    /// `zone_writes: sync`. Returns false when the normal path sends it
    /// (an async write: to the local zone; `zone_copy` sends the copies).
    pub(super) fn forward_zoned(
        &mut self,
        token: Token,
        client_id: u64,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> bool {
        let Some(z) = self.pools[pool].cfg.routing.zones.as_ref() else {
            return false;
        };
        let read = reads_only(req.op);
        let sync_write = z.sync_writes && req.keys.len() == 1;
        if !(read || sync_write) {
            return false;
        }
        let key = routing_key(req, bytes);
        let _ = self.pools[pool].server_for(key.as_ref(), now);
        let mut owners = Vec::with_capacity(4);
        if let Some(r) = &self.pools[pool].routes {
            r.owners(key.as_ref(), &mut owners);
        }
        let to = super::conn::ReplyTo::client(token, client_id);
        if read {
            self.send_replicated_read(to, pool, req, bytes, owners, now);
        } else {
            self.send_replicated_write(to, pool, req, bytes, owners, now);
        }
        true
    }

    /// The other zones' copies of a write, fire and forget (the local
    /// zone's reply is the client's).
    pub(super) fn zone_copy(&mut self, pool: usize, req: &Request, bytes: &[u8], now: Instant) {
        let Some(z) = self.pools[pool].cfg.routing.zones.as_ref() else {
            return;
        };
        if req.keys.is_empty() || reads_only(req.op) || (z.sync_writes && req.keys.len() == 1) {
            return;
        }
        if z.warm && !super::warm::deletes(req.op) {
            // Warm-up: only deletes reach the warm pool.
            return;
        }
        let proto = self.pools[pool].proto;
        let mut owners = Vec::with_capacity(4);
        // Per remote zone, the keys grouped by their owner there.
        let mut groups: SmallVec<[(usize, Vec<usize>); 4]> = SmallVec::new();
        for (i, r) in req.keys.iter().enumerate() {
            if let Some(rt) = &self.pools[pool].routes {
                rt.owners(&bytes[r.clone()], &mut owners);
            }
            for &server in owners.iter().skip(1) {
                match groups.iter_mut().find(|(s, _)| *s == server) {
                    Some((_, v)) => v.push(i),
                    None => groups.push((server, vec![i])),
                }
            }
        }
        let whole = req.keys.len() == 1;
        for (server, keys) in groups {
            self.shadow_send(pool, Some(server), req.op, now, |out| {
                if whole {
                    proto.write_request(req, bytes, out)
                } else {
                    proto.write_fragment(bytes, req, &keys, out)
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses() {
        assert!(is_miss(Protocol::Memcache, b"END\r\n"));
        assert!(is_miss(Protocol::Memcache, b"EN\r\n"));
        assert!(!is_miss(Protocol::Memcache, b"VALUE k 0 1\r\nx\r\nEND\r\n"));
        assert!(is_miss(Protocol::Redis, b"$-1\r\n") && is_miss(Protocol::Redis, b"_\r\n"));
        assert!(is_miss(Protocol::Redis, b"*0\r\n"));
        assert!(!is_miss(Protocol::Redis, b"$1\r\nx\r\n") && !is_miss(Protocol::Redis, b":0\r\n"));
    }
}
