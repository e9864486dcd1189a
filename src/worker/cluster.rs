//! Redis Cluster pools (`redis_cluster: true`): the slot map each worker
//! asks a node for (`CLUSTER SLOTS`), routing by hash slot, and MOVED / ASK
//! followed without the client seeing them.
//!
//! The configured servers are seed nodes. Nodes the cluster names that are
//! not in the configuration are added to the pool's servers at run time;
//! their per-server counters go to a spare area of the stats region (the
//! pool's counters include their traffic). Until the first map arrives, or
//! for a slot no map covers, a key goes to a seed and the seed's MOVED
//! sends it on. A MOVED updates that slot at once and asks for a new map
//! (at most one in flight, at most one per `REFRESH_INTERVAL`); a failed
//! connection to a node asks for one too, and so does a map older than
//! `MAP_MAX_AGE` (replicas and nodes that joined without a slot moving).
//! A `-TRYAGAIN` (multi-key request on a slot half migrated) is sent again
//! after `TRYAGAIN_DELAY`, routed by the map of that moment; so is a
//! `-CLUSTERDOWN` (a node whose view of the cluster is changing, as for a
//! few milliseconds around a failover: the command was not run), which
//! also asks for a new map. After `MAX_TRYAGAIN` (1 s in all) the last
//! reply goes to the client.

use super::cluster_map::TryAgain;
use super::conn::{ConnTable, ReplyTo, Waiter};
use super::pool::PoolRt;
use super::Worker;
use crate::net::Endpoint;
use crate::proto::redis::cluster::{self, NodeAddr, Redirect};
use crate::proto::{Op, Request};
use mio::Token;
use std::time::{Duration, Instant};

/// Redirections followed for one request before the last one is replied.
pub const MAX_HOPS: u8 = 5;
/// TRYAGAIN replies waited out for one request before the last is replied.
pub const MAX_TRYAGAIN: u8 = 50;
/// Wait before a request answered TRYAGAIN is sent again.
const TRYAGAIN_DELAY: Duration = Duration::from_millis(20);
/// Most servers (seeds and discovered nodes) of one cluster pool.
const MAX_NODES: usize = 4096;
use crate::proto::redis::cluster::internal_op;

/// A cluster pool's slot map and its refresh, kept by the pool: the key's
/// node, the map taken from a `CLUSTER SLOTS` reply (nodes new to the pool
/// added as servers), and what asks for a new one.
impl PoolRt {
    /// The server for a request `op` on `key` (0 in a pool that is not a
    /// cluster's).
    pub(super) fn cluster_server(&self, key: &[u8], op: Op, client_id: u64) -> usize {
        let Some(c) = self.cluster.as_ref() else {
            return 0;
        };
        let read = self.cfg.cluster_read_replicas && matches!(op, Op::Redis(_)) && op.reads_only();
        c.server_for(cluster::key_slot(key), read, client_id)
    }

