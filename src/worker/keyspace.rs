//! Redis commands over a pool's whole keyspace: sent to every server (a
//! cluster pool's every master) and merged (DBSIZE, KEYS, RANDOMKEY, INFO,
//! PUBSUB, FLUSHALL/FLUSHDB behind `allow_flush`, SCRIPT), or walked
//! server by server (SCAN), and memcached's `flush_all`.

use super::conn::{Fragment, Multi, MultiMode, Origin, ReplySlot, ReplyTo};
use super::pool::PoolRt;
use super::Worker;
use crate::proto::{Op, Request};
use crate::stats::PoolField;
use std::time::Instant;

impl Worker<'_> {
    /// Send a request to every server of the pool (memcached flush_all when
    /// the pool has `allow_flush`, Redis SCRIPT LOAD/FLUSH).
    pub(super) fn forward_broadcast(
        &mut self,
        at: Origin,
        req: Request,
        bytes: &[u8],
        now: Instant,
    ) {
        if let Op::Mc(op) = req.op {
            // memcached's only broadcast is flush_all: opt-in per pool.
            if !self.pools[at.pool].cfg.allow_flush {
                let out = crate::proto::memcache::flush_refused(op, req.noreply);
                if !out.is_empty() {
                    self.push_ready(at.token, out, false);
                }
                return;
            }
        }
        if let Some(refused) = self.pools[at.pool].broadcast_refused(req.op) {
            let mut out = Vec::new();
            crate::proto::redis::error_reply(&refused, &mut out);
            self.push_ready(at.token, out, false);
            return;
        }
        // A cluster pool: every master (its keyspace), every node for
        // SCRIPT; others: the configured servers (not those a migration
        // keeps for pulls).
        let p = &self.pools[at.pool];
        let targets: Vec<usize> = match &p.cluster {
            Some(_) if matches!(req.op, Op::Redis(op) if op.cmd.is("SCRIPT")) => {
                (0..p.servers.len()).collect()
            }
            Some(c) => c.masters(),
            None => (0..p.cfg.servers.len()).collect(),
        };
        let n = targets.len();
        // INFO: each server's default sections, merged into walnut's own
        // answer with the pool's client count (`proto::redis::info`).
        let info = matches!(req.op, Op::Redis(op) if op.cmd.is("INFO"));
        let mode = if info {
            MultiMode::Info(crate::proto::redis::info::ProxyFigures {
                connected_clients: self.stats.pool_total(at.pool, PoolField::ClientConnections),
            })
        } else {
            MultiMode::Broadcast
        };
        let slot = ReplySlot {
            multi: Some(Box::new(Multi {
                req: req.clone(),
                bytes: Vec::new(),
                frags: (0..n).map(|_| Fragment::default()).collect(),
                remaining: n,
                error: None,
                mode,
            })),
            ..ReplySlot::default()
        };
        let seq = self.push_slot(at.token, req.noreply, slot);
        let bytes = if info {
            crate::proto::redis::info::INFO
        } else {
            bytes
        };
        for (fi, s) in targets.into_iter().enumerate() {
            let frag = Some(fi as u32);
            self.send_or_fail(
                ReplyTo::new(at.token, at.client_id, seq, frag),
                at.pool,
                s,
                |out| out.extend_from_slice(bytes),
                req.op,
                now,
            );
        }
    }

    /// SCAN over every server in turn: the client's cursor names the
    /// server and its cursor there (`proto::redis::keyspace`); the reply's
    /// cursor is rewritten on its way back (`process_replies`).
    pub(super) fn forward_scan(&mut self, at: Origin, req: &Request, bytes: &[u8], now: Instant) {
        use crate::proto::redis::keyspace;
        let Some(cursor) = keyspace::scan_cursor(bytes) else {
            self.push_ready(at.token, keyspace::INVALID_CURSOR.to_vec(), false);
            return;
        };
        let walk = self.pools[at.pool].scan_walk();
        let n = walk.len();
        let (nth, there) = keyspace::scan_split(cursor, n);
        let server = walk.get(nth).copied().unwrap_or(0);
        let seq = self.push_slot(at.token, req.noreply, ReplySlot::default());
        let out = keyspace::scan_request(bytes, there);
        self.send_or_fail(
            ReplyTo::new(at.token, at.client_id, seq, None),
            at.pool,
            server,
            |o| o.extend_from_slice(&out),
            req.op,
            now,
        );
    }
}

/// What a pool lets go to every server, and the servers a SCAN walks.
impl PoolRt {
    /// Why a Redis command for every server is refused in this pool, if it is.
    fn broadcast_refused(&self, op: Op) -> Option<String> {
        let Op::Redis(op) = op else {
            return None;
        };
        let cfg = &self.cfg;
        let name = op.cmd.name();
        if name == "SCRIPT" {
            return None;
        }
        match name {
            "FLUSHALL" | "FLUSHDB" if !cfg.allow_flush => Some(format!(
                "{name} is refused by the proxy: pool '{}' needs 'allow_flush: true'",
                cfg.name
            )),
            "KEYS" if !cfg.allow_keys => Some(format!(
                "KEYS is refused by the proxy (it blocks every server while it walks every key; use SCAN): pool '{}' needs 'allow_keys: true'",
                cfg.name
            )),
            _ => None,
        }
    }

    /// `server`'s reply to a SCAN, with the cursor the client is given
    /// (naming the server and its cursor there); `None` for other replies.
    pub(super) fn scan_reply(&self, server: usize, op: Op, bytes: &[u8]) -> Option<Vec<u8>> {
        match op {
            Op::Redis(op) if op.class == crate::proto::redis::CmdClass::Scan => {
                let walk = self.scan_walk();
                let nth = walk.iter().position(|&s| s == server)?;
                crate::proto::redis::keyspace::scan_reply(bytes, nth, walk.len())
            }
            _ => None,
        }
    }

    /// The servers a SCAN walks, in turn: the configured ones (not those a
    /// migration keeps for pulls); a cluster pool's masters, in server
    /// order (a failover during the walk can repeat or skip a node's keys).
    pub(super) fn scan_walk(&self) -> Vec<usize> {
        match &self.cluster {
            Some(c) => c.masters(),
            None => (0..self.cfg.servers.len()).collect(),
        }
    }
}
