//! A fleet member's requests that must wait for the fleet, held instead of
//! refused at once, within a bound.
//!
//! A request of a `migration: true` pool must not be routed now when a key it names moves while the fleet's barrier has not
//! passed (`FLEET_MOVING`), or the member is not known in step with the
//! fleet (`FLEET_LAPSED`, `fleet/page.rs`). Such a
//! request is held: its client gets a [`Gate`] without pulls, so it is not
//! parsed further and its later pipelined requests stay behind it (the
//! same gate a pull holds a request with), while every other client goes
//! on. Each pass of the loop (after the controller's messages, which bring
//! the barrier's go, `Param::FleetGo`) looks at the held requests:
//!
//! - what it waited for has passed (the pool is no longer fenced, or the
//!   page says in step again): the request goes on exactly as one arriving
//!   now would, through the gates again (`Worker::gate`: it may be held
//!   for the other reason, or refused), then pulls and routing;
//! - the wait's deadline passed: it is refused with the error it would
//!   have got at once;
//! - the worker stops (a reload's handover, a graceful stop): every held
//!   request is refused before the worker reports that it routes no more,
//!   and nothing is held from then on. A request held by an old
//!   generation is never routed after the placement switch.
//!
//! The deadline belongs to the wait, not to each request: it is the bound
//! (`--fleet-hold`, on the fleet page) after the first request this worker
//! held for it (per pool for a barrier, one for the membership). A barrier
//! that does not pass in time (etcd stopped mid-change) then costs a
//! client one bound, not one bound per request: once a wait's deadline has
//! passed, its requests are refused at once until what it waited for
//! passes. The loop's wait is bounded by the nearest deadline, and by a
//! short poll of the page while requests wait for the member to be in
//! step (the agent writes the page; nothing tells the worker).
//!
//! A client that closes while held takes its gate with it; its entry here
//! is dropped at the next look (its id no longer matches).
//!
//! [`FleetHolds`] owns the held requests and decides, without sockets:
//! whether a request may be held and until when (`admit`), which held
//! requests go on or are refused at `now` (`due`, returning [`Ended`]
//! values), and how long the loop may wait (`wait`); the pool says what a
//! request waits for (`PoolRt::fleet_wait`), and what a request at the
//! gate comes to (`gate`, an [`Admit`]: go, hold until when, or refuse
//! with which error); the pool writes the refusal (`fleet_refusal`).
//! What `gate` says is the first of the gates a request passes
//! (`PoolRt::gated`, `migrate.rs`), carried out on its client for
//! `Worker::gate` (`carry_out`: its gate set and the hold noted, or its
//! refusal queued); an ended hold is its client's step
//! (`FleetHolds::ended`, a `Step::Unheld`), carried out with the pulls'
//! steps by `Worker::run_held` (the gate taken, the request through the
//! gates again or refused).

use super::conn::{Conn, ConnTable};
use super::conn_state::Gate;
use super::pool::PoolRt;
use super::pull::{At, Hold, Step};
use crate::fleet::page::FleetPage;
use crate::proto::Request;
use crate::stats::shm::StatsSlot;
use crate::stats::WorkerField;
use mio::Token;
use slab::Slab;
use std::time::{Duration, Instant};

/// How often the page is looked at while a request waits for the member
/// to be in step again.
const PAGE_POLL: Duration = Duration::from_millis(5);

/// What a fleet member answers a request it must not route while the
/// member is not known in step with the fleet.
pub const FLEET_LAPSED: &str =
    "fleet membership lapsed: this walnut is catching up with the fleet, retry";
/// ... and a request for a key that moves while the fleet's barrier has
/// not passed.
pub const FLEET_MOVING: &str = "key moving: a fleet change is in progress, retry";

/// What a held request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// The fleet's barrier for its pool (`FLEET_MOVING`).
    Barrier,
    /// The member in step again (`FLEET_LAPSED`).
    InStep,
}

impl Wait {
    fn error(self) -> &'static str {
        match self {
            Wait::Barrier => FLEET_MOVING,
            Wait::InStep => FLEET_LAPSED,
        }
    }
}

/// What a request the fleet may hold comes to at the gate
/// (`FleetHolds::gate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Nothing to wait for: route it.
    Go,
    /// Hold it until `until`, waiting for `why`.
    Hold { why: Wait, until: Instant },
    /// Refuse it at once with this error (the worker stops, or its wait's
    /// deadline passed).
    Refuse(&'static str),
}

