//! The migrator's pace: keys per second that follow the servers' headroom,
//! as TCP's congestion window follows a path's. Between batches the
//! migrator times a no-op on the servers it works with (`Conn::ping`); a
//! server busy with clients answers it late. While it stays near the
//! least seen lately the pace grows (doubling at first, then by a fixed
//! step), and when it rises by half again the pace is halved.
//!
//! It also follows what the pool's clients see: the mean time of the
//! workers' requests (`clients.rs`). What they see without the migrator
//! is measured as BBR measures a path's bare round trip: every few
//! seconds the migrator stops for a quiet spell (`quiet`) and takes the
//! least mean over it; while it moves keys, a smoothed mean 30 % over
//! that (the rise in p99 the clients are promised at most) halves the
//! pace too. The quiet level includes what the migrator does not cause,
//! clients' own pulls of moved keys above all (each a few commands on
//! two servers: a busy time at a migration's start that slowing the
//! migrator would only prolong), so only the migrator's own cost to the
//! clients slows it.
//!
//! `migration_rate` is the ceiling, and a batch holds about 10 ms of keys
//! at the pace, so a slow pace also blocks a server for less at a time.

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
/// A rise of the servers' no-op time that backs off: half again its
/// least, and more than scheduling noise (seconds).
const SERVERS_RISE: (f64, f64) = (1.5, 0.000_2);
/// A rise of the clients' mean latency that backs off: 30 % over the
/// quiet level, and more than scheduling noise.
const CLIENTS_RISE: (f64, f64) = (1.3, 0.000_1);
/// How often the migrator stops to see the clients without it...
const QUIET_EVERY: Duration = Duration::from_secs(5);
/// ... and for how many probe intervals.
const QUIET_SAMPLES: u32 = 4;

/// One time the pace follows: smoothed, against the least seen in this
/// window and the one before.
#[derive(Clone, Copy)]
struct Signal {
    srtt: Option<f64>,
    base: [f64; 2],
}

impl Signal {
    const NONE: Signal = Signal {
        srtt: None,
        base: [f64::MAX; 2],
    };

    /// A new window of least times begins.
    fn rotate(&mut self) {
        self.base = [f64::MAX, self.base[0]];
    }

    /// A sample `t` (seconds) joins the least times; `judge`: it is also
    /// smoothed and the answer says whether the smoothed time rose by
    /// more than `rise` (factor, slack) over the least.
    fn sample(&mut self, t: f64, judge: bool, rise: (f64, f64)) -> bool {
        self.base[0] = self.base[0].min(t);
        if !judge {
            return false;
        }
        let base = self.base[0].min(self.base[1]);
        let srtt = match self.srtt {
            Some(s) => s * 0.75 + t * 0.25,
            None => t,
        };
        self.srtt = Some(srtt);
        srtt > base * rise.0 + rise.1
    }
}

/// The pace of one migrator.
pub struct Pace {
    cap: f64,
    rate: f64,
    /// Doubling until the first sign of pressure.
    slow_start: bool,
    /// The servers' no-op time, seconds.
    servers: Signal,
    /// The clients' mean latency while keys move, smoothed (seconds).
    clients: Option<f64>,
    /// The clients' least mean latency over the last quiet spell.
    quiet_level: Option<f64>,
    /// When the next quiet spell is due.
    quiet_at: Instant,
    window_at: Instant,
    probed_at: Instant,
    /// Samples are not judged before this (one halving per rise, and the
    /// smoothed time starts afresh at the new pace).
    hold_until: Instant,
    tokens: f64,
    at: Instant,
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
            servers: Signal::NONE,
            clients: None,
            quiet_level: None,
            // One before the first batch.
            quiet_at: now,
            window_at: now,
            probed_at: now,
            hold_until: now,
            tokens: 0.0,
            at: now,
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

    /// Whether a quiet spell is due.
    pub fn quiet_due(&self) -> bool {
        Instant::now() >= self.quiet_at
    }

    /// A quiet spell: no keys move for a few probe intervals, each
    /// ending with `window`, the clients' mean latency over it (none when
    /// too few requests came); their least is the quiet level.
    pub fn quiet(&mut self, mut window: impl FnMut() -> Option<Duration>) {
        let mut least: Option<Duration> = None;
        for _ in 0..QUIET_SAMPLES {
            std::thread::sleep(PROBE_EVERY);
            if let Some(w) = window() {
                least = Some(least.map_or(w, |l| l.min(w)));
            }
        }
        self.quiet_end(least, Instant::now());
    }

    fn quiet_end(&mut self, least: Option<Duration>, now: Instant) {
        if let Some(l) = least {
            self.quiet_level = Some(l.as_secs_f64());
        }
        self.clients = None;
        self.quiet_at = now + QUIET_EVERY;
        // No burst for the time stood still.
        self.tokens = 0.0;
        self.at = now;
    }

    /// The servers answered a no-op in `rtt`, and the clients' requests
    /// took `clients` on average since the last sample (none when too
    /// few came, or nothing tells): the pace follows.
    pub fn sample(&mut self, rtt: Duration, clients: Option<Duration>) {
        self.sample_at(rtt, clients, Instant::now());
    }

