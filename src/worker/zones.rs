//! A pool made of one pool per zone (`zones:`, the local zone first), as
//! mcrouter's and memcached-proxy's zones or Dynomite's racks: a
//! single-key read goes to the key's owner in the local zone and fails
//! over to its owner in the next zone on an error (and on a miss, with
//! `zone_failover: miss`). A single-key write goes to every zone: with
//! `zone_writes: async` it is answered by the local zone as soon as that
//! answers, or, when the local zone fails it (lost, ejected, an error),
//! by the next zone that succeeds, so that losing a zone loses no write;
//! with `sync`, once every zone has answered, with the first success.
//! A multi-key write goes to the local zone, and to the other zones as
//! copies, fire and forget. Multi-key reads are served by the local zone.
//! A request answered by another zone than the local one is counted
//! (`zone_failovers`).

use super::conn::{Fragment, Multi, MultiMode, ReplyTo, Slot};
use super::fault::ServerFault;
use super::forward::{reads_only, routing_key};
use super::Worker;
use crate::proto::{Protocol, Request};
use crate::stats::WorkerField;
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

/// Whether `req`, a write, is sent to every zone by `forward_zoned` (a
/// single-key one, outside warm-up) rather than to the local zone with
/// copies to the others. (Blocking and SCAN commands take their own path
/// and are copied.)
fn whole_write(z: &crate::config::Zones, req: &Request) -> bool {
    let own_path = matches!(req.op, crate::proto::Op::Redis(r) if matches!(
        r.class,
        crate::proto::redis::CmdClass::Blocking | crate::proto::redis::CmdClass::Scan
    ));
    req.keys.len() == 1 && !z.warm && !own_path
}

impl Worker<'_> {
    /// A single-key request of a zone pool: reads and writes (not the
    /// writes of a warm-up pool). Returns false when the normal path sends
    /// it (a multi-key write: to the local zone; `zone_copy` sends the
    /// copies).
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
        let (sync, whole) = (z.sync_writes, whole_write(z, req));
        if !(read || whole) {
            return false;
        }
        let key = routing_key(req, bytes);
        let _ = self.pools[pool].server_for(key.as_ref(), now);
        let mut owners = Vec::with_capacity(4);
        if let Some(r) = &self.pools[pool].routes {
            r.owners(key.as_ref(), &mut owners);
        }
        let to = ReplyTo::client(token, client_id);
        if read {
            self.send_replicated_read(to, pool, req, bytes, owners, now);
        } else if sync {
            self.send_replicated_write(to, pool, req, bytes, owners, now);
        } else {
            self.send_zone_write(to, pool, req, bytes, owners, now);
        }
        true
    }

    /// An async single-key write: one fragment per zone that has a live
    /// owner of the key (see [`MultiMode::Zones`]). A remote zone's
    /// fragment is bounded as a copy is: it is not queued on a connection
    /// that already holds as much as a shadow's may, so a stalled remote
    /// zone costs no memory (the drop is counted as a copy's).
    fn send_zone_write(
        &mut self,
        to: ReplyTo,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        owners: Vec<usize>,
        now: Instant,
    ) {
        if owners.is_empty() {
            self.reply_no_server(to.token, pool, req);
            return;
        }
        let routing = &self.pools[pool].cfg.routing;
        let zones: SmallVec<[u8; 4]> = owners
            .iter()
            .map(|&s| routing.zone_of(s).min(u8::MAX as usize) as u8)
            .collect();
        let slot = Slot {
            multi: Some(Box::new(Multi {
                req: req.clone(),
                bytes: Vec::new(),
                frags: zones
                    .iter()
                    .map(|&zone| Fragment {
                        attempt: zone,
                        ..Fragment::default()
                    })
                    .collect(),
                remaining: owners.len(),
                error: None,
                mode: MultiMode::Zones,
            })),
            ..Slot::default()
        };
        let seq = self.push_slot(to.token, req.noreply, slot);
        let proto = self.pools[pool].proto;
        for (i, (server, zone)) in owners.into_iter().zip(zones).enumerate() {
            let to = ReplyTo {
                seq,
                frag: Some(i as u32),
                ..to
            };
            if zone != 0 {
                let cs = self.conn_slot(to.token, pool, server, to.id, req.op);
                let full = self
                    .server_conn(pool, server, cs, now)
                    .is_ok_and(|st| !self.has_copy_room(st));
                if full {
                    self.stats.worker_add(WorkerField::ShadowDropped, 1);
                    let mut out = Vec::new();
                    ServerFault::ZoneQueueFull.write_reply(proto, req.op, &mut out);
                    self.fragment_done(to, &out, true, true);
                    continue;
                }
            }
            self.send_or_fail(
                to,
                pool,
                server,
                |out| proto.write_request(req, bytes, out),
                req.op,
                now,
            );
        }
    }

    /// The other zones' copies of a write, fire and forget (the local
    /// zone's reply is the client's).
    pub(super) fn zone_copy(&mut self, pool: usize, req: &Request, bytes: &[u8], now: Instant) {
        let Some(z) = self.pools[pool].cfg.routing.zones.as_ref() else {
            return;
        };
        if req.keys.is_empty() || reads_only(req.op) || whole_write(z, req) {
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