/// One held request: its client (token and id), its pool, what it waits
/// for, when it was held and its wait's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    token: Token,
    id: u64,
    pool: usize,
    why: Wait,
    since: Instant,
    until: Instant,
}

/// A held request whose wait ended (`FleetHolds::due`): the worker takes
/// its client's gate and routes it again, or refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ended {
    /// Its client.
    pub token: Token,
    /// Its pool.
    pub pool: usize,
    /// When it was held.
    pub since: Instant,
    /// `None`: what it waited for passed, it goes on as a request arriving
    /// now would; else the error it is refused with (its deadline passed,
    /// or the worker stops).
    pub refused: Option<&'static str>,
}

/// The held requests of a worker and when their waits began.
#[derive(Debug, Default)]
pub(super) struct FleetHolds {
    held: Vec<Held>,
    /// Per pool: when this worker first held a request for its barrier.
    barrier_since: Vec<Option<Instant>>,
    /// When this worker first held a request for the member to be in
    /// step (cleared once it is).
    in_step_since: Option<Instant>,
    /// The worker stops: nothing more is held.
    closed: bool,
}

impl FleetHolds {
    /// A request of `pool` must wait for `why` at `now`: the deadline of
    /// its wait if it may be held (the wait's first hold plus `bound`),
    /// `None` if it is refused at once (the worker stops, or the wait's
    /// deadline passed). The wait begins at its first request either way.
    pub(super) fn admit(
        &mut self,
        pool: usize,
        why: Wait,
        now: Instant,
        bound: Duration,
    ) -> Option<Instant> {
        let since = match why {
            Wait::InStep => *self.in_step_since.get_or_insert(now),
            Wait::Barrier => {
                if self.barrier_since.len() <= pool {
                    self.barrier_since.resize(pool + 1, None);
                }
                *self.barrier_since[pool].get_or_insert(now)
            }
        };
        let until = since + bound;
        (!self.closed && now < until).then_some(until)
    }

