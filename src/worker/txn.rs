//! Redis transactions through the proxy: WATCH, MULTI, EXEC, DISCARD and
//! UNWATCH on a server connection pinned to the client for the
//! transaction, so its commands run on one server, in one connection
//! state, with nobody else's in between.
//!
//! The server is the one the first key names: WATCH's keys, or, after a
//! bare MULTI (answered here), the first command with a key (a
//! transaction of keyless commands goes where `keyless_server` says). From
//! then on every command of the client goes to that connection, whole
//! (an MGET is not split), until EXEC, DISCARD or UNWATCH is answered and
//! the connection is closed. A command whose keys map to another server
//! is refused, and, inside MULTI, the transaction then ends in EXECABORT
//! as redis-server ends one with a command refused while queueing. The
//! client is not handed to a successor (reload, upgrade) while pinned.
//! In a Redis Cluster pool the server is the master of the first key's
//! slot, and the keys must live on that node.

use super::conn::{Conn, ConnTable, ReplySlot, ReplyTo, ServerRef};
use super::conn_state::{AfterPull, Txn};
use super::fleet_hold::FleetStep;
use super::Worker;
use crate::proto::redis::reply;
use crate::proto::redis::txn::{self, TxnAnswer};
use crate::proto::{Op, Request};
use mio::Token;
use std::time::Instant;

fn name_of(req: &Request) -> &'static str {
    match req.op {
        Op::Redis(op) => op.cmd.name(),
        Op::Mc(_) => "",
    }
}

/// What became of a request offered to the transaction path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxnStep {
    /// Not part of a transaction: routed as any request.
    NotTxn,
    /// Answered, or sent to the transaction's connection.
    Done,
    /// Held while keys it names are pulled to their new owners (a
    /// migrating pool); it goes to the transaction's connection after.
    Held,
}

