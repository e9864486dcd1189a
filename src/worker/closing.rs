//! `Worker::close_all`: the one executor of [`Close`] values. A close
//! ends its connection (deregistered, counted, forgotten by its pool),
//! and what the connection leaves behind, decided by its owner (a
//! client's `Client::left`, a server connection's `fallout` and each
//! lost request's `Inflight::lost`), is carried out: the closes it leads
//! to go on a work list, each carried out before the next one asked for,
//! as if nested, without the executor calling itself.

use super::budget::OutputBudget;
use super::closes::{left_behind, Close, OverLimitLine};
use super::cluster_stream::half_resent;
use super::conn::{Conn, ConnTable, Lost, ServerRef};
use super::fault::ServerFault;
use super::pool::PoolRt;
use super::pull::Step;
use super::server::fallout;
use super::stream_reply::unblock_reply;
use super::{Worker, WorkerCtl};
use crate::stats::PoolField;
use mio::Token;
use slab::Slab;
use std::time::Instant;

/// A close as it is carried out, once what it names is checked to be
/// there and its reason logged ([`ending`]).
enum Ending {
    /// Nothing: it is gone, or no longer to be closed.
    Skip,
    Client {
        token: Token,
        error: bool,
    },
    Server {
        token: Token,
        fault: ServerFault,
        at: Instant,
    },
    /// A dedicated server connection, closed without fault.
    Retire(ServerRef),
}

/// What `close` comes to now, its reason logged: a client, a server
/// connection, or nothing when what it names went since (or, for an
/// eviction, once eviction has stopped).
fn ending(
    close: Close,
    conns: &mut Slab<Conn>,
    out: &OutputBudget,
    pools: &[PoolRt],
    ctl: &WorkerCtl,
) -> Ending {
    let client = |token, error| Ending::Client { token, error };
    match close {
        Close::Client { token, error } => client(token, error),
        Close::Named { client: r, error } => match conns.client_ref(r) {
            Some(_) => client(r.token, error),
            None => Ending::Skip,
        },
        Close::Evict { token, len } => {
            if !out.evicting() {
                return Ending::Skip;
            }
            let (bytes, budget) = out.figures();
            crate::log_notice!(
                "{bytes} bytes of replies buffered, over buffer_budget {budget}: closing the client holding {len} of them"
            );
            client(token, true)
        }
        Close::OverLimit { token, bytes, how } => {
            let Some(c) = conns.client(token.0) else {
                return Ending::Skip;
            };
            let p = &pools[c.pool()];
            let limit = ctl.output_limit(p);
            let line = OverLimitLine {
                pool: &p.cfg.name,
                bytes,
                how,
                limit,
            };
            crate::log_notice!("{line}");
            client(token, true)
        }
        Close::Unsubscribed {
            client: r,
            pool,
            server,
        } => {
            if conns.client_ref(r).is_none() {
                return Ending::Skip;
            }
            crate::log_info!(
                "pool '{}': server '{}' lost under a subscriber: closing it",
                pools[pool].cfg.name,
                pools[pool].servers[server].name
            );
            client(r.token, true)
        }
        Close::Pinned { token, lost } => {
            let Some(c) = conns.client_mut(token.0) else {
                return Ending::Skip;
            };
            if !c.txn_lost(lost) {
                return Ending::Skip;
            }
            crate::log_info!(
                "pool '{}': a transaction's server connection was lost: closing its client",
                pools[c.pool()].cfg.name
            );
            match c.finished() {
                true => client(token, false),
                false => Ending::Skip,
            }
        }
        Close::Server { token, fault, at } => Ending::Server { token, fault, at },
        Close::Retire(r) => Ending::Retire(r),
        Close::HalfSent { token, why } => {
            crate::log_info!("closing a server connection holding half a request: {why}");
            let at = Instant::now();
            Ending::Server {
                token,
                fault: why,
                at,
            }
        }
    }
}

