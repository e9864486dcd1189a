//! Latency histogram: 1 µs buckets up to 1 s, one overflow bucket.

use std::time::Duration;

const BUCKETS: usize = 1_000_000;

/// Counts of request latencies.
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_us: u64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS + 1],
            total: 0,
            max_us: 0,
        }
    }

    /// Add one latency.
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        self.max_us = self.max_us.max(us);
        self.counts[(us as usize).min(BUCKETS)] += 1;
        self.total += 1;
    }

    /// Latency in ms at percentile `p` (0..100).
    pub fn percentile(&self, p: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let want = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (us, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= want {
                return us as f64 / 1000.0;
            }
        }
        self.max_ms()
    }

    /// Largest latency in ms.
    pub fn max_ms(&self) -> f64 {
        self.max_us as f64 / 1000.0
    }

    /// Requests slower than `limit`.
    pub fn count_over(&self, limit: Duration) -> u64 {
        let from = (limit.as_micros() as usize + 1).min(BUCKETS);
        self.counts[from..].iter().sum()
    }
}
