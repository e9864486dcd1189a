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

use super::cluster_stream::{feed, Fed};
use super::conn::Open;
use super::conn::{ClientRef, Conn, ConnTable, ReplySlot, ReplyTo, Waiter};
use super::fault::ServerFault;
use super::pool::PoolRt;
use super::spool::SpoolReader;
use super::Worker;
use crate::net::Endpoint;
use crate::proto::redis::cluster::{self, ClusterError, NodeAddr, Redirect};
use crate::proto::{Op, Request};
use slab::Slab;
use std::time::Instant;

/// Redirections followed for one request before the last one is replied.
pub const MAX_HOPS: u8 = 5;
/// TRYAGAIN replies waited out for one request before the last is replied.
pub const MAX_TRYAGAIN: u8 = 50;
/// Most servers (seeds and discovered nodes) of one cluster pool.
const MAX_NODES: usize = 4096;
use crate::proto::redis::cluster::internal_op;

/// Where a request answered with a cluster error goes again
/// (`PoolRt::cluster_answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Again {
    /// After a wait (TRYAGAIN, CLUSTERDOWN), routed by the map then.
    Wait,
    /// Now, to server `to`, after a MOVED or ASK (`kind`) for `slot`.
    Redirect {
        to: usize,
        slot: u16,
        kind: &'static str,
    },
}

/// A request waited out that goes again now (`PoolRt::retries_due`):
/// to `server`, answered to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resend {
    pub server: usize,
    pub to: ReplyTo,
    pub op: Op,
}

