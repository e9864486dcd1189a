//! What a pool's clients see while its migrator works: the mean time the
//! workers' requests to the pool's servers took since the last look, read
//! from the shared counters region the workers write (`stats/shm.rs`, the
//! pool's latency histograms). The pace (`pace.rs`) backs off when it
//! rises, as it does when the servers answer its own no-op late.

use crate::stats::shm::Region;
use std::time::Duration;

/// Fewest requests a window needs to say anything: fewer are kept for
/// the next look.
const LEAST: u64 = 100;

/// The clients' latency of one pool, a window at a time.
pub struct ClientLatency<'a> {
    region: &'a Region,
    pool: usize,
    /// Requests and their summed µs at the last window's end.
    last: Option<(u64, u64)>,
}

impl<'a> ClientLatency<'a> {
    /// The pool at index `pool` of the configuration `region` counts.
    pub fn new(region: &'a Region, pool: usize) -> ClientLatency<'a> {
        ClientLatency {
            region,
            pool,
            last: None,
        }
    }

    /// The next window starts now.
    pub fn restart(&mut self) {
        let s = self.region.latency_pool(self.pool, false);
        self.last = Some((s.count, s.sum));
    }

    /// The mean latency of the requests answered since the last window,
    /// once there are enough of them (none at the first look, which only
    /// marks the start).
    pub fn window(&mut self) -> Option<Duration> {
        let s = self.region.latency_pool(self.pool, false);
        let now = (s.count, s.sum);
        let Some(last) = self.last.filter(|l| l.0 <= now.0 && l.1 <= now.1) else {
            self.last = Some(now);
            return None;
        };
        let (_, us) = window_mean(last, now)?;
        self.last = Some(now);
        Some(Duration::from_micros(us))
    }
}

/// Requests and mean µs between two readings of (count, sum); none when
/// fewer than [`LEAST`] (or the counters went back: a new generation of
/// workers).
fn window_mean(last: (u64, u64), now: (u64, u64)) -> Option<(u64, u64)> {
    let n = now.0.checked_sub(last.0)?;
    let sum = now.1.checked_sub(last.1)?;
    (n >= LEAST).then(|| (n, sum / n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_the_mean_of_the_requests_since_the_last() {
        assert_eq!(
            window_mean((1000, 500_000), (1200, 600_000)),
            Some((200, 500))
        );
        // Too few to judge: the next look spans them too.
        assert_eq!(window_mean((1000, 500_000), (1050, 530_000)), None);
        // Counters that went back (another region) say nothing.
        assert_eq!(window_mean((1000, 500_000), (10, 5000)), None);
    }

    #[test]
    fn the_region_the_workers_write_is_read() {
        use crate::stats::histogram::Class;
        use crate::stats::shm::Layout;
        let r = Region::new(Layout::new(vec![2, 1], vec![]), 2).unwrap();
        let mut c = ClientLatency::new(&r, 1);
        assert_eq!(c.window(), None);
        for _ in 0..150 {
            r.slot(0).record_latency(1, 0, Class::Read, 400);
        }
        for _ in 0..50 {
            r.slot(1).record_latency(1, 0, Class::Write, 800);
            // Another pool's requests do not count.
            r.slot(1).record_latency(0, 0, Class::Read, 90_000);
        }
        assert_eq!(c.window(), Some(Duration::from_micros(500)));
        assert_eq!(c.window(), None);
    }
}