    /// A request of `pool` (the pool and its index) about to be routed:
    /// what it waits for, as its pool says (`PoolRt::fleet_wait`, with
    /// `in_step` asked only of a `migration: true` pool), and whether it
    /// may wait (`admit`, the bound asked only then).
    pub(super) fn gate(
        &mut self,
        (pool, index): (&mut PoolRt, usize),
        in_step: impl FnOnce() -> bool,
        bound: impl FnOnce() -> Duration,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Admit {
        let Some(why) = pool.fleet_wait(in_step, req, bytes, now) else {
            return Admit::Go;
        };
        match self.admit(index, why, now, bound()) {
            Some(until) => Admit::Hold { why, until },
            None => Admit::Refuse(why.error()),
        }
    }

    /// Hold the request of client `token` (`id`) admitted until `until`.
    pub(super) fn hold(
        &mut self,
        client: (Token, u64),
        pool: usize,
        why: Wait,
        now: Instant,
        until: Instant,
    ) {
        self.held.push(Held {
            token: client.0,
            id: client.1,
            pool,
            why,
            since: now,
            until,
        });
    }

    /// What `gate` said of a request (`at`) of client `token`, carried
    /// out and counted: held (its client's gate set, the hold noted until
    /// `until`), or refused (the error queued as its reply, written by its
    /// pool).
    pub(super) fn carry_out(
        &mut self,
        (admit, at, token): (Admit, At, Token),
        (conns, stats, pools): (&mut Slab<Conn>, &StatsSlot<'_>, &[PoolRt]),
        now: Instant,
    ) -> Hold {
        let Some(c) = conns.client_mut(token.0) else {
            return Hold::Refused;
        };
        let (pool, error) = match admit {
            Admit::Go => return Hold::Go { owner: None },
            Admit::Refuse(error) => (c.pool(), error),
            Admit::Hold { why, until } => {
                c.set_gate(Box::new(Gate::held(at.req, at.bytes, at.then)));
                self.hold((token, c.id()), c.pool(), why, now, until);
                stats.worker_add(WorkerField::FleetHeld, 1);
                return Hold::Held;
            }
        };
        stats.worker_add(WorkerField::FleetRefused, 1);
        let out = pools[pool].fleet_refusal(at.req, error);
        conns.push_ready(token, out, false);
        Hold::Refused
    }

    /// Nothing held and no wait for the member to be in step: `due` has
    /// nothing to do.
    pub(super) fn idle(&self) -> bool {
        self.held.is_empty() && self.in_step_since.is_none()
    }

    /// The held requests whose wait ended at `now`, taken off, in the
    /// order they were held: those whose wait is over (`in_step`: the
    /// member is in step; `fenced(pool)`: the pool's barrier has not
    /// passed) go on, those past their deadline, or all once the worker
    /// stops, are refused. A request whose client is gone or no longer
    /// held (`live(token, id)` false) is dropped.
    pub(super) fn due(
        &mut self,
        now: Instant,
        in_step: bool,
        fenced: impl Fn(usize) -> bool,
        live: impl Fn(Token, u64) -> bool,
    ) -> Vec<Ended> {
        if in_step {
            self.in_step_since = None;
        }
        let mut ended = Vec::new();
        let closed = self.closed;
        self.held.retain(|h| {
            if !live(h.token, h.id) {
                return false;
            }
            let over = match h.why {
                Wait::InStep => in_step,
                Wait::Barrier => !fenced(h.pool),
            };
            if !(over || now >= h.until || closed) {
                return true;
            }
            ended.push(Ended {
                token: h.token,
                pool: h.pool,
                since: h.since,
                refused: (!over).then(|| h.why.error()),
            });
            false
        });
        ended
    }

    /// Once a pass: the held requests whose wait ended at `now` (`due`),
    /// each its client's step (`Step::Unheld`: refused, or on through the
    /// gates again): whether the member is in step asked of `page` (only
    /// while something waits), whether a pool's barrier passed of
    /// `pools`, and of `conns` whether the client still holds the request
    /// for the fleet (not for pulls).
    pub(super) fn ended(
        &mut self,
        page: Option<FleetPage>,
        pools: &[PoolRt],
        conns: &Slab<Conn>,
        now: Instant,
    ) -> Vec<(Token, Step)> {
        if self.idle() {
            return Vec::new();
        }
        let in_step = page.is_some_and(|p| p.in_step());
        let fenced = |pool: usize| pools.get(pool).is_some_and(PoolRt::fenced);
        let live = |token: Token, id| {
            conns
                .client(token.0)
                .is_some_and(|c| c.id() == id && c.gate().is_some_and(|g| g.pulls.is_empty()))
        };
        let step = |e: Ended| {
            let (pool, since, refused) = (e.pool, e.since, e.refused);
            (
                e.token,
                Step::Unheld {
                    pool,
                    since,
                    refused,
                },
            )
        };
        self.due(now, in_step, fenced, live)
            .into_iter()
            .map(step)
            .collect()
    }

    /// The worker stops routing: nothing is held from now on, and every
    /// held request is refused at the next `due`.
    pub(super) fn close(&mut self) {
        self.closed = true;
    }

    /// How long the loop may wait before a held request must be looked
    /// at: its nearest deadline, and a short poll of the page while a
    /// request waits for the member to be in step.
    pub(super) fn wait(&self, now: Instant) -> Option<Duration> {
        let until = self.held.iter().map(|h| h.until).min()?;
        let mut wait = until.saturating_duration_since(now);
        if self.held.iter().any(|h| h.why == Wait::InStep) {
            wait = wait.min(PAGE_POLL);
        }
        Some(wait)
    }
}

/// What a fleet member's request must wait for, as its pool tells.
impl PoolRt {
    /// A migrating pool of a fleet member whose barrier has not passed:
    /// its moved keys must not be routed yet.
    pub(super) fn fenced(&self) -> bool {
        self.fleet_fenced && self.migration.is_some()
    }

    /// What a fleet member's request of this pool must wait for before it
    /// is routed, if anything: only a `migration: true` pool waits, for
    /// the member in step with the fleet (`in_step`, asked only then: its
    /// lease may have ended and the others gone on without it,
    /// `fleet/page.rs`), for every request; for the fleet's barrier, when
    /// it names a moved key (another member may still write the key to
    /// its old owner).
    pub(super) fn fleet_wait(
        &mut self,
        in_step: impl FnOnce() -> bool,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Option<Wait> {
        if !self.cfg.migration {
            None
        } else if !in_step() {
            Some(Wait::InStep)
        } else if self.fenced() && !self.moved_pulls(req, bytes, now).is_empty() {
            Some(Wait::Barrier)
        } else {
            None
        }
    }

    /// The reply refusing `req` with a fleet hold's `error`.
    pub(super) fn fleet_refusal(&self, req: &Request, error: &str) -> Vec<u8> {
        let mut out = Vec::new();
        self.proto.server_error(req.op, error, &mut out);
        out
    }
}

#[cfg(test)]
#[path = "fleet_hold_tests.rs"]
mod tests;
