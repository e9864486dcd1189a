//! The gate of a worker whose pools follow Redis Sentinel: shut at start,
//! so no client is taken (neither accepted nor handed over: a predecessor
//! keeps serving what it would hand over) before the sentinels have said
//! where the masters are, or `sentinel::GATE` has passed. Whether it opens
//! in a pass is `Gate::opens`'s answer; the worker then starts taking
//! clients.

use super::sentinel::{self, GateStep, Watch};
use std::time::Instant;

/// Shut until an instant, or open.
#[derive(Debug)]
pub struct Gate {
    until: Option<Instant>,
}

impl Gate {
    /// Shut for at most `sentinel::GATE` from `now` when any pool follows
    /// sentinels (`watching`), else open.
    pub fn new(watching: bool, now: Instant) -> Gate {
        Gate {
            until: watching.then(|| now + sentinel::GATE),
        }
    }

    /// No client is taken yet.
    pub fn is_shut(&self) -> bool {
        self.until.is_some()
    }

    /// Whether the gate opens at `now`: it was shut, and every watch was
    /// answered or its time is up (a warning then: clients are served
    /// with the configured addresses). Open once, it stays open.
    pub fn opens(&mut self, watches: &[Watch], now: Instant) -> bool {
        let Some(until) = self.until else {
            return false;
        };
        match sentinel::gate(until, watches, now) {
            GateStep::Shut => return false,
            GateStep::TimedOut => crate::log_warn!(
                "no sentinel answered within {} ms: serving clients with the configured addresses",
                sentinel::GATE.as_millis()
            ),
            GateStep::Answered => {}
        }
        self.until = None;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::worker::pool::PoolRt;
    use std::path::Path;

    /// The watch of a pool following a sentinel that has not answered.
    fn waiting() -> Vec<Watch> {
        let yaml = "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n  sentinels:\n    - 127.0.0.1:26379\n  servers:\n    - 127.0.0.1:6379:1 shard1\n";
        let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
        sentinel::watches(&[PoolRt::new(&c.pools[0], &[])])
    }

    #[test]
    fn a_gate_opens_once_when_the_sentinels_answer_or_its_time_is_up() {
        let now = Instant::now();
        let waiting = waiting();
        assert_eq!(waiting.len(), 1);
        let mut g = Gate::new(true, now);
        assert!(g.is_shut());
        assert!(!g.opens(&waiting, now), "no answer yet");
        assert!(g.is_shut());
        assert!(g.opens(&waiting, now + sentinel::GATE), "time is up");
        assert!(!g.is_shut());
        assert!(!g.opens(&waiting, now + sentinel::GATE), "open already");
        let mut g = Gate::new(true, now);
        assert!(g.opens(&[], now), "nothing to wait for");
    }

    #[test]
    fn without_sentinels_the_gate_is_open_from_the_start() {
        let mut g = Gate::new(false, Instant::now());
        assert!(!g.is_shut());
        assert!(
            !g.opens(&waiting(), Instant::now()),
            "it does not open again"
        );
    }
}