    fn sample_at(&mut self, rtt: Duration, clients: Option<Duration>, now: Instant) {
        self.probed_at = now;
        if now.duration_since(self.window_at) >= BASE_WINDOW {
            self.servers.rotate();
            self.window_at = now;
        }
        // Just backed off: the times of the pace before join the least
        // times but are not judged.
        let judge = now >= self.hold_until;
        let mut busy = self.servers.sample(rtt.as_secs_f64(), judge, SERVERS_RISE);
        if let (Some(c), Some(level), true) = (clients, self.quiet_level, judge) {
            let c = c.as_secs_f64();
            let smooth = self.clients.map_or(c, |s| s * 0.75 + c * 0.25);
            self.clients = Some(smooth);
            busy |= smooth > level * CLIENTS_RISE.0 + CLIENTS_RISE.1;
        }
        if !judge {
            return;
        }
        if busy {
            self.rate = (self.rate / 2.0).max(FLOOR).min(self.cap);
            self.slow_start = false;
            self.hold_until = now + PROBE_EVERY * 4;
            // Judged afresh at the new pace: the rise that caused this
            // must not, smoothed, cause the next halving too.
            self.servers.srtt = None;
            self.clients = None;
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

    #[test]
    fn calm_servers_bring_the_pace_to_its_ceiling() {
        let mut p = Pace::new(40_000);
        let mut now = Instant::now();
        for _ in 0..10 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), None, now);
        }
        assert_eq!(p.rate(), 40_000);
        assert_eq!(p.batch(), 400);
    }

    #[test]
    fn a_busy_server_halves_the_pace_then_it_grows_by_steps() {
        let mut p = Pace::new(100_000);
        let mut now = Instant::now();
        for _ in 0..5 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), None, now);
        }
        assert_eq!(p.rate(), 32_000);
        for _ in 0..3 {
            now += PROBE_EVERY;
            p.sample_at(ms(3.0), None, now);
        }
        // One halving per rise, however many samples see it.
        assert_eq!(p.rate(), 16_000);
        // Calm again: the pace grows by steps, not by doubling.
        let mut least = p.rate();
        for _ in 0..20 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), None, now);
            least = least.min(p.rate());
        }
        assert_eq!(least, 16_000);
        assert!(
            p.rate() > least && p.rate() <= least + 20 * STEP as u64,
            "{}",
            p.rate()
        );
    }

    #[test]
    fn the_pace_never_stops_nor_passes_its_ceiling() {
        let mut p = Pace::new(200);
        assert_eq!(p.rate(), 200);
        assert_eq!(p.batch(), 2);
        let mut now = Instant::now();
        p.sample_at(ms(0.1), None, now);
        for _ in 0..10 {
            now += PROBE_EVERY * 5;
            p.sample_at(ms(50.0), None, now);
        }
        assert_eq!(p.rate() as f64, FLOOR);
        assert_eq!(p.batch(), 1);
    }

    #[test]
    fn clients_slower_than_without_the_migrator_halve_the_pace() {
        let mut p = Pace::new(100_000);
        let mut now = Instant::now();
        // Not judged before a quiet spell has said what they see alone.
        for _ in 0..5 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(9.0)), now);
        }
        assert_eq!(p.rate(), 32_000);
        p.quiet_end(Some(ms(1.0)), now);
        // 20 % over the quiet level: within what they are promised.
        now += PROBE_EVERY;
        p.sample_at(ms(0.1), Some(ms(1.2)), now);
        assert_eq!(p.rate(), 64_000);
        // The servers answer the no-op as fast as ever, but the clients
        // wait 60 % longer: once the smoothed time shows it (the third
        // sample), back off, once for the rise.
        let mut rates = Vec::new();
        for _ in 0..6 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(1.6)), now);
            rates.push(p.rate());
        }
        assert_eq!(rates, [100_000, 100_000, 50_000, 50_000, 50_000, 50_000]);
        // No clients' figure (too few requests): the servers alone judge.
        for _ in 0..4 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), None, now);
        }
        assert!(p.rate() > 50_000, "{}", p.rate());
    }

    #[test]
    fn what_the_clients_see_without_the_migrator_is_not_held_against_it() {
        let mut p = Pace::new(1_000_000);
        let mut now = Instant::now();
        assert!(p.quiet_due());
        // Clients slow without the migrator too (their own pulls of
        // moved keys): 3 ms is the level, not a rise.
        p.quiet_end(Some(ms(3.0)), now);
        assert!(!p.quiet_due());
        for i in 0..20 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(3.5 - i as f64 * 0.1)), now);
        }
        assert!(p.slow_start, "{}", p.rate());
        // A quiet spell without enough requests keeps the level it had.
        p.quiet_end(None, now);
        now += PROBE_EVERY;
        p.sample_at(ms(0.1), Some(ms(4.5)), now);
        assert!(!p.slow_start);
    }
}
