//! A client's Redis transaction, and what its commands do to it, without
//! sockets (`txn.rs` says why a transaction is pinned to one server
//! connection). `Txn::answer` says whether a transaction command is
//! answered here (and with what) or goes on; `Txn::place` says where a
//! command that goes on is sent: refused (its keys are elsewhere), no
//! server, a connection to open to this server, or the pinned one;
//! `Txn::pinned` records the connection opened and says whether a MULTI
//! answered here must be sent on it first; `Txn::end` unpins. The worker
//! opens the connections and moves the bytes.

use super::handle::ServerRef;
use super::pool::PoolRt;
use crate::proto::redis::{cluster, reply, txn, CmdClass};
use crate::proto::{Local, Op, Request, Route};
use mio::Token;
use std::time::Instant;

/// A client's transaction state.
#[derive(Debug, Default)]
pub struct Txn {
    /// The pinned connection and its server index.
    conn: Option<(ServerRef, usize)>,
    /// Inside MULTI.
    multi: bool,
    /// MULTI was answered here and not sent yet (no server chosen).
    multi_unsent: bool,
    /// A command was refused inside MULTI: EXEC answers EXECABORT.
    dirty: bool,
    /// EXEC, DISCARD or UNWATCH was sent: unpin once it is answered.
    ending: bool,
}

/// What becomes of a command offered to a transaction.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Goes on to the transaction's connection ([`Txn::place`]).
    Forward,
    /// Answered here with `reply`. `discard`: the connection the
    /// transaction was pinned to and no longer is (an EXEC answered
    /// EXECABORT): sent DISCARD, so the server forgets what was queued,
    /// and let go.
    Here {
        reply: Vec<u8>,
        discard: Option<ServerRef>,
    },
}

/// Where a transaction's command that goes on is sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// Refused with this error: its keys are not all on the
    /// transaction's one server.
    Refuse(Vec<u8>),
    /// No server for it (none of the pool's is up).
    NoServer,
    /// To a new connection to this server, pinned with [`Txn::pinned`].
    Open(usize),
    /// To the pinned connection.
    Send(Token),
}

/// The command's name (upper case); empty for a memcached request.
pub fn name_of(req: &Request) -> &'static str {
    match req.op {
        Op::Redis(op) => op.cmd.name(),
        Op::Mc(_) => "",
    }
}

/// Whether `req` belongs to a transaction: a transaction command, or any
/// command of a client in one (`in_txn`); QUIT never does (it closes).
pub fn concerns(req: &Request, in_txn: bool) -> bool {
    let Op::Redis(op) = req.op else {
        return false;
    };
    (in_txn || op.class == CmdClass::Transaction)
        && !matches!(req.route, Route::Local(Local::Quit(_)))
}

/// The server a transaction's key lives on: its slot's master in a
/// cluster pool (a node serves every slot it holds in one transaction; a
/// MOVED reply mid-transaction reaches the client).
pub fn server_of(pool: &mut PoolRt, key: &[u8], now: Instant) -> Option<usize> {
    match &pool.cluster {
        Some(c) => Some(c.master(cluster::key_slot(key))),
        None => pool.server_for(key, now),
    }
}

/// The server a transaction without keys goes to: the first server not
/// ejected (a cluster pool: slot 0's master); none when the pool has no
/// server up.
pub fn keyless_server(pool: &mut PoolRt, now: Instant) -> Option<usize> {
    if let Some(c) = &pool.cluster {
        return Some(c.master(0));
    }
    pool.server_for(b"", now)?;
    (0..pool.cfg.servers.len().min(pool.servers.len()))
        .find(|&i| pool.servers[i].ejected_until.is_none_or(|t| t <= now))
}

impl Txn {
    /// Worth keeping on its client: inside MULTI, or pinned.
    pub fn keep(&self) -> bool {
        self.multi || self.conn.is_some()
    }

    /// The pinned connection, if any.
    pub fn conn(&self) -> Option<ServerRef> {
        self.conn.map(|(r, _)| r)
    }

