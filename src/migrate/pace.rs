//! The migrator's pace: keys per second that follow the servers' headroom,
//! as TCP's congestion window follows a path's. Between batches the
//! migrator times a no-op on the servers it works with (`Conn::ping`); a
//! server busy with clients answers it late. While the smoothed time stays
//! near the least seen lately the pace grows (doubling at first, then by a
//! fixed step), and when it rises the pace is halved. `migration_rate` is
//! the ceiling, and a batch holds about 10 ms of keys at the pace, so a
//! slow pace also blocks a server for less at a time.

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
            srtt: None,
            base: [f64::MAX; 2],
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

    /// The servers answered a no-op in `rtt`: the pace follows.
    pub fn sample(&mut self, rtt: Duration) {
        self.sample_at(rtt, Instant::now());
    }

    fn sample_at(&mut self, rtt: Duration, now: Instant) {
        self.probed_at = now;
        let t = rtt.as_secs_f64();
        if now.duration_since(self.window_at) >= BASE_WINDOW {
            self.base = [f64::MAX, self.base[0]];
            self.window_at = now;
        }
        self.base[0] = self.base[0].min(t);
        let base = self.base[0].min(self.base[1]);
        if now < self.hold_until {
            // Just backed off: the times of the pace before do not count.
            return;
        }
        let srtt = match self.srtt {
            Some(s) => s * 0.75 + t * 0.25,
            None => t,
        };
        self.srtt = Some(srtt);
        // Busy: the queue ahead of a no-op grew by half again and by more
        // than scheduling noise.
        if srtt > base * 1.5 + 0.000_2 {
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

    #[test]
    fn calm_servers_bring_the_pace_to_its_ceiling() {
        let mut p = Pace::new(40_000);
        let mut now = Instant::now();
        for _ in 0..10 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), now);
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
            p.sample_at(ms(0.1), now);
        }
        assert_eq!(p.rate(), 32_000);
        for _ in 0..3 {
            now += PROBE_EVERY;
            p.sample_at(ms(3.0), now);
        }
        // One halving per rise, however many samples see it.
        assert_eq!(p.rate(), 16_000);
        // Calm again: the pace grows by steps, not by doubling.
        let mut least = p.rate();
        for _ in 0..20 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), now);
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
        p.sample_at(ms(0.1), now);
        for _ in 0..10 {
            now += PROBE_EVERY * 5;
            p.sample_at(ms(50.0), now);
        }
        assert_eq!(p.rate() as f64, FLOOR);
        assert_eq!(p.batch(), 1);
    }
}