/// When a request answered with a cluster error goes again
/// (`PoolRt::redo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redo {
    /// At this time (the retry timer armed for it), routed by the map
    /// then (`PoolRt::retries_due`).
    At(Instant),
    /// Now, after `ASKING`, to server `to`.
    Now(usize),
}

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

    /// The requests whose TRYAGAIN delay has passed, each with the server
    /// the map of this moment routes its (first) key to; those whose
    /// client is gone, or no longer keeps them, are dropped.
    pub(super) fn retries_due(&mut self, conns: &Slab<Conn>, now: Instant) -> Vec<Resend> {
        let due = match self.cluster.as_mut() {
            Some(c) => c.take_due(now),
            None => return Vec::new(),
        };
        due.into_iter()
            .filter_map(|r| {
                let key = conns
                    .client_ref(ClientRef::new(r.token, r.id))
                    .and_then(|c| c.slot(r.seq))
                    .and_then(|slot| slot.kept_first_key(r.frag))?;
                Some(Resend {
                    server: self.cluster_server(&key, r.op, r.id),
                    to: ReplyTo {
                        token: r.token,
                        id: r.id,
                        seq: Some(r.seq),
                        frag: r.frag,
                    },
                    op: r.op,
                })
            })
            .collect()
    }

    /// A `-MOVED` or `-ASK` from server `from`: the server the request
    /// goes to now (the node named, added to the pool if new; `None`
    /// when it cannot be, and the reply goes to the client). A MOVED
    /// also moves its slot in the map at once and asks for a new map.
    pub(super) fn follow_redirect(&mut self, r: &Redirect, from: usize) -> Option<usize> {
        let target = self.node_index(&r.to, from)?;
        if !r.ask {
            if let Some(c) = self.cluster.as_mut() {
                c.set(r.slot, target);
                c.refresh_wanted = true;
            }
        }
        Some(target)
    }

    /// An error reply from server `from` for a request the client keeps
    /// (`kept`: one it sent with a reply slot, which can be sent again):
    /// whether it is sent again and where. A TRYAGAIN waits; so does a
    /// CLUSTERDOWN (the node's view of the cluster is changing, a
    /// failover), which also asks for a new map whether the request is
    /// kept or not; a MOVED or ASK goes to the node named
    /// (`follow_redirect`). `None`: the reply goes to the client.
    pub(super) fn cluster_answer(
        &mut self,
        reply: &[u8],
        from: usize,
        kept: bool,
    ) -> Option<Again> {
        self.cluster.as_ref()?;
        match cluster::cluster_error(reply)? {
            ClusterError::TryAgain => kept.then_some(Again::Wait),
            ClusterError::Down => {
                self.cluster_node_failed();
                kept.then_some(Again::Wait)
            }
            ClusterError::Redirect(r) if kept => Some(Again::Redirect {
                to: self.follow_redirect(&r, from)?,
                slot: r.slot,
                kind: r.name(),
            }),
            ClusterError::Redirect(_) => None,
        }
    }

    /// A client's request (or fragment) answered with a cluster error
    /// that sends it again (`cluster_answer`): when, within its budgets
    /// (`MAX_HOPS` redirections, `MAX_TRYAGAIN` waits, counted on its
    /// slot). A wait is kept here until `TRYAGAIN_DELAY` passed; a MOVED
    /// or ASK goes to the node named now. `None`: the reply goes to the
    /// client as it is (a budget spent, the request or its client gone).
    pub(super) fn redo(
        &mut self,
        conns: &mut Slab<Conn>,
        to: ReplyTo,
        op: Op,
        again: Again,
        now: Instant,
    ) -> Option<Redo> {
        let seq = to.seq?;
        let client = ClientRef::new(to.token, to.id);
        if !count_attempt(conns, client, seq, to.frag, again == Again::Wait) {
            return None;
        }
        match again {
            Again::Wait => {
                let c = self.cluster.as_mut()?;
                Some(Redo::At(c.wait_out(client, seq, to.frag, op, now)))
            }
            Again::Redirect { to, slot, kind } => {
                crate::log_debug!(
                    "pool '{}': {} slot {} to {}",
                    self.cfg.name,
                    kind,
                    slot,
                    self.servers[to].name
                );
                Some(Redo::Now(to))
            }
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
            for r in self.pools[pool].retries_due(&self.conns, now) {
                self.send_again(pool, r.server, r.to, r.op, false, now);
            }
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
                let Ok(st) = self.server_conn(pool, server, 0, now, Open::Shared) else {
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

    /// Queue a kept request (or fragment) again on server `target`, as
    /// `resending` says, after `ASKING` if `asking` (the next request may
    /// use a slot the node is importing; its reply is the proxy's own,
    /// dropped).
    pub(super) fn send_again(
        &mut self,
        pool: usize,
        target: usize,
        to: ReplyTo,
        op: Op,
        asking: bool,
        now: Instant,
    ) {
        let Some(what) = resending(&self.conns, to) else {
            return;
        };
        let open = match what {
            Resending::Refused(fault) => {
                self.fail_unsent(to, pool, op, &fault);
                return;
            }
            Resending::Whole { .. } => Open::Shared,
            Resending::Spooled(_) => Open::Dedicated,
        };
        let cslot = self.conn_slot(to.token, pool, target, to.id, op);
        let st = match self.server_conn(pool, target, cslot, now, open) {
            Ok(st) => st,
            Err(fault) => {
                self.fail_unsent(to, pool, op, &fault);
                return;
            }
        };
        if let (true, Some(iop)) = (asking, internal_op()) {
            self.enqueue(
                st,
                Some(Waiter::Internal),
                iop,
                |out| out.extend_from_slice(cluster::ASKING),
                now,
            );
        }
        match what {
            Resending::Whole { req, bytes, keys } => {
                let proto = self.pools[pool].proto;
                self.enqueue(
                    st,
                    to.waiter(),
                    op,
                    |out| match &keys {
                        Some(k) => proto.write_fragment(&bytes, &req, k, out),
                        None => proto.write_request(&req, &bytes, out),
                    },
                    now,
                );
            }
            Resending::Spooled(at) => {
                // Its bytes follow from the spool, as the connection
                // drains.
                self.enqueue(st, to.waiter(), op, |_| {}, now);
                super::cluster_stream::start_feed(&mut self.conns, st, to, at);
                let fed = feed(&mut self.conns, &self.stats, &mut self.dirty, st, now);
                if let Fed::ClientLeft(sid) = fed {
                    self.abort_server_stream(st, sid, ServerFault::HalfResentClientLeft);
                }
            }
            Resending::Refused(_) => {}
        }
    }
}

/// What a kept request is sent again as (`resending`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resending {
    /// Its bytes (of the fragment with these keys, by index into the
    /// request's), written again on a shared connection.
    Whole {
        req: Request,
        bytes: Vec<u8>,
        keys: Option<Vec<usize>>,
    },
    /// A streamed request, fed from its spool, read from `at`, on a new
    /// connection of its own.
    Spooled(SpoolReader),
    /// It cannot go again: it fails with this.
    Refused(ServerFault),
}

/// What the request (or fragment) kept for reply `to` is sent again as;
/// `None` when it or its client is gone.
pub(super) fn resending(conns: &Slab<Conn>, to: ReplyTo) -> Option<Resending> {
    let seq = to.seq?;
    let c = conns.client_ref(ClientRef::new(to.token, to.id))?;
    if to.frag.is_none() {
        if let Some(spool) = super::cluster_stream::kept_spool(c, seq) {
            if c.stream().is_some() {
                // A node answers once it has read the whole request: a
                // redirection before the client sent all of it cannot be
                // followed (the rest goes to the first node).
                return Some(Resending::Refused(ServerFault::RedirectedMidRequest));
            }
            return Some(Resending::Spooled(SpoolReader::new(spool)));
        }
    }
    let k = c.slot(seq)?.kept(to.frag)?;
    Some(Resending::Whole {
        req: k.req.clone(),
        bytes: k.bytes.to_vec(),
        keys: k.keys.map(<[usize]>::to_vec),
    })
}

/// Count one more redirection (or, `tryagain`, TRYAGAIN) of the request
/// `client` keeps in reply `seq` (or of its fragment `frag`); false when
/// its budget is spent or the request is gone (`ReplySlot::count_attempt`).
fn count_attempt(
    conns: &mut Slab<Conn>,
    client: ClientRef,
    seq: u64,
    frag: Option<u32>,
    tryagain: bool,
) -> bool {
    conns
        .client_ref_mut(client)
        .and_then(|c| c.slot_mut(seq))
        .is_some_and(|slot| slot.count_attempt(frag, tryagain))
}

/// A kept request, or one fragment of it.
pub(super) struct Kept<'a> {
    pub req: &'a Request,
    pub bytes: &'a [u8],
    /// A fragment's keys, by index into the request's (`None`: the
    /// whole request).
    pub keys: Option<&'a [usize]>,
}

