//! Observability on the data path: reply latency into the shared
//! histograms, the slow log, and the keys sampled for the hot keys, owned
//! by a worker's [`Recorder`].

use super::conn::Inflight;
use super::pool::PoolRt;
use crate::proto::redis::CmdClass;
use crate::stats::histogram::Class;
use crate::stats::hotkeys::Sampler;
use crate::stats::shm::StatsSlot;
use crate::stats::slowlog::{Entry, KeyPrefix};
use std::time::Instant;

/// What a worker records of its requests and replies: latencies (runs of
/// equal ones, `LatencyRun`), the slow log and its log-line budget, the
/// hot-key sample, and the knobs that say what is recorded. The worker
/// passes in the stats slot it writes to and the pools (for names); the
/// controller's knobs are copied in once a pass (`knobs`).
#[derive(Debug)]
pub struct Recorder {
    /// Per pool: its slow-log threshold in µs, its own else the global
    /// one (0: off).
    slow_us: Vec<u64>,
    /// Per pool: its own threshold (`slowlog_threshold_us`).
    own_slow_us: Vec<Option<u64>>,
    /// The global threshold `slow_us` was worked out with.
    global_slow_us: u64,
    /// Reply latencies go into the histograms.
    latency: bool,
    /// Replies of one latency not yet in the histograms.
    run: LatencyRun,
    /// Slow-request log lines left this second, and those not written.
    slow_lines: SlowLines,
    /// The first key of the request being routed, for the slow log (only
    /// while it is on).
    slow_key: KeyPrefix,
    /// Sampled keys per pool, published once a second (`stats/hotkeys.rs`).
    hot: Sampler,
    /// When the hot keys were last published.
    hot_since: Instant,
}

impl Recorder {
    /// A recorder for `pools`, with the controller's knobs: latencies
    /// recorded (`latency`), the global slow-log threshold (`slowlog_us`).
    pub fn new(pools: &[PoolRt], latency: bool, slowlog_us: u64) -> Recorder {
        let own_slow_us: Vec<Option<u64>> =
            pools.iter().map(|p| p.cfg.slowlog_threshold_us).collect();
        Recorder {
            slow_us: own_slow_us
                .iter()
                .map(|own| own.unwrap_or(slowlog_us))
                .collect(),
            own_slow_us,
            global_slow_us: slowlog_us,
            latency,
            run: LatencyRun::default(),
            slow_lines: SlowLines::default(),
            slow_key: KeyPrefix::EMPTY,
            hot: Sampler::new(pools.len()),
            hot_since: Instant::now(),
        }
    }

    /// The controller's knobs, as they are now (once a pass).
    #[inline]
    pub fn knobs(&mut self, latency: bool, slowlog_us: u64) {
        self.latency = latency;
        if slowlog_us != self.global_slow_us {
            self.global_slow_us = slowlog_us;
            for (t, own) in self.slow_us.iter_mut().zip(&self.own_slow_us) {
                *t = own.unwrap_or(slowlog_us);
            }
        }
    }

    /// A request's first key: sampled for the hot keys, and remembered for
    /// the slow log (only while it is on).
    #[inline]
    pub fn note_key(&mut self, pool: usize, key: &[u8]) {
        self.hot.note(pool, key);
        if self.slow_us[pool] > 0 {
            self.slow_key = KeyPrefix::new(key);
        }
    }

    /// The key `note_key` remembered last, for the request being queued.
    #[inline]
    pub fn slow_key(&self) -> KeyPrefix {
        self.slow_key
    }

    /// A server reply for a client request arrived (`at`: its pool and
    /// server): record its latency and log it if it was slow. A blocking
    /// command (BLPOP, XREAD ... BLOCK, ...) is left out: its time is
    /// mostly the wait for data or its timeout, which is the client's
    /// choice, not the server's slowness (Redis's SLOWLOG leaves the
    /// blocked time out too; the proxy cannot tell the two apart, so it
    /// leaves the command out).
    #[inline]
    pub fn record_reply(
        &mut self,
        stats: &StatsSlot<'_>,
        pools: &[PoolRt],
        at: (usize, usize),
        req: &Inflight,
        now: Instant,
    ) {
        let (pool, server) = at;
        let threshold = self.slow_us[pool];
        if !self.latency && threshold == 0 {
            return;
        }
        if let crate::proto::Op::Redis(r) = req.op {
            if r.class == CmdClass::Blocking {
                return;
            }
        }
        let us = self.run.add(
            stats,
            self.latency,
            (pool, server, Class::of(req.op)),
            (req.sent_at, now),
        );
        if threshold > 0 && us >= threshold {
            self.slow(stats, pools, at, req, us);
        }
    }

    #[cold]
    fn slow(
        &mut self,
        stats: &StatsSlot<'_>,
        pools: &[PoolRt],
        (pool, server): (usize, usize),
        req: &Inflight,
        us: u64,
    ) {
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
        stats.slowlog().push(&e);
        if !self.slow_lines.take() {
            return;
        }
        let (pname, sname) = pools
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

    /// The end of a pass: the latencies held in a run into the histograms.
    #[inline]
    pub fn end_pass(&mut self, stats: &StatsSlot<'_>) {
        self.run.flush(stats);
    }

    /// Once a second: the slow-log line budget refilled, the hot keys
    /// published.
    pub fn every_second(&mut self, stats: &StatsSlot<'_>, now: Instant) {
        self.slow_lines.new_second();
        let window = now.duration_since(self.hot_since).as_millis() as u64;
        self.hot.publish(stats.hotkeys(), window);
        self.hot_since = now;
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
#[path = "latency_tests.rs"]
mod tests;
