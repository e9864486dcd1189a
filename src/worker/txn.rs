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

use super::conn::{Conn, ConnTable, ReplySlot, ServerRef, Waiter};
use super::pool::PoolRt;
use super::pull::AfterPull;
use super::pull::Hold;
use super::send_plan::{Dedicated, Reply, Sent, Usage};
use super::transaction::{self, Answer, Place, Txn};
use super::Worker;
use crate::proto::redis::txn;
use crate::proto::Request;
use mio::Token;
use slab::Slab;
use std::time::Instant;

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

/// Client `token`'s transaction, taken off it (a new one if none).
fn take(conns: &mut Slab<Conn>, token: Token) -> Txn {
    conns
        .client_mut(token.0)
        .and_then(|c| c.take_txn())
        .map(|b| *b)
        .unwrap_or_default()
}

/// Put back (or end, with `None`) client `token`'s transaction.
fn put(conns: &mut Slab<Conn>, token: Token, t: Option<Txn>) {
    if let Some(c) = conns.client_mut(token.0) {
        c.set_txn(t.map(Box::new));
    }
}

/// A transaction's connection `r` is let go: returned, to be closed now,
/// if nothing is in flight on it; else unpinned, and retired once its last
/// reply is in.
fn let_go(conns: &mut Slab<Conn>, r: ServerRef) -> Option<Token> {
    let s = conns.server_ref_mut(r)?;
    if s.inflight().is_empty() {
        return Some(r.token);
    }
    // Looked up with its id: a slot reused by another connection is not
    // unpinned, though `Client::txn_lost` already ends a transaction whose
    // connection closed.
    s.pin(None);
    None
}

/// A reply came back on connection `st`, pinned to client `ct`: the
/// connection to close now when it was the reply that ends the
/// transaction and nothing else is in flight on it (the client's
/// transaction ends, `Txn::end`, and the connection is let go).
pub(super) fn replied(conns: &mut Slab<Conn>, st: Token, ct: Token) -> Option<Token> {
    let ending = conns
        .client(ct.0)
        .is_some_and(|c| c.txn().is_some_and(|t| t.ends_on(st)));
    let idle = conns.server(st.0).is_some_and(|s| s.inflight().is_empty());
    if !(ending && idle) {
        return None;
    }
    take(conns, ct).end().and_then(|r| let_go(conns, r))
}

/// Put it back when there is anything to keep ([`Txn::keep`]).
fn put_kept(conns: &mut Slab<Conn>, token: Token, t: Txn) {
    put(conns, token, t.keep().then_some(t));
}

/// Client `token`'s transaction, to work on where it is (a new one
/// started if none); `None` for a client gone.
fn get_mut(conns: &mut Slab<Conn>, token: Token) -> Option<&mut Txn> {
    let c = conns.client_mut(token.0)?;
    if c.txn().is_none() {
        c.set_txn(Some(Box::default()));
    }
    c.txn_mut()
}

/// Client `token`'s transaction goes when there is nothing in it to keep
/// ([`Txn::keep`]).
pub(super) fn tidy(conns: &mut Slab<Conn>, token: Token) {
    if let Some(c) = conns.client_mut(token.0) {
        if c.txn().is_some_and(|t| !t.keep()) {
            c.set_txn(None);
        }
    }
}

/// Where client `token`'s transaction command goes (at once, or once the
/// keys it names were pulled over), as a [`Dedicated`] that
/// `Worker::send_dedicated` carries out: to the pinned connection, or to
/// one opened and pinned for it (`Usage::Pin`, which sends the MULTI
/// answered here first when `Txn::pinned` says so); with no server up,
/// the pool's error. `None` when answered here: refused, its keys are on
/// another server.
pub(super) fn pulled<'a>(
    conns: &mut Slab<Conn>,
    pools: &mut [PoolRt],
    token: Token,
    req: &'a Request,
    bytes: &'a [u8],
    now: Instant,
) -> Option<Dedicated<'a>> {
    let mut t = take(conns, token);
    let pool = conns.client(token.0)?.pool();
    let (server, conn) = match t.place(req, bytes, &mut pools[pool], now) {
        Place::Refuse(out) => {
            put_kept(conns, token, t);
            conns.push_ready(token, out, false);
            return None;
        }
        Place::NoServer => (None, None),
        Place::Send(st) => (t.server(), Some(st)),
        Place::Open(server) => (Some(server), None),
    };
    put(conns, token, Some(t));
    Some(Dedicated {
        pool,
        server,
        op: req.op,
        conn,
        usage: Usage::Pin {
            name: transaction::name_of(req),
        },
        reply: Reply::New {
            slot: ReplySlot::default(),
            noreply: req.noreply,
        },
        note: None,
        write: Sent::Bytes(bytes),
    })
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
        let Some(c) = self.conns.client(token.0) else {
            return TxnStep::NotTxn;
        };
        if !transaction::concerns(req, c.txn().is_some()) {
            return TxnStep::NotTxn;
        }
        let pool = c.pool();
        let Some(t) = get_mut(&mut self.conns, token) else {
            return TxnStep::NotTxn;
        };
        if let Answer::Here { reply, discard } = t.answer(transaction::name_of(req)) {
            if let Some((r, op)) = discard.zip(txn::internal_op()) {
                // The server forgets the queued commands; its answer is
                // dropped.
                let cmd = |o: &mut Vec<u8>| o.extend_from_slice(txn::DISCARD);
                self.enqueue(r.token, Some(Waiter::Internal), op, cmd, now);
            }
            if let Some(st) = discard.and_then(|r| let_go(&mut self.conns, r)) {
                self.close_all(super::closes::done(&self.conns, st));
            }
            tidy(&mut self.conns, token);
            self.conns.push_ready(token, reply, false);
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
            let hold = self.gate(token, pool, req, bytes, AfterPull::Txn, now);
            if !matches!(hold, Hold::Go { .. }) {
                tidy(&mut self.conns, token);
                return match hold {
                    Hold::Held => TxnStep::Held,
                    _ => TxnStep::Done,
                };
            }
        }
        if let Some(d) = pulled(&mut self.conns, &mut self.pools, token, req, bytes, now) {
            self.send_dedicated(token, d, now);
        }
        TxnStep::Done
    }
}

#[cfg(test)]
#[path = "txn_tests.rs"]
mod tests;
