//! The migrator's pace: keys per second that follow the headroom the
//! servers have beside their clients, as a congestion controller follows
//! a path's (LEDBAT's idea: keep the delay one adds below a target over a
//! base delay measured when one adds none).
//!
//! - The signal, judged once per [`WINDOW`]: the median latency of the
//!   pool's client requests answered in it, read from the workers'
//!   histograms (`clients.rs`), when the window had at least
//!   [`MIN_REQUESTS`]; else, with no clients to speak of, the median time
//!   of the no-ops the migrator sends its servers between batches
//!   (`Conn::ping`, every [`PROBE_EVERY`]).
//! - The base: the signal of a quiet window, one in which the migrator
//!   moves nothing. The first window is quiet, and one in every
//!   [`QUIET_EVERY`] after it (LEDBAT++'s periodic slowdown), so the base
//!   follows the clients' own load as it changes, and what serving a
//!   pool in the middle of a migration costs them (reads of moved keys
//!   asked where the key is), without ever being a time the migrator's
//!   moving made longer: the pace answers for that alone. A change of signal (clients
//!   came or left) makes the next window quiet too.
//! - A window whose signal passes the base by more than [`TARGET`] (and
//!   the signal's noise margin) halves the pace; one below it grows it,
//!   doubling until the first halving, then by [`STEP`]. With clients that
//!   keep the servers busy, a migration taking a share of the servers'
//!   time makes their requests wait about that share longer: holding the
//!   rise under 10 % holds what the clients lose under about as much.
//! - `migration_rate` is the ceiling, and a batch holds about 10 ms of
//!   keys at the pace, so a slow pace also blocks a server for less at a
//!   time.

use std::time::{Duration, Instant};

/// Least keys a second: a migration under steady pressure still ends.
const FLOOR: f64 = 50.0;
/// First pace, before anything is known.
const START: f64 = 1000.0;
/// Keys a second added per calm window once past the first back-off.
const STEP: f64 = 500.0;
/// How often the servers are timed (the no-op signal's samples).
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long one window of the signal lasts.
pub const WINDOW: Duration = Duration::from_millis(500);
/// How often the base is measured again, in a quiet window.
const QUIET_EVERY: Duration = Duration::from_secs(5);
/// The rise over the base that a migration may cause.
const TARGET: f64 = 0.10;
/// Client requests a window needs for their latency to be the signal.
pub const MIN_REQUESTS: u64 = 200;
/// Largest batch: what a server is kept from its clients for at once.
const MAX_BATCH: usize = 500;

/// What the pool's clients saw over one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientWindow {
    /// Requests answered.
    pub requests: u64,
    /// Their median latency.
    pub median: Duration,
}

/// Which signal a window was judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// The clients' median latency.
    Clients,
    /// The servers' median no-op time.
    Pings,
}

impl Signal {
    /// A rise smaller than this is noise, not the migration's (seconds):
    /// a no-op's single time varies more than a median of thousands.
    fn margin(self) -> f64 {
        match self {
            Signal::Clients => 0.000_02,
            Signal::Pings => 0.000_2,
        }
    }
}

/// The pace of one migrator.
pub struct Pace {
    cap: f64,
    rate: f64,
    /// Doubling until the first sign of pressure.
    slow_start: bool,
    /// The signal of the last quiet window, and its kind.
    base: Option<(Signal, f64)>,
    /// The signal of the last window judged.
    last: Option<(Signal, f64)>,
    /// The current window: moving nothing (measuring the base).
    quiet: bool,
    window_at: Instant,
    quiet_at: Instant,
    /// No-op times of this window, seconds.
    pings: Vec<f64>,
    probed_at: Instant,
    tokens: f64,
    at: Instant,
}

impl Pace {
    /// A pace of at most `cap` keys a second; the first window is quiet.
    pub fn new(cap: u64) -> Pace {
        Pace::starting(cap, Instant::now())
    }

