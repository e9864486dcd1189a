//! The run-time parameters the controller changed (`WorkerCtl`, set in
//! `Control::check`), applied once a pass to the parts they belong to:
//! the recorder's knobs, a pool's fleet barrier and migration, and a
//! pool's server timeout with its connections' timers re-armed.

use super::conn::Conn;
use super::pool::PoolRt;
use super::Worker;
use mio::Token;

impl Worker<'_> {
    /// Apply the parameters the controller changed.
    pub(super) fn apply_ctl(&mut self) {
        self.recorder.knobs(self.ctl.latency, self.ctl.slowlog_us);
        for pool in std::mem::take(&mut self.ctl.fleet_go) {
            if let Some(p) = self.pools.get_mut(pool) {
                p.fleet_passed();
            }
        }
        for pool in std::mem::take(&mut self.ctl.migration_done) {
            if let Some(p) = self.pools.get_mut(pool) {
                p.migration_ended();
            }
        }
        if self.ctl.pool_timeouts.is_empty() {
            return;
        }
        for (pool, ms) in std::mem::take(&mut self.ctl.pool_timeouts) {
            let Some(p) = self.pools.get_mut(pool) else {
                continue;
            };
            p.cfg.timeout_ms = (ms > 0).then_some(ms);
            let timeout = p.timeout();
            // Re-arm the timers of this pool's connections for the new
            // timeout (a stale timer re-reads the timeout when it fires).
            let mut arm = Vec::new();
            for (k, c) in self.conns.iter_mut() {
                let Conn::Server(s) = c else { continue };
                if s.pool() != pool {
                    continue;
                }
                match (s.inflight().front().map(|f| f.sent_at), timeout) {
                    (Some(f), Some(t)) => {
                        s.set_timer_armed(true);
                        arm.push((f + t, Token(k), s.id()));
                    }
                    _ => s.set_timer_armed(false),
                }
            }
            for (at, token, id) in arm {
                self.timers.arm(at, token, id);
            }
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