/// A cluster request kept in its client's slot (`ReplySlot::redirect`,
/// or a fragment of its `Multi`), to be sent again.
impl ReplySlot {
    /// The kept request, or fragment `frag` of it: the request, its bytes,
    /// and the fragment's keys (by index into the request's).
    pub(super) fn kept(&self, frag: Option<u32>) -> Option<Kept<'_>> {
        match frag {
            Some(fi) => {
                let m = self.multi.as_ref()?;
                Some(Kept {
                    req: &m.req,
                    bytes: &m.bytes,
                    keys: Some(&m.frags.get(fi as usize)?.keys),
                })
            }
            None => {
                let rd = self.redirect.as_ref()?;
                Some(Kept {
                    req: &rd.req,
                    bytes: &rd.bytes,
                    keys: None,
                })
            }
        }
    }

    /// The first key of the kept request or fragment (routes a retry).
    pub(super) fn kept_first_key(&self, frag: Option<u32>) -> Option<Vec<u8>> {
        let Kept { req, bytes, keys } = self.kept(frag)?;
        let idx = match keys {
            Some(k) => *k.first()?,
            None => 0,
        };
        Some(
            req.keys
                .get(idx)
                .map_or(Vec::new(), |r| bytes[r.clone()].to_vec()),
        )
    }

    /// Count one more redirection (or, `tryagain`, TRYAGAIN) of the kept
    /// request or fragment `frag`; false once its budget (`MAX_HOPS`,
    /// `MAX_TRYAGAIN`) is spent, or when nothing is kept.
    pub(super) fn count_attempt(&mut self, frag: Option<u32>, tryagain: bool) -> bool {
        let (hops, tries) = match frag {
            Some(fi) => match self
                .multi
                .as_mut()
                .and_then(|m| m.frags.get_mut(fi as usize))
            {
                Some(f) => (&mut f.hops, &mut f.tries),
                None => return false,
            },
            None => match self.redirect.as_mut() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::Token;

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

    /// A parsed request and its bytes.
    fn cmd(text: &[u8]) -> (Request, Vec<u8>) {
        match crate::proto::redis::parse_request(text, &crate::proto::Limits::default()) {
            Ok(crate::proto::Parse::Done(r)) => (r, text.to_vec()),
            other => panic!("{other:?}"),
        }
    }

    /// A reply slot keeping its request for a redirection, none followed.
    fn kept(req: Request, bytes: Vec<u8>) -> ReplySlot {
        use super::super::conn::Redirect;
        ReplySlot {
            redirect: Some(Box::new(Redirect {
                req,
                bytes,
                hops: 0,
                tries: 0,
                spool: None,
                feeding: None,
            })),
            ..ReplySlot::default()
        }
    }

    #[test]
    fn a_kept_request_is_sent_again_within_its_budgets() {
        use super::super::conn::{Fragment, Multi, MultiMode};
        let (req, bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
        let mut slot = kept(req, bytes);
        assert_eq!(slot.kept_first_key(None).as_deref(), Some(&b"foo"[..]));
        assert!(slot.kept_first_key(Some(0)).is_none(), "no fragments kept");
        for _ in 0..MAX_HOPS {
            assert!(slot.count_attempt(None, false));
        }
        assert!(!slot.count_attempt(None, false), "redirections spent");
        // TRYAGAIN has its own budget.
        for _ in 0..MAX_TRYAGAIN {
            assert!(slot.count_attempt(None, true));
        }
        assert!(!slot.count_attempt(None, true));

        // A fragment: its own first key and budget.
        let (req, bytes) = cmd(b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n");
        let mut slot = ReplySlot {
            multi: Some(Box::new(Multi {
                req,
                bytes,
                frags: vec![
                    Fragment {
                        keys: vec![0],
                        ..Fragment::default()
                    },
                    Fragment {
                        keys: vec![1],
                        hops: MAX_HOPS,
                        ..Fragment::default()
                    },
                ],
                remaining: 2,
                error: None,
                mode: MultiMode::Split,
            })),
            ..ReplySlot::default()
        };
        assert_eq!(slot.kept_first_key(Some(1)).as_deref(), Some(&b"b"[..]));
        let kept = slot.kept(Some(0)).expect("fragment kept");
        assert_eq!(kept.keys, Some(&[0][..]));
        assert!(slot.count_attempt(Some(0), false));
        assert!(!slot.count_attempt(Some(1), false), "that fragment's spent");
        assert!(!slot.count_attempt(Some(2), false), "no such fragment");
        assert!(!slot.count_attempt(None, false), "no whole request kept");
    }

    #[test]
    fn read_commands() {
        use crate::proto::redis::commands::is_read_command;
        assert!(is_read_command("GET") && is_read_command("MGET"));
        assert!(!is_read_command("SET") && !is_read_command("DEL"));
        assert!(!is_read_command("EVAL"));
    }

    fn redirect(ask: bool, slot: u16, port: u16) -> Redirect {
        Redirect {
            ask,
            slot,
            to: NodeAddr {
                host: "127.0.0.1".into(),
                port,
            },
        }
    }

    #[test]
    fn a_moved_moves_its_slot_and_asks_for_a_map_an_ask_does_not() {
        let mut p = pool();
        let get = internal_op().unwrap();
        let foo = b"foo"; // slot 12182
        let slot = cluster::key_slot(foo);
        p.cluster
            .as_mut()
            .unwrap()
            .map_asked(Some(0), Instant::now());
        p.cluster.as_mut().unwrap().refreshing = false;
        let before = p.cluster_server(foo, get, 0);
        // An ASK to a node not yet known: added, the map unchanged.
        assert_eq!(p.follow_redirect(&redirect(true, slot, 30003), 0), Some(2));
        assert_eq!(p.servers.len(), 3);
        assert_eq!(p.cluster_server(foo, get, 0), before);
        assert!(!p.cluster.as_ref().unwrap().refresh_wanted);
        // A MOVED to a known node: the slot is its at once, a map wanted.
        assert_eq!(p.follow_redirect(&redirect(false, slot, 30003), 1), Some(2));
        assert_eq!(p.servers.len(), 3, "known: not added again");
        assert_eq!(p.cluster_server(foo, get, 0), 2);
        assert!(p.cluster.as_ref().unwrap().refresh_wanted);
        // An empty host is the host of the node that answered.
        let mut r = redirect(false, slot, 30001);
        r.to.host.clear();
        assert_eq!(p.follow_redirect(&r, 1), Some(0));
        assert_eq!(p.cluster_server(foo, get, 0), 0);
    }

    #[test]
    fn no_attempt_is_counted_for_a_client_gone() {
        let mut conns = Slab::new();
        let gone = ClientRef::new(Token(0), 5);
        assert!(!count_attempt(&mut conns, gone, 0, None, false));
        assert!(!count_attempt(&mut conns, gone, 0, Some(1), true));
    }

    #[test]
    fn a_cluster_error_says_whether_and_where_a_request_goes_again() {
        let mut p = pool();
        let wanted =
            |p: &mut PoolRt| std::mem::take(&mut p.cluster.as_mut().unwrap().refresh_wanted);
        wanted(&mut p);
        assert_eq!(
            p.cluster_answer(b"-ERR no\r\n", 0, true),
            None,
            "another error"
        );
        let tryagain = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
        assert_eq!(p.cluster_answer(tryagain, 0, true), Some(Again::Wait));
        assert_eq!(p.cluster_answer(tryagain, 0, false), None, "not kept");
        assert!(!wanted(&mut p));
        // A CLUSTERDOWN asks for a new map, kept or not.
        let down = b"-CLUSTERDOWN The cluster is down\r\n";
        assert_eq!(p.cluster_answer(down, 0, false), None);
        assert!(wanted(&mut p));
        assert_eq!(p.cluster_answer(down, 0, true), Some(Again::Wait));
        assert!(wanted(&mut p));
        // A redirection of a request not kept changes nothing.
        let moved = b"-MOVED 12182 127.0.0.1:30003\r\n";
        assert_eq!(p.cluster_answer(moved, 0, false), None);
        assert_eq!(p.servers.len(), 2, "the node named not added");
        assert!(!wanted(&mut p));
        let ask = b"-ASK 12182 127.0.0.1:30003\r\n";
        let to_new = Again::Redirect {
            to: 2,
            slot: 12182,
            kind: "ASK",
        };
        assert_eq!(p.cluster_answer(ask, 0, true), Some(to_new));
        assert!(!wanted(&mut p), "an ASK leaves the map");
        let moved = b"-MOVED 12182 127.0.0.1:30002\r\n";
        let to_known = Again::Redirect {
            to: 1,
            slot: 12182,
            kind: "MOVED",
        };
        assert_eq!(p.cluster_answer(moved, 0, true), Some(to_known));
        assert!(wanted(&mut p), "a MOVED asks for a new map");
    }

    #[test]
    fn a_request_goes_again_now_or_later_within_its_budgets() {
        use super::super::conn::Client;
        use crate::net::Stream;
        let mut p = pool();
        let (req, bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
        let op = req.op;
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        c.push_reply(kept(req, bytes));
        conns.insert(Conn::Client(Box::new(c)));
        let now = Instant::now();
        let to = ReplyTo::new(Token(0), 10, Some(0), None);
        let moved = Again::Redirect {
            to: 1,
            slot: 12182,
            kind: "MOVED",
        };
        assert_eq!(p.redo(&mut conns, to, op, moved, now), Some(Redo::Now(1)));
        let later = now + crate::worker::cluster_map::TRYAGAIN_DELAY;
        assert_eq!(
            p.redo(&mut conns, to, op, Again::Wait, now),
            Some(Redo::At(later))
        );
        assert_eq!(p.retries_due(&conns, later).len(), 1, "kept to wait out");
        for _ in 1..MAX_HOPS {
            assert!(p.redo(&mut conns, to, op, moved, now).is_some());
        }
        assert_eq!(p.redo(&mut conns, to, op, moved, now), None, "spent");
        let other = ReplyTo::new(Token(0), 11, Some(0), None);
        assert_eq!(p.redo(&mut conns, other, op, Again::Wait, now), None);
        let unkept = ReplyTo::new(Token(0), 10, None, None);
        assert_eq!(p.redo(&mut conns, unkept, op, Again::Wait, now), None);
    }

    #[test]
    fn a_kept_request_goes_again_whole_as_a_fragment_or_from_its_spool() {
        use super::super::conn::{Client, Fragment, Multi, MultiMode};
        use crate::net::Stream;
        use crate::proto::redis::{stream_head, StreamMachine};
        use crate::worker::conn::ReqStream;
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        // Reply 0 keeps GET foo, reply 1 an MGET's fragments, reply 2 a
        // streamed SET in its spool.
        let (get, get_bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
        c.push_reply(kept(get.clone(), get_bytes.clone()));
        let (mget, mget_bytes) = cmd(b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n");
        c.push_reply(ReplySlot {
            multi: Some(Box::new(Multi {
                req: mget.clone(),
                bytes: mget_bytes.clone(),
                frags: vec![Fragment {
                    keys: vec![1],
                    ..Fragment::default()
                }],
                remaining: 1,
                error: None,
                mode: MultiMode::Split,
            })),
            ..ReplySlot::default()
        });
        let spooled = ReplySlot::streamed(true, &get, b"*3\r\n$3\r\nSET\r\n");
        let at = SpoolReader::new(
            spooled
                .redirect
                .as_ref()
                .and_then(|r| r.spool.as_ref())
                .expect("a spool"),
        );
        c.push_reply(spooled);
        conns.insert(Conn::Client(Box::new(c)));
        let to = |seq, frag| ReplyTo::new(Token(0), 10, Some(seq), frag);
        let whole = Resending::Whole {
            req: get,
            bytes: get_bytes,
            keys: None,
        };
        assert_eq!(resending(&conns, to(0, None)), Some(whole));
        let frag = Resending::Whole {
            req: mget,
            bytes: mget_bytes,
            keys: Some(vec![1]),
        };
        assert_eq!(resending(&conns, to(1, Some(0))), Some(frag));
        assert_eq!(resending(&conns, to(2, None)), Some(Resending::Spooled(at)));
        assert_eq!(resending(&conns, to(1, Some(3))), None, "no such fragment");
        let gone = ReplyTo::new(Token(0), 11, Some(0), None);
        assert_eq!(resending(&conns, gone), None, "another client");
        // Its client still sending it: refused.
        let limits = crate::proto::Limits::default();
        let data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123";
        let head = (1..=data.len())
            .find_map(|n| stream_head(&data[..n], &limits, 8))
            .expect("a streamed head");
        let rs = ReqStream::single(StreamMachine::new(&head, limits, 8), None);
        conns.client_mut(0).expect("client").start_stream(rs);
        assert_eq!(
            resending(&conns, to(2, None)),
            Some(Resending::Refused(ServerFault::RedirectedMidRequest))
        );
    }

    #[test]
    fn a_request_waited_out_goes_where_its_key_is_routed_when_due() {
        use super::super::conn::Client;
        use crate::net::Stream;
        let mut p = pool();
        let (req, bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
        let op = req.op;
        // Client 10 at Token(0) keeps GET foo in its reply 0.
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        c.push_reply(kept(req, bytes));
        conns.insert(Conn::Client(Box::new(c)));
        let now = Instant::now();
        let c = p.cluster.as_mut().unwrap();
        let kept = ClientRef::new(Token(0), 10);
        let _ = c.wait_out(kept, 0, None, op, now);
        let _ = c.wait_out(ClientRef::new(Token(0), 11), 0, None, op, now);
        let _ = c.wait_out(kept, 1, None, op, now);
        assert!(p.retries_due(&conns, now).is_empty(), "not due yet");
        // The map of the moment routes foo's slot (12182) to the second seed.
        p.cluster
            .as_mut()
            .unwrap()
            .set(cluster::key_slot(b"foo"), 1);
        let later = now + std::time::Duration::from_secs(1);
        let again = Resend {
            server: 1,
            to: ReplyTo::new(Token(0), 10, Some(0), None),
            op,
        };
        assert_eq!(
            p.retries_due(&conns, later),
            vec![again],
            "another client's and a reply not kept are dropped"
        );
        assert!(p.retries_due(&conns, later).is_empty(), "taken once");
    }
}
