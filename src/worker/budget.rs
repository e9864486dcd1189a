//! The worker's `buffer_budget`: bytes of replies buffered for all its
//! clients, counted as they are queued and written (the `output_bytes`
//! gauge), and whether the total passed the budget, when the clients
//! holding the most are disconnected until it is below 90 % of it (Redis'
//! client eviction): memory stays bounded and the clients that read their
//! replies are not held up.

use super::closes::Close;
use super::conn::Conn;
use crate::stats::shm::StatsSlot;
use crate::stats::WorkerField;
use mio::Token;
use slab::Slab;

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

    /// Over the budget: the clients of `conns` to evict, the most first
    /// ([`OutputBudget::choose`] over `sweep::outputs`), counted as one
    /// eviction run.
    #[cold]
    #[inline(never)]
    pub(super) fn evictions(&self, conns: &Slab<Conn>, stats: &StatsSlot<'_>) -> Vec<Close> {
        stats.worker_add(WorkerField::BudgetEvictions, 1);
        self.choose(super::sweep::outputs(conns))
    }

    /// Of the clients holding `outputs` (token, bytes of replies), those
    /// evicted, the most first (of two holding as much, the later in the
    /// table), until what is left is below 90 % of the budget. Each is
    /// closed only while eviction still goes on when its turn comes
    /// (`Close::Evict`).
    fn choose(&self, outputs: impl Iterator<Item = (Token, usize)>) -> Vec<Close> {
        let mut held: Vec<(usize, usize)> = outputs.map(|(t, len)| (len, t.0)).collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        let mut left = self.bytes;
        held.into_iter()
            .take_while(|&(len, _)| {
                let evicting = left * 10 > self.budget * 9;
                left = left.saturating_sub(len);
                evicting
            })
            .map(|(len, k)| Close::Evict {
                token: Token(k),
                len,
            })
            .collect()
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

    #[test]
    fn the_clients_holding_the_most_are_evicted_down_to_ninety_percent() {
        let b = OutputBudget {
            bytes: 1100,
            budget: 1000,
        };
        let evict = |token, len| Close::Evict {
            token: Token(token),
            len,
        };
        let outputs = [(1, 100), (2, 150), (3, 50), (4, 150), (5, 700)];
        // 1100 less 700 is 400, under 900: the one holding most is enough.
        assert_eq!(
            b.choose(outputs.iter().map(|&(t, n)| (Token(t), n))),
            vec![evict(5, 700)]
        );
        let outputs = [(1, 100), (2, 150), (3, 50), (4, 150), (5, 50)];
        // 1100, 950, 800: of two holding as much, the later goes first.
        assert_eq!(
            b.choose(outputs.iter().map(|&(t, n)| (Token(t), n))),
            vec![evict(4, 150), evict(2, 150)]
        );
        assert!(b.choose(std::iter::empty()).is_empty(), "nobody holds any");
    }
}
