//! The worker's own upkeep of its server connections, as steps: health
//! probes and slot-map questions (the proxy's own requests), a connection
//! timer's outcome, a moved master's connections retired, a TRYAGAIN's
//! retry sent again. Each feature decides its steps without sockets, from
//! the state it owns: a pool's health probes (`PoolRt::probes`), a
//! connection's timer (`server_health::timer_fired`, as
//! `Server::timer_fired` says), a cluster pool's retries and slot map
//! (`PoolRt::cluster_upkeep`), a sentinel's replies (`sentinel::event`),
//! a second's sweep and probes together (`sweep::second`). The worker
//! carries them all out in one place (`Worker::upkeep`), with the
//! connections they need.

use super::closes::Close;
use super::cluster_map::Redo;
use super::conn::{ConnTable, Open, ReplyTo, Server, Waiter};
use super::fault::ServerFault;
use super::Worker;
use crate::proto::Op;
use mio::Token;
use std::time::Instant;

/// One of the proxy's own requests to a server of a pool, its reply going
/// to `waiter`.
#[derive(Debug, Clone)]
pub(super) struct OwnAsk {
    pub pool: usize,
    /// Asked of the first of these (in order) a connection can be had
    /// with; none of them: not asked.
    pub servers: Vec<usize>,
    /// Which connection of the server's first slot: a health probe's is
    /// opened even while the server rests after failures.
    pub open: Open,
    pub op: Op,
    pub bytes: &'static [u8],
    pub waiter: Waiter,
}

/// What the worker does for its server connections, as a feature decided.
#[derive(Debug)]
pub(super) enum Upkeep {
    /// Send the proxy's own request (a health probe, `CLUSTER SLOTS`); a
    /// slot map's question is told to the pool's map, with the server
    /// that took it (`ClusterRt::map_asked`).
    Ask(OwnAsk),
    /// Arm server connection `token`'s timer (its id `id`) for `at`.
    Arm { at: Instant, token: Token, id: u64 },
    /// Close server connection `token`, failing what it owes with `fault`.
    Close { token: Token, fault: ServerFault },
    /// Server connection `token` takes no new request: it closes now if
    /// it owes nothing, else once answered (a moved master's).
    Retire(Token),
    /// A kept request of `pool` (reply `to`) sent again as `redo` says.
    Redo {
        pool: usize,
        to: ReplyTo,
        op: Op,
        redo: Redo,
    },
    /// A connection a sweep ends, as `Worker::close_all` ends it.
    End(Close),
}

impl Worker<'_> {
    /// Carry out `steps`, in order (see [`Upkeep`]).
    pub(super) fn upkeep(&mut self, steps: impl IntoIterator<Item = Upkeep>, now: Instant) {
        for step in steps {
            match step {
                Upkeep::Ask(a) => {
                    let asked = a.servers.iter().copied().find(|&server| {
                        let Ok(st) = self.server_conn(a.pool, server, 0, now, a.open) else {
                            return false;
                        };
                        let write = |out: &mut Vec<u8>| out.extend_from_slice(a.bytes);
                        self.enqueue(st, Some(a.waiter), a.op, write, now);
                        true
                    });
                    if matches!(a.waiter, Waiter::SlotMap) {
                        if let Some(c) = self.pools[a.pool].cluster.as_mut() {
                            c.map_asked(asked, now);
                        }
                    }
                }
                Upkeep::Arm { at, token, id } => self.timers.arm(at, token, id),
                Upkeep::Close { token, fault } => {
                    self.close_all(Some(super::closes::Close::Server {
                        token,
                        fault,
                        at: now,
                    }))
                }
                Upkeep::Retire(token) => {
                    if (self.conns.server_mut(token.0)).is_some_and(Server::retire_when_answered) {
                        self.close_all(super::closes::done(&self.conns, token));
                    }
                }
                Upkeep::Redo { pool, to, op, redo } => self.redo(pool, to, op, redo, now),
                Upkeep::End(close) => self.close_all([close]),
            }
        }
    }
}
