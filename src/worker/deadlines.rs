//! Short deadlines that all lie the same delay after they are set.
//!
//! The reply hold (`reply_hold.rs`) and the read under a low-water mark
//! (`read_batch.rs`) each give a connection a deadline a fixed delay after
//! now. Set in time order with one delay, deadlines come due in the order
//! they were set: a FIFO serves, with no heap and no search (the worker's
//! timer heap holds the long, varied ones). An entry whose
//! connection was dealt with since is not removed; the owner skips it when
//! it comes due.
//!
//! If the delay shrinks (`config set reply_hold`), a newer deadline can
//! sit behind an older one: it comes due with that older one, a little
//! late, never early.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Deadlines with what each is for, oldest first.
#[derive(Debug)]
pub(super) struct Deadlines<T> {
    queue: VecDeque<(Instant, T)>,
}

impl<T: Copy> Deadlines<T> {
    pub(super) fn new() -> Self {
        Deadlines {
            queue: VecDeque::new(),
        }
    }

    /// Adds `what`, due at `at` (not before the last one added, but for a
    /// shortened delay: see the module's doc).
    #[inline]
    pub(super) fn push(&mut self, at: Instant, what: T) {
        self.queue.push_back((at, what));
    }

    /// The oldest entry if it is due by `now`, taken off the queue.
    #[inline]
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<T> {
        match self.queue.front() {
            Some(&(at, what)) if at <= now => {
                self.queue.pop_front();
                Some(what)
            }
            _ => None,
        }
    }

    /// How long the loop may wait before the oldest entry is due.
    pub(super) fn wait(&self, now: Instant) -> Option<Duration> {
        self.queue
            .front()
            .map(|&(at, _)| at.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_in_the_order_set_and_not_before_their_time() {
        let t0 = Instant::now();
        let d = Duration::from_micros(200);
        let mut q = Deadlines::new();
        assert_eq!(q.wait(t0), None);
        assert_eq!(q.pop_due(t0 + d), None);
        q.push(t0 + d, 1);
        q.push(t0 + 2 * d, 2);
        assert_eq!(q.wait(t0), Some(d));
        assert_eq!(q.pop_due(t0), None);
        assert_eq!(q.pop_due(t0 + d), Some(1));
        assert_eq!(q.pop_due(t0 + d), None);
        assert_eq!(q.wait(t0 + 3 * d), Some(Duration::ZERO));
        assert_eq!(q.pop_due(t0 + 3 * d), Some(2));
        assert_eq!(q.wait(t0), None);
    }

    #[test]
    fn a_shorter_delay_behind_a_longer_one_is_late_not_early() {
        let t0 = Instant::now();
        let mut q = Deadlines::new();
        q.push(t0 + Duration::from_millis(2), 'a');
        q.push(t0 + Duration::from_millis(1), 'b');
        assert_eq!(q.pop_due(t0 + Duration::from_millis(1)), None);
        assert_eq!(q.pop_due(t0 + Duration::from_millis(2)), Some('a'));
        assert_eq!(q.pop_due(t0 + Duration::from_millis(2)), Some('b'));
    }
}