impl Worker<'_> {
    /// Whether the request belongs to a transaction (a transaction
    /// command, or any command of a client in one), and what became of it.
    pub(super) fn txn_dispatch(
        &mut self,
        token: Token,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> TxnStep {
        let Op::Redis(op) = req.op else {
            return TxnStep::NotTxn;
        };
        let Some(c) = self.conns.client(token.0) else {
            return TxnStep::NotTxn;
        };
        let pool = c.pool();
        let txn_cmd = op.class == crate::proto::redis::CmdClass::Transaction;
        if (c.txn().is_none() && !txn_cmd)
            || matches!(
                req.route,
                crate::proto::Route::Local(crate::proto::Local::Quit(_))
            )
        {
            return TxnStep::NotTxn;
        }
        let name = name_of(req);
        let mut t = self.take_txn(token);
        let out = self.txn_answer(token, name, &mut t, now);
        if let Some(out) = out {
            let keep = t.multi || t.conn.is_some();
            self.put_txn(token, keep.then_some(t));
            self.push_ready(token, out, false);
            return TxnStep::Done;
        }
        // A migrating pool: the keys a WATCH or a queued command names are
        // pulled to their new owners before it reaches the transaction's
        // connection, as any request's are. A WATCHed key is then on its
        // new owner before it is watched there, and a queued command's
        // keys before EXEC runs it (their old copies are gone by then,
        // so nothing brings them back under it). A pull that writes a
        // key another client watches fails that client's EXEC, as any
        // write would.
        // A fleet member that must not route the pool now refuses the
        // command (inside MULTI: EXEC runs the others, as after a command
        // that fails when run).
        // Or holds it until it may (`fleet_hold.rs`).
        if !req.keys.is_empty() {
            let step = self.fleet_gate(token, pool, req, bytes, AfterPull::Txn, now);
            if step != FleetStep::Go {
                let keep = t.multi || t.conn.is_some();
                self.put_txn(token, keep.then_some(t));
                return match step {
                    FleetStep::Held => TxnStep::Held,
                    _ => TxnStep::Done,
                };
            }
        }
        if self.pools[pool].route.is_migrating() && !req.keys.is_empty() {
            self.put_txn(token, Some(t));
            if self.hold_for_moved_keys(token, req, bytes, AfterPull::Txn, now) {
                return TxnStep::Held;
            }
            t = self.take_txn(token);
        }
        self.txn_forward(token, req, bytes, t, now);
        TxnStep::Done
    }

    /// A transaction's command whose keys were pulled over goes on.
    pub(super) fn txn_pulled(&mut self, token: Token, req: &Request, bytes: &[u8], now: Instant) {
        let t = self.take_txn(token);
        self.txn_forward(token, req, bytes, t, now);
    }

    /// What a transaction command is answered here (no server needed, or
    /// refused); `None` when it goes to the pinned connection.
    fn txn_answer(
        &mut self,
        token: Token,
        name: &str,
        t: &mut Txn,
        now: Instant,
    ) -> Option<Vec<u8>> {
        match txn::answer(name, t.multi, t.dirty, t.conn.is_some()) {
            TxnAnswer::Forward => None,
            TxnAnswer::Begin => {
                t.multi = true;
                if t.conn.is_some() {
                    None // sent to the pinned connection
                } else {
                    t.multi_unsent = true;
                    Some(reply::OK.to_vec())
                }
            }
            TxnAnswer::Refuse(out) => Some(out),
            TxnAnswer::Abort => {
                if t.conn.is_some() {
                    // The server forgets the queued commands.
                    self.txn_send_internal(token, t, txn::DISCARD, now);
                }
                self.txn_unpin(token, t);
                Some(txn::EXECABORT.to_vec())
            }
            TxnAnswer::End(out) => {
                *t = Txn::default();
                Some(out.to_vec())
            }
        }
    }

    /// A command of a transaction to its pinned connection, choosing (and
    /// opening) it first; refused when its keys are on another server.
    fn txn_forward(&mut self, token: Token, req: &Request, bytes: &[u8], mut t: Txn, now: Instant) {
        let name = name_of(req);
        let (pool, client_id) = match self.conns.get(token.0) {
            Some(Conn::Client(c)) => (c.pool(), c.id()),
            _ => return,
        };
        let key = req.routing_key(bytes);
        let target = if req.keys.is_empty() {
            None
        } else {
            self.txn_server(pool, key.as_ref(), now)
        };
        // Every key of the command on one server.
        let others = req
            .keys
            .iter()
            .skip(1)
            .filter_map(|r| self.txn_server(pool, &bytes[r.clone()], now))
            .any(|s| Some(s) != target);
        let pinned = t.conn.map(|(_, s)| s);
        if others || (target.is_some() && pinned.is_some() && target != pinned) {
            if t.multi {
                t.dirty = true;
            }
            let keep = t.multi || t.conn.is_some();
            self.put_txn(token, keep.then_some(t));
            self.push_ready(token, txn::keys_elsewhere(name), false);
            return;
        }
        if t.conn.is_none() {
            let server = match target {
                Some(s) => Some(s),
                None => self.txn_keyless(pool, client_id, now),
            };
            let Some(server) = server else {
                self.put_txn(token, Some(t));
                self.reply_no_server(token, pool, req);
                return;
            };
            let slot = self.conn_slot(token, pool, server, client_id, req.op);
            match self.server_conn_dedicated(pool, server, slot, now) {
                Ok(st) => {
                    if let Some(s) = self.conns.server_mut(st.0) {
                        s.pin(Some(token));
                        t.conn = Some((ServerRef::new(st, s.id()), server));
                    }
                }
                Err(fault) => {
                    self.put_txn(token, (t.multi).then_some(t));
                    let mut out = Vec::new();
                    fault.write_reply(self.pools[pool].proto, req.op, &mut out);
                    self.push_ready(token, out, false);
                    return;
                }
            }
            if t.multi_unsent {
                t.multi_unsent = false;
                self.txn_send_internal(token, &t, txn::MULTI, now);
            }
        }
        if matches!(name, "EXEC" | "DISCARD") || (name == "UNWATCH" && !t.multi) {
            t.ending = true;
        }
        let Some((ServerRef { token: st, .. }, _)) = t.conn else {
            return;
        };
        self.put_txn(token, Some(t));
        let seq = self.push_slot(token, req.noreply, ReplySlot::default());
        let to = ReplyTo::new(token, client_id, seq, None);
        self.enqueue(st, to.waiter(), req.op, |o| o.extend_from_slice(bytes), now);
    }

    /// A reply came back on connection `st`, pinned to client `ct`: after
    /// the one that ends the transaction, the connection is closed and the
    /// client unpinned.
    pub(super) fn txn_replied(&mut self, st: Token, ct: Token) {
        let ending = matches!(self.conns.client(ct.0), Some(c)
            if c.txn().is_some_and(|t| t.ending && t.conn.is_some_and(|(r, _)| r.token == st)));
        let idle = matches!(self.conns.server(st.0), Some(s) if s.inflight().is_empty());
        if ending && idle {
            let mut t = self.take_txn(ct);
            self.txn_unpin(ct, &mut t);
        }
    }

    /// The connection client `ct`'s transaction was pinned to (`st`, id
    /// `sid`) closed on an error or a timeout, and the server's WATCH and
    /// MULTI state went with it. The client is closed once the errors of
    /// its requests in flight are written: carrying on would run its next
    /// commands outside the transaction it believes it is in, or send
    /// them to a connection that no longer exists (no reply, ever).
    pub(super) fn txn_lost(&mut self, ct: Token, st: Token, sid: u64) {
        let lost = matches!(self.conns.client(ct.0), Some(c)
            if c.txn().is_some_and(|t| t.conn.is_some_and(|(r, _)| r == ServerRef::new(st, sid))));
        if !lost {
            return;
        }
        let pool = match self.conns.get_mut(ct.0) {
            Some(Conn::Client(c)) => {
                c.set_txn(None);
                c.close_after_replies();
                c.pool()
            }
            _ => return,
        };
        crate::log_info!(
            "pool '{}': a transaction's server connection was lost: closing its client",
            self.pools[pool].cfg.name
        );
        self.maybe_finish_client(ct);
    }

    /// The client leaves: its pinned connection goes.
    pub(super) fn txn_close(&mut self, t: Option<Box<Txn>>) {
        if let Some((r, _)) = t.and_then(|t| t.conn) {
            if self.server_ref(r).is_some() {
                self.retire_server(r.token);
            }
        }
    }

    fn txn_unpin(&mut self, _ct: Token, t: &mut Txn) {
        if let Some((r, _)) = t.conn.take() {
            let idle = self.server_ref(r).is_some_and(|s| s.inflight().is_empty());
            if idle {
                self.retire_server(r.token);
            } else if let Some(s) = self.server_ref_mut(r) {
                // Retired once its last reply is in. (Looked up with its id:
                // a slot reused by another connection is not unpinned,
                // though `txn_lost` already ends a transaction whose
                // connection closed.)
                s.pin(None);
            }
        }
        *t = Txn::default();
    }

    fn txn_send_internal(&mut self, _token: Token, t: &Txn, cmd: &[u8], now: Instant) {
        let Some((ServerRef { token: st, .. }, _)) = t.conn else {
            return;
        };
        let Some(multi) = crate::proto::redis::Cmd::lookup(b"MULTI") else {
            return;
        };
        let op = Op::Redis(crate::proto::redis::RedisOp {
            cmd: multi,
            class: multi.class(),
        });
        self.enqueue(
            st,
            Some(super::conn::Waiter::Internal),
            op,
            |o| o.extend_from_slice(cmd),
            now,
        );
    }

    /// The server a transaction's key lives on: its slot's master in a
    /// cluster pool (a node serves every slot it holds in one
    /// transaction; a MOVED reply mid-transaction reaches the client).
    fn txn_server(&mut self, pool: usize, key: &[u8], now: Instant) -> Option<usize> {
        match &self.pools[pool].cluster {
            Some(c) => Some(c.master(crate::proto::redis::cluster::key_slot(key))),
            None => self.pools[pool].server_for(key, now),
        }
    }

    fn txn_keyless(&mut self, pool: usize, client_id: u64, now: Instant) -> Option<usize> {
        if let Some(c) = &self.pools[pool].cluster {
            return Some(c.master(0));
        }
        let p = &mut self.pools[pool];
        p.server_for(b"", now)?;
        let _ = client_id;
        (0..p.cfg.servers.len().min(p.servers.len()))
            .find(|&i| p.servers[i].ejected_until.is_none_or(|t| t <= now))
    }

    fn take_txn(&mut self, token: Token) -> Txn {
        match self.conns.get_mut(token.0) {
            Some(Conn::Client(c)) => c.take_txn().map(|b| *b).unwrap_or_default(),
            _ => Txn::default(),
        }
    }

    fn put_txn(&mut self, token: Token, t: Option<Txn>) {
        if let Some(c) = self.conns.client_mut(token.0) {
            c.set_txn(t.map(Box::new));
        }
    }
}
