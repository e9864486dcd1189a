//! The migrator's pace: keys per second that follow the servers' headroom,
//! as TCP's congestion window follows a path's. Between batches the
//! migrator times a no-op on the servers it works with (`Conn::ping`); a
//! server busy with clients answers it late. While the smoothed time stays
//! near the least seen lately the pace grows (doubling at first, then by a
//! fixed step), and when it rises the pace is halved. `migration_rate` is
//! the ceiling, and a batch holds about 10 ms of keys at the pace, so a
//! slow pace also blocks a server for less at a time.
//!
//! What counts as a rise depends on whether the pool has clients (the
//! master passes on its workers' request counts, `Progress::client_requests`).
//! With clients, a no-op answered late is a client request answered late,
//! so the pace backs off at a small rise (a tenth over the least time, and
//! 50 µs). Without them, the only load is the migrator's own, which also
//! delays its no-ops (measured: at the small threshold an unloaded
//! migration ran at a quarter of its speed), so it backs off only at a
//! large one (half again, and 200 µs), as a server busy with others would
//! show; and it judges the least of the last few times rather than each
//! one: a queue that builds up delays every no-op, while a server's own
//! housekeeping (its cron's rehashing and expiring, a table doubling)
//! delays one now and then by a few milliseconds, which halved an
//! unloaded migration's pace every second or two (measured: 17,600–32,000
//! keys/s where Redis Cluster's resharding moved 77,000–99,000 on the
//! same machine).

use std::time::{Duration, Instant};

/// Least keys a second: a migration under steady pressure still ends.
const FLOOR: f64 = 50.0;
/// First pace, before anything is known.
const START: f64 = 1000.0;
/// Keys a second added per calm sample once past the first back-off.
const STEP: f64 = 500.0;
/// How often the servers are timed.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long a least time is remembered (the baseline moves with the
/// clients' load, not only down).
const BASE_WINDOW: Duration = Duration::from_secs(5);
/// Largest batch: what a server is kept from its clients for at once.
const MAX_BATCH: usize = 500;
/// Client requests within [`CLIENTS_WINDOW`] from which the pool counts as
/// having clients (a health check now and then does not).
const CLIENTS_BUSY: u64 = 50;
/// How long one reading of the clients' requests lasts.
const CLIENTS_WINDOW: Duration = Duration::from_secs(1);
/// No-op times judged together when the pool has no clients (the least
/// of them counts).
const RECENT: usize = 3;

/// When the smoothed no-op time `srtt` says the servers are busy, against
/// the least time `base` (seconds), with or without clients.
fn pressed(srtt: f64, base: f64, clients: bool) -> bool {
    if clients {
        srtt > base * 1.1 + 0.000_05
    } else {
        srtt > base * 1.5 + 0.000_2
    }
}

/// Whether the pool has clients, from the count of their requests.
struct Clients {
    /// Start of the current window and the count then.
    window: Option<(Instant, u64)>,
    busy: bool,
}

impl Clients {
    /// The count is `count` at `now`: busy as soon as a window holds
    /// [`CLIENTS_BUSY`] requests, quiet after a whole window without.
    fn seen(&mut self, count: u64, now: Instant) -> bool {
        let Some((at, from)) = self.window else {
            self.window = Some((now, count));
            return self.busy;
        };
        let grown = count.saturating_sub(from);
        if grown >= CLIENTS_BUSY {
            self.busy = true;
        }
        if now.duration_since(at) >= CLIENTS_WINDOW {
            self.busy = grown >= CLIENTS_BUSY;
            self.window = Some((now, count));
        }
        self.busy
    }
}

/// The pace of one migrator.
pub struct Pace {
    cap: f64,
    rate: f64,
    /// Doubling until the first sign of pressure.
    slow_start: bool,
    /// Smoothed no-op time, seconds.
    srtt: Option<f64>,
    /// Least no-op time in this window and the one before.
    base: [f64; 2],
    /// The last [`RECENT`] no-op times, seconds (`f64::MAX`: none yet).
    recent: [f64; RECENT],
    window_at: Instant,
    probed_at: Instant,
    /// Samples are not judged before this (one halving per rise, and the
    /// smoothed time starts afresh at the new pace).
    hold_until: Instant,
    tokens: f64,
    at: Instant,
    clients: Clients,
}

