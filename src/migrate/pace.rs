//! The migrator's pace: keys per second that follow the servers' headroom,
//! as TCP's congestion window follows a path's. Between batches the
//! migrator times a no-op on the servers it works with (`Conn::ping`); a
//! server busy with clients answers it late. It also looks at what the
//! pool's clients see: the mean time of the workers' requests since the
//! last look (`clients.rs`). While both stay near the least seen lately
//! the pace grows (doubling at first, then by a fixed step), and when
//! either rises the pace is halved: the no-op's time by half again, the
//! clients' by 30 % (the rise in p99 the clients are promised at most).
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
/// A rise of the clients' mean latency that backs off: 30 % over its
/// least, and more than scheduling noise.
const CLIENTS_RISE: (f64, f64) = (1.3, 0.000_1);

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
    /// The clients' mean latency, seconds.
    clients: Signal,
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
            clients: Signal::NONE,
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
            self.clients.rotate();
            self.window_at = now;
        }
        // Just backed off: the times of the pace before join the least
        // times but are not judged.
        let judge = now >= self.hold_until;
        let mut busy = self.servers.sample(rtt.as_secs_f64(), judge, SERVERS_RISE);
        if let Some(c) = clients {
            busy |= self.clients.sample(c.as_secs_f64(), judge, CLIENTS_RISE);
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
            self.clients.srtt = None;
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
    fn clients_whose_latency_rises_halve_the_pace_though_the_servers_are_calm() {
        let mut p = Pace::new(100_000);
        let mut now = Instant::now();
        for _ in 0..5 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(1.0)), now);
        }
        assert_eq!(p.rate(), 32_000);
        // 20 % over their least: within what they are promised.
        now += PROBE_EVERY;
        p.sample_at(ms(0.1), Some(ms(1.2)), now);
        assert_eq!(p.rate(), 64_000);
        // The servers answer the no-op as fast as ever, but the clients
        // wait 60 % longer: once the smoothed time shows it (the fourth
        // sample), back off, once for the rise.
        let mut rates = Vec::new();
        for _ in 0..6 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(1.6)), now);
            rates.push(p.rate());
        }
        assert_eq!(rates, [100_000, 100_000, 100_000, 50_000, 50_000, 50_000]);
        // No clients' figure (too few requests): the servers alone judge.
        for _ in 0..4 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), None, now);
        }
        assert!(p.rate() > 50_000, "{}", p.rate());
    }

    #[test]
    fn the_clients_least_latency_follows_their_load_down_and_up() {
        let mut p = Pace::new(1_000_000);
        let mut now = Instant::now();
        // Clients' latency falling (pulls of moved keys subside): never
        // a rise, the pace keeps growing.
        for i in 0..20 {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(3.0 - i as f64 * 0.1)), now);
        }
        assert!(p.slow_start);
        // A higher level that stays: the pace backs off while the lower
        // one is remembered (this window and the one before), then the
        // higher level is the least and the pace grows again.
        let mut rates = Vec::new();
        for _ in 0..(2 * BASE_WINDOW.as_millis() / PROBE_EVERY.as_millis() + 40) {
            now += PROBE_EVERY;
            p.sample_at(ms(0.1), Some(ms(2.0)), now);
            rates.push(p.rate());
        }
        assert!(rates.iter().min().copied() < Some(100_000), "{rates:?}");
        let tail = &rates[rates.len() - 20..];
        assert!(tail.windows(2).all(|w| w[1] > w[0]), "{tail:?}");
    }
}
