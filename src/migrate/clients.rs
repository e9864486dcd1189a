//! What a migrating pool's clients see, for the pace (`pace.rs`): read by
//! the migrator from the workers' latency histograms in the shared
//! counters region (the migrator is forked from the master, which maps
//! it), as the requests answered since the last reading and their median
//! latency.

use super::pace::ClientWindow;
use crate::stats::histogram::Snapshot;
use crate::stats::shm::Region;
use std::time::Duration;

/// The latency of one pool's client requests, read window by window.
pub struct Clients<'a> {
    region: &'a Region,
    pool: usize,
    last: Snapshot,
}

impl<'a> Clients<'a> {
    /// Pool `pool` of the configuration `region` counts for, from now on.
    pub fn new(region: &'a Region, pool: usize) -> Clients<'a> {
        Clients {
            region,
            pool,
            last: region.latency_pool(pool, false),
        }
    }

    /// The requests answered since the last call, and their median.
    pub fn window(&mut self) -> ClientWindow {
        let now = self.region.latency_pool(self.pool, false);
        let w = now.since(&self.last);
        self.last = now;
        ClientWindow {
            requests: w.count,
            median: Duration::from_micros(w.quantile(0.5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::histogram::Class;
    use crate::stats::shm::Layout;

    #[test]
    fn a_window_holds_what_the_workers_recorded_since_the_last() {
        let region = Region::new(Layout::new(vec![2, 1], vec![0, 0]), 2).expect("stats region");
        region.slot(0).record_latency(1, 0, Class::Read, 5_000);
        let mut c = Clients::new(&region, 1);
        assert_eq!(c.window().requests, 0, "what came before is not counted");
        for us in [100, 110, 120] {
            region.slot(0).record_latency(1, 0, Class::Read, us);
        }
        region.slot(1).record_latency(1, 0, Class::Write, 900);
        // Another pool's requests are not this one's.
        region.slot(1).record_latency(0, 1, Class::Read, 7_000);
        let w = c.window();
        assert_eq!(w.requests, 4);
        assert!(
            (Duration::from_micros(110)..Duration::from_micros(120)).contains(&w.median),
            "{w:?}"
        );
        assert_eq!(c.window().requests, 0);
    }
}