    /// A slot-map request failed (connection closed): ask again later.
    pub(super) fn cluster_map_failed(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.refreshing = false;
            c.refresh_wanted = true;
        }
    }

    /// A cluster node failed: its slots may have moved.
    pub(super) fn cluster_node_failed(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.refresh_wanted = true;
        }
    }

    /// The reply to `CLUSTER SLOTS` from server `asked`: the new map.
    pub(super) fn cluster_slots_reply(&mut self, asked: usize, reply: &[u8]) {
        let Some(c) = self.cluster.as_mut() else {
            return;
        };
        c.refreshing = false;
        let Some(ranges) = cluster::parse_slots(reply) else {
            c.refresh_wanted = true;
            crate::log_warn!(
                "pool '{}': CLUSTER SLOTS from '{}' failed: {}",
                self.cfg.name,
                self.servers[asked].name,
                String::from_utf8_lossy(&reply[..reply.len().min(200)]).trim_end()
            );
            return;
        };
        let mut map = Vec::with_capacity(ranges.len());
        for r in &ranges {
            let Some(m) = self.node_index(&r.master, asked) else {
                continue;
            };
            let reps: Vec<usize> = r
                .replicas
                .iter()
                .filter_map(|a| self.node_index(a, asked))
                .collect();
            map.push((r.start..=r.end, m, reps));
        }
        let n = self.servers.len();
        if let Some(c) = self.cluster.as_mut() {
            c.set_map(map);
            crate::log_info!(
                "pool '{}': cluster map {}: {} slot ranges, {} nodes known",
                self.cfg.name,
                c.maps,
                ranges.len(),
                n
            );
        }
    }

    /// The server index of a cluster node, added to the pool if new. An
    /// empty host is the host of server `asked`.
    pub(super) fn node_index(&mut self, node: &NodeAddr, asked: usize) -> Option<usize> {
        let addr = if node.host.is_empty() {
            match self.servers.get(asked)?.endpoint.as_ref()? {
                Endpoint::Tcp(a) => std::net::SocketAddr::new(a.ip(), node.port),
                Endpoint::Unix(_) => return None,
            }
        } else {
            match node.host.parse::<std::net::IpAddr>() {
                Ok(ip) => std::net::SocketAddr::new(ip, node.port),
                Err(_) => crate::net::resolve(&node.host, node.port).ok()?,
            }
        };
        if let Some(i) = self
            .servers
            .iter()
            .position(|s| s.endpoint == Some(Endpoint::Tcp(addr)))
        {
            return Some(i);
        }
        if self.servers.len() >= MAX_NODES {
            return None;
        }
        let i = self.add_server(addr.to_string(), Endpoint::Tcp(addr));
        crate::log_info!("pool '{}': cluster node {} added", self.cfg.name, addr);
        Some(i)
    }
}

