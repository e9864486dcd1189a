//! The worker's timers: a server connection's request timeout, a cluster
//! pool's retry. Each names a connection token and an id that the owner
//! compares on firing (a timer outliving what armed it is ignored there),
//! so none is ever cancelled: it fires, and is found stale.

use mio::Token;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// The longest the event loop waits without a timer: its heartbeat, a
/// graceful stop and the master's messages are looked at that often.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// Timers by deadline, soonest first.
#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

impl Timers {
    /// Fire for `token` (with `id`) at `at`.
    pub fn arm(&mut self, at: Instant, token: Token, id: u64) {
        self.heap.push(Reverse((at, token.0, id)));
    }

    /// How long the event loop may wait from `now`: until the soonest
    /// timer, at most a second.
    pub fn wait(&self, now: Instant) -> Duration {
        self.heap.peek().map_or(MAX_WAIT, |Reverse((at, _, _))| {
            at.saturating_duration_since(now).min(MAX_WAIT)
        })
    }

    /// The next timer due at `now`, taken off.
    pub fn due(&mut self, now: Instant) -> Option<(Token, u64)> {
        let Reverse((at, _, _)) = self.heap.peek()?;
        if *at > now {
            return None;
        }
        let Reverse((_, token, id)) = self.heap.pop()?;
        Some((Token(token), id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_soonest_first_and_only_once_due() {
        let mut t = Timers::default();
        let now = Instant::now();
        assert_eq!(t.wait(now), MAX_WAIT, "no timer: the loop's own beat");
        t.arm(now + Duration::from_millis(30), Token(7), 2);
        t.arm(now + Duration::from_millis(10), Token(5), 1);
        t.arm(now + Duration::from_secs(5), Token(9), 3);
        assert_eq!(t.wait(now), Duration::from_millis(10));
        assert_eq!(t.due(now), None, "nothing due yet");
        let later = now + Duration::from_millis(30);
        assert_eq!(t.due(later), Some((Token(5), 1)));
        assert_eq!(t.due(later), Some((Token(7), 2)));
        assert_eq!(t.due(later), None);
        assert_eq!(
            t.wait(later),
            MAX_WAIT,
            "a far timer waits a second at most"
        );
        assert_eq!(t.wait(now + Duration::from_secs(6)), Duration::ZERO);
    }
}
