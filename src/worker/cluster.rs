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

use super::cluster_map::Redo;
use super::cluster_stream::{feed, Fed};
use super::conn::Open;
use super::conn::{ClientRef, Conn, ConnTable, ReplySlot, ReplyTo, Waiter};
use super::fault::ServerFault;
use super::pool::PoolRt;
use super::spool::SpoolReader;
use super::upkeep::{OwnAsk, Upkeep};
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
                // ASKING for a MOVED too: while a migration ends, the
                // old owner already says MOVED but the new one, still
                // importing, would send the request back (MOVED) until
                // it learns the slot is its own; ASKING makes it serve
                // it. A node that owns the slot ignores it.
                Some(Redo::Now { to, asking: true })
            }
        }
    }

    /// A client's request (or fragment) answered `to` by server `from`
    /// with error reply `reply`: whether it goes again, and when, as
    /// `cluster_answer` and `redo` say (`None`: the reply goes to the
    /// client). Out of line and cold: inlined into the reply loop, its
    /// code cost every reply ~20 instructions (registers saved and moved
    /// around the loop) for replies that are almost never cluster errors.
    #[cold]
    #[inline(never)]
    pub(super) fn redo_after(
        &mut self,
        conns: &mut Slab<Conn>,
        to: ReplyTo,
        op: Op,
        reply: &[u8],
        from: usize,
        now: Instant,
    ) -> Option<Redo> {
        let again = self.cluster_answer(reply, from, to.seq.is_some())?;
        self.redo(conns, to, op, again, now)
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

/// What a cluster pool asks of its nodes for itself, each pass.
impl PoolRt {
    /// The steps this pool (its index `at`) needs sent now, if it is a
    /// cluster pool: the TRYAGAIN retries due, each to the server the map
    /// names now (`retries_due`), then a new slot map asked where one is
    /// wanted and none is in flight (`ClusterRt::map_due`), of its servers
    /// in turn from the one after the last asked.
    pub(super) fn cluster_upkeep(
        &mut self,
        at: usize,
        conns: &Slab<Conn>,
        now: Instant,
    ) -> Vec<Upkeep> {
        if self.cluster.is_none() {
            return Vec::new();
        }
        let redo = |r: Resend| Upkeep::Redo {
            pool: at,
            to: r.to,
            op: r.op,
            redo: Redo::Now {
                to: r.server,
                asking: false,
            },
        };
        let mut steps: Vec<Upkeep> = self.retries_due(conns, now).into_iter().map(redo).collect();
        let start = self.cluster.as_mut().and_then(|c| c.map_due(now));
        if let (Some(start), Some(op)) = (start, internal_op()) {
            let n = self.servers.len();
            steps.push(Upkeep::Ask(OwnAsk {
                pool: at,
                servers: (0..n).map(|i| (start + i) % n).collect(),
                open: Open::Shared,
                op,
                bytes: cluster::CLUSTER_SLOTS,
                waiter: Waiter::SlotMap,
            }));
        }
        steps
    }
}

/// Each pass: what the cluster pools of `pools` ask of their nodes
/// (`PoolRt::cluster_upkeep`).
pub(super) fn upkeep_due(pools: &mut [PoolRt], conns: &Slab<Conn>, now: Instant) -> Vec<Upkeep> {
    let pools = pools.iter_mut().enumerate();
    pools
        .flat_map(|(at, p)| p.cluster_upkeep(at, conns, now))
        .collect()
}

impl Worker<'_> {
    /// Carry out `redo` for the kept request (or fragment) answered to
    /// `to`: the retry timer armed for a wait, or the request queued
    /// again on its server now, as `resending` says, after `ASKING` if
    /// asked (the next request may use a slot the node is importing; its
    /// reply is the proxy's own, dropped). Out of line: called from the
    /// reply loop only for a cluster error.
    #[cold]
    #[inline(never)]
    pub(super) fn redo(&mut self, pool: usize, to: ReplyTo, op: Op, redo: Redo, now: Instant) {
        let (target, asking) = match redo {
            Redo::At(at) => return self.timers.arm(at, super::tokens::RETRY_TIMER, 0),
            Redo::Now { to, asking } => (to, asking),
        };
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
        let cslot = self.pools[pool].slot_for(target, to.id, self.conns.resp3(to.token), op);
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
                |out: &mut Vec<u8>| out.extend_from_slice(cluster::ASKING),
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
                    |out: &mut Vec<u8>| match &keys {
                        Some(k) => proto.write_fragment(&bytes, &req, k, out),
                        None => proto.write_request(&req, &bytes, out),
                    },
                    now,
                );
            }
            Resending::Spooled(at) => {
                // Its bytes follow from the spool, as the connection
                // drains.
                self.enqueue(st, to.waiter(), op, |_: &mut Vec<u8>| {}, now);
                super::cluster_stream::start_feed(&mut self.conns, st, to, at);
                let fed = feed(&mut self.conns, &self.stats, &mut self.dirty, st, now);
                if let Fed::ClientLeft(sid) = fed {
                    self.close_all(super::closes::half_sent(
                        &self.conns,
                        super::conn::ServerRef::new(st, sid),
                        ServerFault::HalfResentClientLeft,
                    ));
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
#[path = "cluster_tests.rs"]
mod tests;