impl Worker<'_> {
    /// Ask for a new slot map where one is wanted and none is in flight.
    pub(super) fn cluster_maintain(&mut self, now: Instant) {
        for pool in 0..self.pools.len() {
            if self.pools[pool].cluster.is_none() {
                continue;
            }
            self.cluster_retry_due(pool, now);
            let Some(start) = self.pools[pool]
                .cluster
                .as_mut()
                .and_then(|c| c.map_due(now))
            else {
                continue;
            };
            let n = self.pools[pool].servers.len();
            let Some(op) = internal_op() else {
                return;
            };
            let mut asked = None;
            for i in 0..n {
                let server = (start + i) % n;
                let Ok(st) = self.server_conn(pool, server, 0, now) else {
                    continue;
                };
                self.enqueue(
                    st,
                    Some(Waiter::SlotMap),
                    op,
                    |out| out.extend_from_slice(cluster::CLUSTER_SLOTS),
                    now,
                );
                asked = Some(server);
                break;
            }
            if let Some(c) = self.pools[pool].cluster.as_mut() {
                c.map_asked(asked, now);
            }
        }
    }

    /// A `-MOVED` or `-ASK` reply from server `from` for a client's request
    /// (or fragment): send the request to the node named, after `ASKING`.
    /// Returns false when the reply must go to the client as it is
    /// (too many hops, unknown node, the client is gone).
    pub(super) fn cluster_redirect(
        &mut self,
        pool: usize,
        from: usize,
        to: ReplyTo,
        op: Op,
        r: &Redirect,
        now: Instant,
    ) -> bool {
        let ReplyTo {
            token: ct,
            id,
            seq: Some(seq),
            frag,
        } = to
        else {
            return false;
        };
        let Some(target) = self.pools[pool].node_index(&r.to, from) else {
            return false;
        };
        if !r.ask {
            if let Some(c) = self.pools[pool].cluster.as_mut() {
                c.set(r.slot, target);
                c.refresh_wanted = true;
            }
        }
        if !self.count_attempt(ct, id, seq, frag, false) {
            return false;
        }
        crate::log_debug!(
            "pool '{}': {} slot {} to {}",
            self.pools[pool].cfg.name,
            r.name(),
            r.slot,
            self.pools[pool].servers[target].name
        );
        // ASKING for a MOVED too: while a migration ends, the old owner
        // already says MOVED but the new one, still importing, would send
        // the request back (MOVED) until it learns the slot is its own;
        // ASKING makes it serve it. A node that owns the slot ignores it.
        self.send_again(pool, target, to, op, true, now);
        true
    }

    /// A `-TRYAGAIN` reply (a multi-key request on a slot whose keys are
    /// being migrated): the request is sent again after `TRYAGAIN_DELAY`,
    /// up to `MAX_TRYAGAIN` times. False: pass the reply on.
    pub(super) fn cluster_tryagain(
        &mut self,
        pool: usize,
        to: ReplyTo,
        op: Op,
        now: Instant,
    ) -> bool {
        let ReplyTo {
            token: ct,
            id,
            seq: Some(seq),
            frag,
        } = to
        else {
            return false;
        };
        if !self.count_attempt(ct, id, seq, frag, true) {
            return false;
        }
        let at = now + TRYAGAIN_DELAY;
        let Some(c) = self.pools[pool].cluster.as_mut() else {
            return false;
        };
        c.retries.push(TryAgain {
            at,
            token: ct,
            id,
            seq,
            frag,
            op,
        });
        self.timers.arm(at, super::tokens::RETRY_TIMER, 0);
        true
    }

    /// Send the requests whose TRYAGAIN delay has passed, routed by the
    /// current map.
    fn cluster_retry_due(&mut self, pool: usize, now: Instant) {
        let due: Vec<TryAgain> = match self.pools[pool].cluster.as_mut() {
            Some(c) if c.retries.iter().any(|r| r.at <= now) => {
                let (due, keep) = std::mem::take(&mut c.retries)
                    .into_iter()
                    .partition(|r| r.at <= now);
                c.retries = keep;
                due
            }
            _ => return,
        };
        for r in due {
            let Some(key) = self.kept_first_key(r.token, r.id, r.seq, r.frag) else {
                continue;
            };
            let server = self.pools[pool].cluster_server(&key, r.op, r.id);
            let to = ReplyTo {
                token: r.token,
                id: r.id,
                seq: Some(r.seq),
                frag: r.frag,
            };
            self.send_again(pool, server, to, r.op, false, now);
        }
    }

    /// Count one more redirection (or TRYAGAIN) of a kept request; false
    /// when its budget is spent or the request is gone.
    fn count_attempt(
        &mut self,
        ct: Token,
        id: u64,
        seq: u64,
        frag: Option<u32>,
        tryagain: bool,
    ) -> bool {
        let Some(c) = self.conns.client_mut(ct.0) else {
            return false;
        };
        if c.id() != id {
            return false;
        }
        let Some(slot) = c.slot_mut(seq) else {
            return false;
        };
        let (hops, tries) = match frag {
            Some(fi) => match slot
                .multi
                .as_mut()
                .and_then(|m| m.frags.get_mut(fi as usize))
            {
                Some(f) => (&mut f.hops, &mut f.tries),
                None => return false,
            },
            None => match slot.redirect.as_mut() {
                Some(rd) => (&mut rd.hops, &mut rd.tries),
                None => return false,
            },
        };
        let (n, max) = if tryagain {
            (tries, MAX_TRYAGAIN)
        } else {
            (hops, MAX_HOPS)
        };
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    /// The first key of a kept request or fragment (routes a retry).
    fn kept_first_key(&self, ct: Token, id: u64, seq: u64, frag: Option<u32>) -> Option<Vec<u8>> {
        let c = self.conns.client(ct.0)?;
        if c.id() != id {
            return None;
        }
        let slot = c.slot(seq)?;
        let (req, bytes, idx) = match frag {
            Some(fi) => {
                let m = slot.multi.as_ref()?;
                (&m.req, &m.bytes, *m.frags.get(fi as usize)?.keys.first()?)
            }
            None => {
                let rd = slot.redirect.as_ref()?;
                (&rd.req, &rd.bytes, 0)
            }
        };
        Some(
            req.keys
                .get(idx)
                .map_or(Vec::new(), |r| bytes[r.clone()].to_vec()),
        )
    }

    /// Queue `ASKING` on a connection: the next request may use a slot the
    /// node is importing (its reply is the proxy's own, dropped).
    pub(super) fn queue_asking(&mut self, st: Token, now: Instant) {
        if let Some(iop) = internal_op() {
            self.enqueue(
                st,
                Some(Waiter::Internal),
                iop,
                |out| out.extend_from_slice(cluster::ASKING),
                now,
            );
        }
    }

    /// Queue a kept request (or fragment) again on server `target`,
    /// after `ASKING` if `asking`.
    fn send_again(
        &mut self,
        pool: usize,
        target: usize,
        to: ReplyTo,
        op: Op,
        asking: bool,
        now: Instant,
    ) {
        let ReplyTo {
            token: ct,
            id,
            seq: Some(seq),
            frag,
        } = to
        else {
            return;
        };
        if frag.is_none() && self.kept_is_spooled(ct, id, seq) {
            self.send_again_spooled(pool, target, to, op, asking, now);
            return;
        }
        let Some(c) = self.conns.client_mut(ct.0) else {
            return;
        };
        if c.id() != id {
            return;
        }
        let Some(slot) = c.slot_mut(seq) else {
            return;
        };
        let (req, bytes, keys): (Request, Vec<u8>, Option<Vec<usize>>) = match frag {
            Some(fi) => {
                let Some(m) = slot.multi.as_ref() else {
                    return;
                };
                let Some(f) = m.frags.get(fi as usize) else {
                    return;
                };
                (m.req.clone(), m.bytes.clone(), Some(f.keys.clone()))
            }
            None => {
                let Some(rd) = slot.redirect.as_ref() else {
                    return;
                };
                (rd.req.clone(), rd.bytes.clone(), None)
            }
        };
        let proto = self.pools[pool].proto;
        let cslot = self.conn_slot(ct, pool, target, id, op);
        let st = match self.server_conn(pool, target, cslot, now) {
            Ok(st) => st,
            Err(fault) => {
                self.fail_unsent(
                    ReplyTo {
                        token: ct,
                        id,
                        seq: Some(seq),
                        frag,
                    },
                    pool,
                    op,
                    &fault,
                );
                return;
            }
        };
        if asking {
            self.queue_asking(st, now);
        }
        self.enqueue(
            st,
            ReplyTo::new(ct, id, Some(seq), frag).waiter(),
            op,
            |out| match &keys {
                Some(k) => proto.write_fragment(&bytes, &req, k, out),
                None => proto.write_request(&req, &bytes, out),
            },
            now,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster pool of two seeds, built from configuration text.
    fn pool() -> PoolRt {
        let yaml = "rc:\n  listen: 127.0.0.1:22999\n  redis: true\n  redis_cluster: true\n  servers:\n    - 127.0.0.1:30001:1\n    - 127.0.0.1:30002:1\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    #[test]
    fn a_slot_map_routes_keys_and_adds_the_nodes_it_names() {
        let mut p = pool();
        assert_eq!(p.servers.len(), 2);
        // Node 30001 serves 0-5460 with replica 30004; the node asked (30002,
        // written with an empty host) serves the rest.
        let reply = b"*2\r\n\
*4\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:30001\r\n$4\r\nid01\r\n\
*3\r\n$9\r\n127.0.0.1\r\n:30004\r\n$4\r\nid04\r\n\
*3\r\n:5461\r\n:16383\r\n*3\r\n$0\r\n\r\n:30002\r\n$4\r\nid02\r\n";
        p.cluster
            .as_mut()
            .unwrap()
            .map_asked(Some(1), Instant::now());
        p.cluster_slots_reply(1, reply);
        let c = p.cluster.as_ref().unwrap();
        assert!(!c.refreshing && !c.refresh_wanted && c.maps == 1);
        assert_eq!(p.servers.len(), 3, "the replica is added as a server");
        let get = internal_op().unwrap();
        let bar = b"bar"; // slot 5061
        let foo = b"foo"; // slot 12182
        assert_eq!(p.cluster_server(bar, get, 0), 0);
        assert_eq!(p.cluster_server(foo, get, 0), 1);
        assert_eq!(c.masters(), vec![0, 1]);
        assert_eq!(
            c.server_for(cluster::key_slot(bar), true, 0),
            2,
            "its replica"
        );
        // A reply that is not a map leaves the map and asks again.
        p.cluster_slots_reply(0, b"-ERR This instance has cluster support disabled\r\n");
        let c = p.cluster.as_ref().unwrap();
        assert!(c.refresh_wanted && c.maps == 1);
        assert_eq!(p.cluster_server(foo, get, 0), 1);
    }

    #[test]
    fn read_commands() {
        use crate::proto::redis::commands::is_read_command;
        assert!(is_read_command("GET") && is_read_command("MGET"));
        assert!(!is_read_command("SET") && !is_read_command("DEL"));
        assert!(!is_read_command("EVAL"));
    }
}
