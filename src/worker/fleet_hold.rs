//! A fleet member's requests that must wait for the fleet, held instead of
//! refused at once, within a bound.
//!
//! `fleet_wait` says when a request of a `migration: true` pool must not
//! be routed now: a key it names moves while the fleet's barrier has not
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
//!   now would, through `fleet_wait` again (it may be held for the
//!   other reason, or refused), then pulls and routing;
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

use super::conn::ConnTable;
use super::conn_state::Gate;
use super::pull::AfterPull;
use super::Worker;
use crate::proto::Request;
use crate::stats::WorkerField;
use mio::Token;
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
enum Wait {
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

/// What became of a request the fleet may not let through now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FleetStep {
    /// Route it.
    Go,
    /// Held: its client is read no further until it goes on.
    Held,
    /// Refused (the error is queued as its reply).
    Refused,
}

#[derive(Debug)]
struct Held {
    token: Token,
    id: u64,
    pool: usize,
    why: Wait,
    since: Instant,
    until: Instant,
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

impl Worker<'_> {
    /// What a fleet member's request of a `migration: true` pool must
    /// wait for before it is routed, if anything: the member in step with
    /// the fleet (its lease may have ended and the others gone on without
    /// it, `fleet/page.rs`), for every request; the fleet's barrier, for
    /// one naming a moved key (another member may still write the key to
    /// its old owner).
    fn fleet_wait(
        &mut self,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Option<Wait> {
        let page = self.fleet.as_ref()?;
        let p = &self.pools[pool];
        if !p.cfg.migration {
            return None;
        }
        if !page.in_step() {
            return Some(Wait::InStep);
        }
        let fenced = p.fleet_fenced && p.migration.is_some();
        if fenced && !self.moved_pulls(pool, req, bytes, now).is_empty() {
            return Some(Wait::Barrier);
        }
        None
    }

    /// A request of `pool` about to be routed: go, or held, or refused
    /// (see the module's doc). `then`: where it goes once it may.
    #[inline]
    pub(super) fn fleet_gate(
        &mut self,
        token: Token,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        then: AfterPull,
        now: Instant,
    ) -> FleetStep {
        if self.fleet.is_none() {
            return FleetStep::Go;
        }
        self.fleet_gate_slow(token, pool, req, bytes, then, now)
    }

    fn fleet_gate_slow(
        &mut self,
        token: Token,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        then: AfterPull,
        now: Instant,
    ) -> FleetStep {
        let Some(why) = self.fleet_wait(pool, req, bytes, now) else {
            return FleetStep::Go;
        };
        let bound = Duration::from_millis(self.fleet.map_or(0, |p| p.hold_ms()));
        let h = &mut self.fleet_holds;
        let since = match why {
            Wait::InStep => *h.in_step_since.get_or_insert(now),
            Wait::Barrier => {
                if h.barrier_since.len() <= pool {
                    h.barrier_since.resize(pool + 1, None);
                }
                *h.barrier_since[pool].get_or_insert(now)
            }
        };
        let until = since + bound;
        let held = !h.closed && now < until && {
            let id = self.conns.client(token.0).map(|c| c.id());
            match (id, self.conns.client_mut(token.0)) {
                (Some(id), Some(c)) => {
                    c.set_gate(Box::new(Gate::held(req, bytes, then)));
                    self.fleet_holds.held.push(Held {
                        token,
                        id,
                        pool,
                        why,
                        since: now,
                        until,
                    });
                    true
                }
                _ => false,
            }
        };
        if held {
            self.stats.worker_add(WorkerField::FleetHeld, 1);
            return FleetStep::Held;
        }
        self.fleet_refuse(token, req, why.error());
        FleetStep::Refused
    }

    fn fleet_refuse(&mut self, token: Token, req: &Request, e: &'static str) {
        self.stats.worker_add(WorkerField::FleetRefused, 1);
        let Some(c) = self.conns.client(token.0) else {
            return;
        };
        let mut out = Vec::new();
        self.pools[c.pool()].proto.server_error(req.op, e, &mut out);
        self.push_ready(token, out, false);
    }

    /// Once a pass: held requests whose wait is over go on, those past
    /// their deadline are refused.
    pub(super) fn fleet_holds_tick(&mut self, now: Instant) {
        let h = &mut self.fleet_holds;
        if h.held.is_empty() && h.in_step_since.is_none() {
            return;
        }
        let in_step = self.fleet.is_some_and(|p| p.in_step());
        if in_step {
            h.in_step_since = None;
        }
        if h.held.is_empty() {
            return;
        }
        let mut keep = Vec::new();
        for held in std::mem::take(&mut self.fleet_holds.held) {
            let live = self.conns.client(held.token.0).is_some_and(|c| {
                c.id() == held.id
                    && c.gate()
                        .is_some_and(|g| g.pulls.is_empty() && g.read.is_none())
            });
            if !live {
                continue;
            }
            let over = match held.why {
                Wait::InStep => in_step,
                Wait::Barrier => self
                    .pools
                    .get(held.pool)
                    .is_none_or(|p| !(p.fleet_fenced && p.migration.is_some())),
            };
            if over || now >= held.until || self.fleet_holds.closed {
                self.fleet_unhold(held, over, now);
            } else {
                keep.push(held);
            }
        }
        keep.append(&mut self.fleet_holds.held);
        self.fleet_holds.held = keep;
    }

    /// A held request's wait ended: it goes on (`over`: what it waited
    /// for passed), or is refused.
    fn fleet_unhold(&mut self, held: Held, over: bool, now: Instant) {
        let Some(gate) = self
            .conns
            .client_mut(held.token.0)
            .and_then(|c| c.take_gate())
        else {
            return;
        };
        let waited = now.saturating_duration_since(held.since);
        self.stats
            .worker_add(WorkerField::FleetHeldUs, waited.as_micros() as u64);
        let Gate {
            req, bytes, then, ..
        } = *gate;
        let token = held.token;
        if !over {
            self.fleet_refuse(token, &req, held.why.error());
        } else if self.fleet_gate(token, held.pool, &req, &bytes, then, now) == FleetStep::Go {
            let migrating = self.pools[held.pool].route.is_migrating();
            if !(migrating && self.hold_for_moved_keys(token, &req, &bytes, then, now)) {
                self.go_on(token, req, &bytes, then, now);
            }
        }
        // Parse what the client sent meanwhile (nothing while it is held
        // again).
        self.resume.push(token);
    }

    /// The worker stops routing: every held request is refused, and none
    /// is held from now on.
    pub(super) fn fleet_holds_close(&mut self, now: Instant) {
        self.fleet_holds.closed = true;
        self.fleet_holds_tick(now);
    }

    /// How long the loop may wait before a held request must be looked at.
    pub(super) fn fleet_hold_wait(&self, now: Instant) -> Option<Duration> {
        let held = &self.fleet_holds.held;
        let until = held.iter().map(|h| h.until).min()?;
        let mut wait = until.saturating_duration_since(now);
        if held.iter().any(|h| h.why == Wait::InStep) {
            wait = wait.min(PAGE_POLL);
        }
        Some(wait)
    }
}