impl Pace {
    /// A pace of at most `cap` keys a second.
    pub fn new(cap: u64) -> Pace {
        let cap = (cap.max(1)) as f64;
        let now = Instant::now();
        Pace {
            cap,
            rate: START.min(cap),
            slow_start: true,
            srtt: None,
            base: [f64::MAX; 2],
            recent: [f64::MAX; RECENT],
            window_at: now,
            probed_at: now,
            hold_until: now,
            tokens: 0.0,
            at: now,
            clients: Clients {
                window: None,
                busy: false,
            },
        }
    }

    /// Keys a second now.
    pub fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// Keys to move in one batch: about 10 ms of them.
    pub fn batch(&self) -> usize {
        ((self.rate / 100.0) as usize).clamp(1, MAX_BATCH)
    }

    /// Wait until `n` more keys fit the pace.
    pub fn take(&mut self, n: usize) {
        loop {
            let now = Instant::now();
            let depth = (self.rate / 10.0).max(n as f64);
            let add = now.duration_since(self.at).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + add).min(depth);
            self.at = now;
            if self.tokens >= n as f64 {
                self.tokens -= n as f64;
                return;
            }
            std::thread::sleep(Duration::from_secs_f64(
                ((n as f64 - self.tokens) / self.rate).max(0.0005),
            ));
        }
    }

    /// Whether the servers are due to be timed.
    pub fn probe_due(&self) -> bool {
        self.probed_at.elapsed() >= PROBE_EVERY
    }

    /// Whether the pool had clients at the last sample.
    pub fn clients(&self) -> bool {
        self.clients.busy
    }

    /// The servers answered a no-op in `rtt`, and the pool's clients have
    /// sent `client_requests` so far: the pace follows.
    pub fn sample(&mut self, rtt: Duration, client_requests: u64) {
        self.sample_at(rtt, client_requests, Instant::now());
    }

    fn sample_at(&mut self, rtt: Duration, client_requests: u64, now: Instant) {
        self.probed_at = now;
        let clients = self.clients.seen(client_requests, now);
        let t = rtt.as_secs_f64();
        if now.duration_since(self.window_at) >= BASE_WINDOW {
            self.base = [f64::MAX, self.base[0]];
            self.window_at = now;
        }
        self.base[0] = self.base[0].min(t);
        let base = self.base[0].min(self.base[1]);
        self.recent.rotate_right(1);
        self.recent[0] = t;
        // With clients, each late no-op is a client request answered late;
        // without, only a delay that lasts is the servers' load.
        let t = if clients {
            t
        } else {
            self.recent.iter().copied().fold(f64::MAX, f64::min)
        };
        if now < self.hold_until {
            // Just backed off: the times of the pace before do not count.
            return;
        }
        let srtt = match self.srtt {
            Some(s) => s * 0.75 + t * 0.25,
            None => t,
        };
        self.srtt = Some(srtt);
        // Busy: the queue ahead of a no-op grew by more than the clients
        // can bear, or (none) by more than the migrator's own load and
        // scheduling noise.
        if pressed(srtt, base, clients) {
            self.rate = (self.rate / 2.0).max(FLOOR).min(self.cap);
            self.slow_start = false;
            self.hold_until = now + PROBE_EVERY * 4;
            // Judged afresh at the new pace: the rise that caused this
            // must not, smoothed, cause the next halving too.
            self.srtt = None;
        } else if self.slow_start {
            self.rate = (self.rate * 2.0).min(self.cap);
        } else {
            self.rate = (self.rate + STEP).min(self.cap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    /// A pace of at most 100,000 after five calm no-ops of `rtt` ms
    /// without clients (slow start: 32,000), and the time of the last.
    fn warmed(rtt: f64) -> (Pace, Instant) {
        let mut p = Pace::new(100_000);
        let mut now = Instant::now();
        for _ in 0..5 {
            now += PROBE_EVERY;
            p.sample_at(ms(rtt), 0, now);
        }
        (p, now)
    }

    #[test]
    fn calm_servers_bring_the_pace_to_its_ceiling() {
        let mut p = Pace::new(40_000);
        let mut now = Instant::now();
        for _ in 0..10 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), 0, now);
        }
        assert_eq!(p.rate(), 40_000);
        assert_eq!(p.batch(), 400);
    }

    #[test]
    fn a_busy_server_halves_the_pace_then_it_grows_by_steps() {
        let (mut p, mut now) = warmed(0.1);
        assert_eq!(p.rate(), 32_000);
        for _ in 0..6 {
            now += PROBE_EVERY;
            p.sample_at(ms(3.0), 0, now);
        }
        // Judged once the last few samples all show it (the pace doubled
        // twice meanwhile, to its ceiling); one halving per rise, however
        // many samples see it.
        assert_eq!(p.rate(), 50_000);
        // Calm again: the pace grows by steps, not by doubling.
        let mut least = p.rate();
        for _ in 0..20 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), 0, now);
            least = least.min(p.rate());
        }
        assert_eq!(least, 50_000);
        assert!(
            p.rate() > least && p.rate() <= least + 20 * STEP as u64,
            "{}",
            p.rate()
        );
    }

    #[test]
    fn without_clients_a_single_late_no_op_is_not_a_rise() {
        let (mut p, mut now) = warmed(0.02);
        assert_eq!(p.rate(), 32_000);
        // A server's housekeeping: one no-op 4 ms late now and then.
        for i in 0..20 {
            now += PROBE_EVERY;
            p.sample_at(ms(if i % 5 == 0 { 4.0 } else { 0.02 }), 0, now);
        }
        assert_eq!(p.rate(), 100_000);
        // With clients, such a no-op is a client request 4 ms late.
        let mut count = 0;
        for _ in 0..25 {
            now += PROBE_EVERY;
            count += 100;
            p.sample_at(ms(0.02), count, now);
        }
        assert!(p.clients());
        let before = p.rate();
        now += PROBE_EVERY;
        p.sample_at(ms(4.0), count + 100, now);
        assert_eq!(p.rate(), before / 2);
    }

    #[test]
    fn with_clients_a_smaller_rise_halves_the_pace() {
        // No-ops at twice the least time seen (0.2 → 0.4 ms): within what
        // the migrator's own load does, or client requests that late.
        let run = |per_sample: u64| {
            let mut p = Pace::new(100_000);
            let mut now = Instant::now();
            let mut count = 0;
            for _ in 0..5 {
                now += PROBE_EVERY;
                count += per_sample;
                p.sample_at(ms(0.2), count, now);
            }
            let before = p.rate();
            for _ in 0..3 {
                now += PROBE_EVERY;
                count += per_sample;
                p.sample_at(ms(0.4), count, now);
            }
            (before, p.rate(), p.clients())
        };
        let (before, after, clients) = run(0);
        assert!(!clients);
        assert!(after > before, "no clients: {before} -> {after}");
        let (before, after, clients) = run(100);
        assert!(clients);
        assert!(after <= before, "clients: {before} -> {after}");
    }

    #[test]
    fn clients_count_from_a_window_of_requests() {
        let mut c = Clients {
            window: None,
            busy: false,
        };
        let t = Instant::now();
        assert!(!c.seen(1000, t), "the first reading only starts a window");
        assert!(!c.seen(1010, t + PROBE_EVERY), "a few requests");
        assert!(
            c.seen(1060, t + PROBE_EVERY * 2),
            "50 in the window: busy at once"
        );
        // Busy until a whole window passes with fewer.
        assert!(c.seen(1060, t + CLIENTS_WINDOW / 2));
        assert!(c.seen(1060, t + CLIENTS_WINDOW), "the window that was busy");
        assert!(c.seen(1070, t + CLIENTS_WINDOW + PROBE_EVERY));
        assert!(!c.seen(1080, t + CLIENTS_WINDOW * 2), "a quiet window");
    }

    #[test]
    fn the_pace_never_stops_nor_passes_its_ceiling() {
        let mut p = Pace::new(200);
        assert_eq!(p.rate(), 200);
        assert_eq!(p.batch(), 2);
        let mut now = Instant::now();
        p.sample_at(ms(0.1), 0, now);
        for _ in 0..10 {
            now += PROBE_EVERY * 5;
            p.sample_at(ms(50.0), 0, now);
        }
        assert_eq!(p.rate() as f64, FLOOR);
        assert_eq!(p.batch(), 1);
    }
}
