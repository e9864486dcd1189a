//! Observability on the data path: reply latency into the shared
//! histograms, the slow log, and runtime parameters that touch pools.

use super::conn::{Conn, Inflight};
use super::Worker;
use crate::proto::redis::CmdClass;
use crate::stats::histogram::Class;
use crate::stats::shm::StatsSlot;
use crate::stats::slowlog::{Entry, KeyPrefix};
use mio::Token;
use std::time::Instant;

impl Worker<'_> {
    /// A request's first key: sampled for the hot keys, and remembered for
    /// the slow log (only while it is on).
    #[inline]
    pub(super) fn note_key(&mut self, pool: usize, key: &[u8]) {
        self.hot.note(pool, key);
        if self.slow_threshold(pool) > 0 {
            self.slow_key = KeyPrefix::new(key);
        }
    }

    /// A server reply for a client request arrived: record its latency and
    /// log it if it was slow. A blocking command (BLPOP, XREAD ... BLOCK,
    /// ...) is left out: its time is mostly the wait for data or its
    /// timeout, which is the client's choice, not the server's slowness
    /// (Redis's SLOWLOG leaves the blocked time out too; the proxy cannot
    /// tell the two apart, so it leaves the command out).
    #[inline]
    pub(super) fn record_reply(
        &mut self,
        pool: usize,
        server: usize,
        req: &Inflight,
        now: Instant,
    ) {
        let threshold = self.slow_threshold(pool);
        if !self.ctl.latency && threshold == 0 {
            return;
        }
        if let crate::proto::Op::Redis(r) = req.op {
            if r.class == CmdClass::Blocking {
                return;
            }
        }
        let us = self.latency_run.add(
            &self.stats,
            self.ctl.latency,
            (pool, server, Class::of(req.op)),
            (req.sent_at, now),
        );
        if threshold > 0 && us >= threshold {
            self.slow(pool, server, req, us);
        }
    }

    /// The slow-log threshold of a pool: its own, else the global one.
    #[inline]
    fn slow_threshold(&self, pool: usize) -> u64 {
        self.pools[pool]
            .cfg
            .slowlog_threshold_us
            .unwrap_or(self.ctl.slowlog_us)
    }

    #[cold]
    fn slow(&mut self, pool: usize, server: usize, req: &Inflight, us: u64) {
        let cmd = match req.op {
            crate::proto::Op::Mc(m) => m.name(),
            crate::proto::Op::Redis(r) => r.cmd.name(),
        };
        let e = Entry {
            seq: 0,
            time_us: crate::util::epoch_us(),
            pool: pool as u32,
            server: server as u32,
            latency_us: us,
            size: req.len as u64,
            cmd: cmd.to_string(),
            key: req.key.bytes().to_vec(),
        };
        self.stats.slowlog().push(&e);
        if !self.slow_lines.take() {
            return;
        }
        let (pname, sname) = self
            .pools
            .get(pool)
            .and_then(|p| Some((p.cfg.name.as_str(), p.servers.get(server)?.name.as_str())))
            .unwrap_or(("?", "?"));
        crate::log_notice!(
            "slow request: pool '{}' server '{}' {} '{}' {} bytes {} us",
            pname,
            sname,
            cmd,
            String::from_utf8_lossy(req.key.bytes()),
            req.len,
            us
        );
    }

    /// Apply parameters the controller changed that live in the pools.
    pub(super) fn apply_ctl(&mut self) {
        for pool in std::mem::take(&mut self.ctl.fleet_go) {
            if let Some(p) = self.pools.get_mut(pool) {
                if std::mem::take(&mut p.fleet_fenced) {
                    crate::log_notice!(
                        "pool '{}': the fleet passed its barrier, moved keys are pulled",
                        p.cfg.name
                    );
                }
            }
        }
        for pool in std::mem::take(&mut self.ctl.migration_done) {
            if let Some(p) = self.pools.get_mut(pool) {
                if p.migration.take().is_some() {
                    p.route = std::mem::replace(&mut p.route, crate::route::PoolRoute::Hash)
                        .without_migration();
                    crate::log_notice!(
                        "pool '{}': migration done, keys are no longer pulled from old owners",
                        p.cfg.name
                    );
                }
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

/// Replies of equal latency for one pool, server and class, recorded as
/// one: a pipelined batch is sent at one instant of the loop and its
/// replies arrive in one read, so they share their latency, and recording
/// them together writes each histogram word once per batch instead of once
/// per reply. Flushed when a reply differs and at the end of each pass of
/// the loop, so the shared histograms lag by at most one pass.
#[derive(Debug)]
pub struct LatencyRun {
    /// Sent at this instant (of every reply in the run)...
    sent: Instant,
    /// ...and answered at this one...
    answered: Instant,
    /// ...which is this many microseconds.
    us: u64,
    /// Pool, server and class of the replies.
    of: (usize, usize, Class),
    /// Replies in the run (0: none, the fields above are stale).
    n: u64,
    /// They go into the histograms (else the run only saves working out
    /// the latency again for the slow log).
    record: bool,
}

impl Default for LatencyRun {
    fn default() -> Self {
        let now = Instant::now();
        LatencyRun {
            sent: now,
            answered: now,
            us: 0,
            of: (0, 0, Class::Other),
            n: 0,
            record: false,
        }
    }
}

/// Whole microseconds from `from` to `to` (0 if `to` is earlier). Not
/// `as_micros()`: its u128 division costs more than recording a reply.
#[inline]
fn micros_between(from: Instant, to: Instant) -> u64 {
    let d = to.saturating_duration_since(from);
    d.as_secs() * 1_000_000 + u64::from(d.subsec_micros())
}

impl LatencyRun {
    /// One more reply; its latency in microseconds.
    #[inline]
    pub fn add(
        &mut self,
        stats: &StatsSlot<'_>,
        record: bool,
        of: (usize, usize, Class),
        span: (Instant, Instant),
    ) -> u64 {
        // The send instant first: it is what differs between runs most.
        if self.n > 0
            && self.sent == span.0
            && self.answered == span.1
            && self.of == of
            && self.record == record
        {
            self.n += 1;
            return self.us;
        }
        self.start(stats, record, of, span)
    }

    #[inline(never)]
    fn start(
        &mut self,
        stats: &StatsSlot<'_>,
        record: bool,
        of: (usize, usize, Class),
        span: (Instant, Instant),
    ) -> u64 {
        self.flush(stats);
        let us = micros_between(span.0, span.1);
        *self = LatencyRun {
            sent: span.0,
            answered: span.1,
            us,
            of,
            n: 1,
            record,
        };
        us
    }

    /// Record what is held.
    #[inline]
    pub fn flush(&mut self, stats: &StatsSlot<'_>) {
        if self.n > 0 && self.record {
            let (pool, server, class) = self.of;
            stats.record_latencies(pool, server, class, self.us, self.n);
        }
        self.n = 0;
    }
}

/// Slow requests written to the log per worker and second; the rest are
/// only in the slow log ring (`slowlog get`) and counted in one line. A
/// stalled backend can make every request slow: writing a line for each
/// would cost a system call per request exactly when the worker is late.
const SLOW_LINES_PER_SECOND: u32 = 20;

/// The per-second budget of slow-request log lines.
#[derive(Debug)]
pub struct SlowLines {
    left: u32,
    skipped: u64,
}

impl Default for SlowLines {
    fn default() -> Self {
        SlowLines {
            left: SLOW_LINES_PER_SECOND,
            skipped: 0,
        }
    }
}

impl SlowLines {
    /// Whether one more line may be written now.
    pub fn take(&mut self) -> bool {
        if self.left == 0 {
            self.skipped += 1;
            return false;
        }
        self.left -= 1;
        true
    }

    /// A new second: log what was skipped, refill the budget.
    pub fn new_second(&mut self) {
        if self.skipped > 0 {
            crate::log_notice!(
                "{} more slow requests in the last second not logged (admin: slowlog get)",
                self.skipped
            );
        }
        *self = SlowLines::default();
    }
}

#[cfg(test)]
mod slow_lines_tests {
    use super::*;

    #[test]
    fn budget_per_second() {
        let mut s = SlowLines::default();
        let written = (0..100).filter(|_| s.take()).count();
        assert_eq!(written, SLOW_LINES_PER_SECOND as usize);
        assert_eq!(s.skipped, 100 - u64::from(SLOW_LINES_PER_SECOND));
        s.new_second();
        assert!(s.take());
        assert_eq!(s.skipped, 0);
    }
}