impl Worker<'_> {
    /// End the connections `closes` names, in order, and those their
    /// ending leads to (off the data path: a failed socket's, a sweep's,
    /// an eviction's, a client's own connections as it goes).
    #[cold]
    #[inline(never)]
    pub(super) fn close_all(&mut self, closes: impl IntoIterator<Item = Close>) {
        let mut closes = closes.into_iter();
        // The closes those carried out lead to, the next one on top.
        let mut more: Vec<Close> = Vec::new();
        while let Some(close) = more.pop().or_else(|| closes.next()) {
            let from = more.len();
            match ending(close, &mut self.conns, &self.out, &self.pools, &self.ctl) {
                Ending::Skip => {}
                Ending::Client { token, error } => {
                    if self.conns.client(token.0).is_none() {
                        continue;
                    }
                    let Conn::Client(mut c) = self.conns.remove(token.0) else {
                        continue;
                    };
                    let _ = self.poll.registry().deregister(c.sock_mut());
                    self.out.sub(c.out_len(), &self.stats);
                    let left = c.left();
                    let resent = half_resent(&self.conns, &c);
                    more.extend(left_behind(&self.conns, left.streamed, resent, left.own));
                    self.resume.extend(
                        (left.reply_wait).and_then(|r| unblock_reply(&mut self.conns, r, true)),
                    );
                    let pool = c.pool();
                    crate::log_pverb!(
                        "client {} of pool '{}' closed ({})",
                        crate::net::peer_of(std::os::fd::AsRawFd::as_raw_fd(c.sock())),
                        self.pools[pool].cfg.name,
                        if error { "error" } else { "eof" }
                    );
                    let field = if error {
                        PoolField::ClientErr
                    } else {
                        PoolField::ClientEof
                    };
                    self.stats.pool_add(pool, field, 1);
                    let (reg, p) = (self.poll.registry(), &mut self.pools[pool]);
                    self.intake.client_left(&c, p, &self.stats, reg);
                }
                Ending::Server { token, fault, at } => {
                    if self.conns.server(token.0).is_none() {
                        continue;
                    }
                    let Conn::Server(mut s) = self.conns.remove(token.0) else {
                        continue;
                    };
                    let _ = self.poll.registry().deregister(s.sock_mut());
                    let (pool, server) = (s.pool(), s.server());
                    let left = fallout(&mut self.conns, token, &mut s);
                    self.resume.extend(left.resume);
                    let (p, stats) = (&mut self.pools[pool], &self.stats);
                    p.conn_closed(token, &mut s, stats);
                    p.connection_ended(pool, server, &fault, s.inflight().len(), at, stats);
                    let proto = p.proto;
                    for f in s.take_inflight() {
                        match f.lost(&fault, proto) {
                            Lost::Nothing => {}
                            Lost::SlotMap => self.pools[pool].cluster_map_failed(),
                            Lost::Pull {
                                token: ct,
                                id,
                                idx,
                                part,
                            } => {
                                let step = (self.conns.client_mut(ct.0))
                                    .map_or(Step::Wait, |c| c.pull_reply(id, idx, part, None));
                                self.run_held(ct, step, at);
                            }
                            Lost::Warm { idx } => {
                                let copy = self.warms.reply(idx as usize, None);
                                self.send_copy(copy, None, at);
                            }
                            Lost::Fail { to, reply } => {
                                self.stats.pool_add(pool, PoolField::ForwardError, 1);
                                self.fragment_done(to, reply, true, true);
                            }
                        }
                    }
                    more.extend(left.closes(pool, server));
                }
                Ending::Retire(r) => {
                    if self.conns.server_ref(r).is_none() {
                        continue;
                    }
                    let Conn::Server(mut s) = self.conns.remove(r.token.0) else {
                        continue;
                    };
                    let _ = self.poll.registry().deregister(s.sock_mut());
                    self.pools[s.pool()].conn_closed(r.token, &mut s, &self.stats);
                }
            }
            more[from..].reverse();
        }
    }
}
