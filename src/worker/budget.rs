//! The worker's `buffer_budget`: bytes of replies buffered for all its
//! clients, counted as they are queued and written (the `output_bytes`
//! gauge), and whether the total passed the budget, when the clients
//! holding the most are disconnected until it is below 90 % of it (Redis'
//! client eviction): memory stays bounded and the clients that read their
//! replies are not held up.

use crate::stats::shm::StatsSlot;
use crate::stats::WorkerField;

/// Bytes of replies buffered for all clients of a worker, against its budget.
#[derive(Debug)]
pub struct OutputBudget {
    bytes: usize,
    /// `buffer_budget` (0 = none).
    budget: usize,
}

impl OutputBudget {
    /// No bytes buffered yet; `budget` 0 is none.
    pub fn new(budget: usize) -> OutputBudget {
        OutputBudget { bytes: 0, budget }
    }

    /// `n` bytes of replies were buffered; true when the total is now over
    /// the budget (the worker then evicts, see [`OutputBudget::evicting`]).
    #[inline]
    pub fn add(&mut self, n: usize, stats: &StatsSlot<'_>) -> bool {
        if n == 0 {
            return false;
        }
        self.bytes += n;
        stats.worker_add(WorkerField::OutputBytes, n as u64);
        self.budget != 0 && self.bytes > self.budget
    }

    /// `n` buffered bytes were written or dropped.
    #[inline]
    pub fn sub(&mut self, n: usize, stats: &StatsSlot<'_>) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        stats.worker_sub(WorkerField::OutputBytes, n as u64);
    }

    /// Eviction goes on while the total is at or over 90 % of the budget.
    pub fn evicting(&self) -> bool {
        self.bytes * 10 > self.budget * 9
    }

    /// The bytes buffered, and the budget.
    pub fn figures(&self) -> (usize, usize) {
        (self.bytes, self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::shm::{Layout, Region};

    #[test]
    fn over_the_budget_evicts_down_to_ninety_percent() {
        let region = Region::new(Layout::new(vec![1], vec![0]), 1).expect("stats region");
        let st = region.slot(0);
        let mut b = OutputBudget::new(1000);
        assert!(!b.add(0, &st));
        assert!(!b.add(1000, &st), "at the budget is not over it");
        assert!(b.add(1, &st));
        assert!(b.evicting());
        b.sub(101, &st);
        assert!(!b.evicting(), "900 of 1000 is not over 90 %");
        assert_eq!(b.figures(), (900, 1000));
        b.sub(5000, &st);
        assert_eq!(b.figures().0, 0, "never below nothing");
        assert_eq!(region.worker_sum(WorkerField::OutputBytes), 0);
        let mut none = OutputBudget::new(0);
        assert!(!none.add(usize::MAX / 2, &st), "no budget: never over");
    }
}