    fn starting(cap: u64, now: Instant) -> Pace {
        let cap = (cap.max(1)) as f64;
        Pace {
            cap,
            rate: START.min(cap),
            slow_start: true,
            base: None,
            last: None,
            quiet: true,
            window_at: now,
            quiet_at: now,
            pings: Vec::new(),
            probed_at: now,
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

    /// Whether this window is quiet: nothing is to be moved until it ends.
    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// The base the pace is judged against, if measured.
    #[cfg(test)]
    pub fn base(&self) -> Option<(Signal, Duration)> {
        self.base.map(|(s, t)| (s, Duration::from_secs_f64(t)))
    }

    /// The pace in words, for the log: keys a second, and the last
    /// window's signal against its base.
    pub fn describe(&self) -> String {
        let what = |s: Signal| match s {
            Signal::Clients => "clients' median latency",
            Signal::Pings => "servers' no-op time",
        };
        match (self.last, self.base) {
            (Some((s, t)), Some((_, b))) => format!(
                "{} keys/s, {} {} µs against a base of {} µs",
                self.rate(),
                what(s),
                (t * 1e6) as u64,
                (b * 1e6) as u64
            ),
            (None, Some((s, b))) => format!(
                "{} keys/s, {} base {} µs",
                self.rate(),
                what(s),
                (b * 1e6) as u64
            ),
            _ => format!("{} keys/s", self.rate()),
        }
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

    /// The servers answered a no-op in `rtt`.
    pub fn sample(&mut self, rtt: Duration) {
        self.probed_at = Instant::now();
        self.pings.push(rtt.as_secs_f64());
    }

    /// Whether the window is over ([`Pace::end_window`] is due).
    pub fn window_due(&self) -> bool {
        self.window_at.elapsed() >= WINDOW
    }

    /// The window ended; `clients`: what the pool's clients saw in it.
    /// The pace follows (see the module's text).
    pub fn end_window(&mut self, clients: Option<ClientWindow>) {
        self.end_window_at(clients, Instant::now());
    }

    fn end_window_at(&mut self, clients: Option<ClientWindow>, now: Instant) {
        self.window_at = now;
        let pings = std::mem::take(&mut self.pings);
        let signal = match clients {
            Some(c) if c.requests >= MIN_REQUESTS => {
                Some((Signal::Clients, c.median.as_secs_f64()))
            }
            _ => median(pings).map(|t| (Signal::Pings, t)),
        };
        self.last = signal;
        let Some((kind, t)) = signal else {
            // Nothing to judge by (no clients, no no-op answered): the
            // pace stays.
            return;
        };
        if self.quiet {
            self.base = Some((kind, t));
            self.quiet = false;
            self.quiet_at = now;
            return;
        }
        let base = match self.base {
            Some((k, b)) if k == kind => b,
            _ => {
                // The signal changed (clients came or left): measure its
                // base before judging by it.
                self.quiet = true;
                return;
            }
        };
        if t > base * (1.0 + TARGET) + kind.margin() {
            self.rate = (self.rate / 2.0).max(FLOOR).min(self.cap);
            self.slow_start = false;
        } else if self.slow_start {
            self.rate = (self.rate * 2.0).min(self.cap);
        } else {
            self.rate = (self.rate + STEP).min(self.cap);
        }
        if now.duration_since(self.quiet_at) >= QUIET_EVERY {
            self.quiet = true;
        }
    }
}

/// The median of `v` (its upper middle), if any.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    fn clients(median_ms: f64) -> Option<ClientWindow> {
        Some(ClientWindow {
            requests: 5_000,
            median: ms(median_ms),
        })
    }

    #[test]
    fn the_first_window_is_quiet_and_gives_the_base() {
        let mut now = Instant::now();
        let mut p = Pace::starting(100_000, now);
        assert!(p.quiet());
        now += WINDOW;
        p.end_window_at(clients(1.0), now);
        assert!(!p.quiet());
        assert_eq!(p.base(), Some((Signal::Clients, ms(1.0))));
        assert_eq!(p.rate(), 1000, "the quiet window does not move the pace");
    }

    #[test]
    fn calm_clients_bring_the_pace_to_its_ceiling() {
        let mut now = Instant::now();
        let mut p = Pace::starting(40_000, now);
        for _ in 0..10 {
            now += WINDOW;
            p.end_window_at(clients(1.05), now);
        }
        assert_eq!(p.rate(), 40_000);
        assert_eq!(p.batch(), 400);
    }

    #[test]
    fn a_rise_past_the_target_halves_the_pace_then_it_grows_by_steps() {
        let mut now = Instant::now();
        let mut p = Pace::starting(100_000, now);
        now += WINDOW;
        p.end_window_at(clients(1.0), now);
        for _ in 0..5 {
            now += WINDOW;
            p.end_window_at(clients(1.0), now);
        }
        assert_eq!(p.rate(), 32_000);
        // 15 % over the base: more than the migration may cost.
        now += WINDOW;
        p.end_window_at(clients(1.15), now);
        assert_eq!(p.rate(), 16_000);
        // Calm again: the pace grows by steps, not by doubling.
        now += WINDOW;
        p.end_window_at(clients(1.08), now);
        assert_eq!(p.rate(), 16_000 + STEP as u64);
    }

    #[test]
    fn the_base_is_measured_again_in_a_quiet_window() {
        let mut now = Instant::now();
        let mut p = Pace::starting(100_000, now);
        now += WINDOW;
        p.end_window_at(clients(1.0), now);
        let mut quiet = 0;
        for _ in 0..(QUIET_EVERY.as_millis() / WINDOW.as_millis() + 2) {
            now += WINDOW;
            if p.quiet() {
                quiet += 1;
                // The clients' load grew meanwhile: a new base.
                p.end_window_at(clients(2.0), now);
            } else {
                p.end_window_at(clients(1.0), now);
            }
        }
        assert_eq!(quiet, 1);
        assert_eq!(p.base(), Some((Signal::Clients, ms(2.0))));
        // Judged against the new base: 2.1 ms is within it.
        let before = p.rate();
        now += WINDOW;
        p.end_window_at(clients(2.1), now);
        assert!(p.rate() >= before);
    }

    #[test]
    fn without_clients_the_servers_no_ops_are_the_signal() {
        let mut now = Instant::now();
        let mut p = Pace::starting(100_000, now);
        // Too few client requests to judge by.
        let few = Some(ClientWindow {
            requests: 3,
            median: ms(9.0),
        });
        for t in [0.1, 0.12, 0.1] {
            p.sample(ms(t));
        }
        now += WINDOW;
        p.end_window_at(few, now);
        assert_eq!(p.base(), Some((Signal::Pings, ms(0.1))));
        // Pings half again as long, but within the noise margin.
        for t in [0.15, 0.16, 0.2] {
            p.sample(ms(t));
        }
        now += WINDOW;
        p.end_window_at(None, now);
        assert_eq!(p.rate(), 2000);
        for t in [3.0, 3.0, 0.1] {
            p.sample(ms(t));
        }
        now += WINDOW;
        p.end_window_at(None, now);
        assert_eq!(p.rate(), 1000);
        // Clients came: their base is measured before they are judged by.
        now += WINDOW;
        p.end_window_at(clients(5.0), now);
        assert!(p.quiet());
        now += WINDOW;
        p.end_window_at(clients(1.0), now);
        assert_eq!(p.base(), Some((Signal::Clients, ms(1.0))));
    }

    #[test]
    fn the_pace_never_stops_nor_passes_its_ceiling() {
        let mut now = Instant::now();
        let mut p = Pace::starting(200, now);
        assert_eq!(p.rate(), 200);
        assert_eq!(p.batch(), 2);
        now += WINDOW;
        p.end_window_at(clients(1.0), now);
        // (Fewer windows than take to the next quiet one.)
        for _ in 0..6 {
            now += WINDOW;
            p.end_window_at(clients(50.0), now);
        }
        assert!(!p.quiet());
        assert_eq!(p.rate() as f64, FLOOR);
        assert_eq!(p.batch(), 1);
        // A window with nothing to judge by leaves the pace.
        now += WINDOW;
        p.end_window_at(None, now);
        assert_eq!(p.rate() as f64, FLOOR);
    }
}