    /// The pinned connection's server, if any.
    pub fn server(&self) -> Option<usize> {
        self.conn.map(|(_, s)| s)
    }

    /// Whether the reply that ends the transaction is awaited on `st`.
    pub fn ends_on(&self, st: Token) -> bool {
        self.ending && self.conn.is_some_and(|(r, _)| r.token == st)
    }

    /// A command was refused: inside MULTI the transaction then ends in
    /// EXECABORT, as redis-server's does.
    pub fn refused(&mut self) {
        if self.multi {
            self.dirty = true;
        }
    }

    /// The transaction ends here: its state goes, and the pinned
    /// connection (if any) is given back to be let go.
    pub fn end(&mut self) -> Option<ServerRef> {
        let conn = self.conn();
        *self = Txn::default();
        conn
    }

    /// What transaction command `name` (upper case; any other command
    /// goes on) is answered here, `proto/redis/txn.rs`'s answer applied
    /// to this state.
    pub fn answer(&mut self, name: &str) -> Answer {
        let here = |reply: Vec<u8>| Answer::Here {
            reply,
            discard: None,
        };
        match txn::answer(name, self.multi, self.dirty, self.conn.is_some()) {
            txn::TxnAnswer::Forward => Answer::Forward,
            txn::TxnAnswer::Begin => {
                self.multi = true;
                if self.conn.is_some() {
                    Answer::Forward // sent to the pinned connection
                } else {
                    self.multi_unsent = true;
                    here(reply::OK.to_vec())
                }
            }
            txn::TxnAnswer::Refuse(out) => here(out),
            txn::TxnAnswer::Abort => Answer::Here {
                discard: self.end(),
                reply: txn::EXECABORT.to_vec(),
            },
            txn::TxnAnswer::End(out) => {
                *self = Txn::default();
                here(out.to_vec())
            }
        }
    }

    /// Where `req` (its bytes `bytes`), which goes on, is sent, in
    /// `pool`: every key on the server of the first, and that the pinned
    /// one; a server chosen by the first key (or `keyless_server`) when
    /// none is pinned yet. A refusal inside MULTI makes EXEC abort.
    pub fn place(&mut self, req: &Request, bytes: &[u8], pool: &mut PoolRt, now: Instant) -> Place {
        let name = name_of(req);
        let target = if req.keys.is_empty() {
            None
        } else {
            server_of(pool, req.routing_key(bytes).as_ref(), now)
        };
        let others = req
            .keys
            .iter()
            .skip(1)
            .filter_map(|r| server_of(pool, &bytes[r.clone()], now))
            .any(|s| Some(s) != target);
        let pinned = self.conn.map(|(_, s)| s);
        if others || (target.is_some() && pinned.is_some() && target != pinned) {
            self.refused();
            return Place::Refuse(txn::keys_elsewhere(name));
        }
        if let Some((r, _)) = self.conn {
            self.sending(name);
            return Place::Send(r.token);
        }
        match target.or_else(|| keyless_server(pool, now)) {
            Some(server) => Place::Open(server),
            None => Place::NoServer,
        }
    }

    /// The connection `conn` to `server` was opened and pinned for
    /// command `name` ([`Place::Open`]): the MULTI to send on it first,
    /// when MULTI was answered here.
    pub fn pinned(&mut self, conn: ServerRef, server: usize, name: &str) -> Option<&'static [u8]> {
        self.conn = Some((conn, server));
        let multi = std::mem::take(&mut self.multi_unsent).then_some(txn::MULTI);
        self.sending(name);
        multi
    }

    /// `name` goes to the pinned connection: EXEC, DISCARD, and UNWATCH
    /// outside MULTI end the transaction once answered.
    fn sending(&mut self, name: &str) {
        if txn::ends(name, self.multi) {
            self.ending = true;
        }
    }
}

#[cfg(test)]
#[path = "transaction_tests.rs"]
mod tests;
