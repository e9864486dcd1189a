//! The run-time parameters the controller changed (`WorkerCtl`, set in
//! `Control::check`), applied once a pass to the parts they belong to:
//! a pool's fleet barrier and migration, and a pool's server timeout
//! ([`WorkerCtl::apply_to`]), that pool's connections' timers re-armed
//! for the new timeout ([`rearm`]). None of it is a `Worker` method: the
//! loop hands the pools, connections and timers over.

use super::conn::Conn;
use super::pool::PoolRt;
use super::timers::Timers;
use super::WorkerCtl;
use mio::Token;
use slab::Slab;
use std::time::Duration;

impl WorkerCtl {
    /// Give the pools what the controller changed in them (a barrier
    /// passed, a migration ended, a new server timeout), each change
    /// taken once. Returns the pools whose timeout changed, with the new
    /// one, for their connections' timers ([`rearm`]).
    pub(super) fn apply_to(&mut self, pools: &mut [PoolRt]) -> Vec<(usize, Option<Duration>)> {
        for pool in std::mem::take(&mut self.fleet_go) {
            if let Some(p) = pools.get_mut(pool) {
                p.fleet_passed();
            }
        }
        for pool in std::mem::take(&mut self.migration_done) {
            if let Some(p) = pools.get_mut(pool) {
                p.migration_ended();
            }
        }
        let mut changed = Vec::new();
        for (pool, ms) in std::mem::take(&mut self.pool_timeouts) {
            let Some(p) = pools.get_mut(pool) else {
                continue;
            };
            p.cfg.timeout_ms = (ms > 0).then_some(ms);
            changed.push((pool, p.timeout()));
        }
        changed
    }
}

/// Re-arm the timers of `pool`'s server connections for its new
/// `timeout`: one due that long after the oldest request in flight, and
/// none without a request or a timeout. A timer armed before is not
/// taken back: it is stale when it fires (it re-reads the timeout then).
pub(super) fn rearm(
    conns: &mut Slab<Conn>,
    timers: &mut Timers,
    pool: usize,
    timeout: Option<Duration>,
) {
    for (k, c) in conns.iter_mut() {
        let Conn::Server(s) = c else { continue };
        if s.pool() != pool {
            continue;
        }
        match (s.inflight().front().map(|f| f.sent_at), timeout) {
            (Some(f), Some(t)) => {
                s.set_timer_armed(true);
                timers.arm(f + t, Token(k), s.id());
            }
            _ => s.set_timer_armed(false),
        }
    }
}

/// What the controller's messages change in a pool.
impl PoolRt {
    /// The fleet passed its barrier (`Param::FleetGo`): moved keys are
    /// pulled from now on.
    fn fleet_passed(&mut self) {
        if std::mem::take(&mut self.fleet_fenced) {
            crate::log_notice!(
                "pool '{}': the fleet passed its barrier, moved keys are pulled",
                self.cfg.name
            );
        }
    }

    /// The pool's migration ended: keys are no longer pulled from old
    /// owners, and its route no longer migrates.
    fn migration_ended(&mut self) {
        if self.migration.take().is_some() {
            self.route = std::mem::replace(&mut self.route, crate::route::PoolRoute::Hash)
                .without_migration();
            crate::log_notice!(
                "pool '{}': migration done, keys are no longer pulled from old owners",
                self.cfg.name
            );
        }
    }
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
