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

/// What bounds the event loop's next wait, gathered before it: the
/// soonest timer, the deadlines of held replies and of reads under a
/// low-water mark, and what this worker is in the middle of
/// ([`PassWait::timeout`]).
#[derive(Debug, Clone, Copy)]
pub struct PassWait {
    /// Until the soonest timer ([`Timers::wait`]).
    pub timer: Duration,
    /// Until replies held for the rest of their batch leave.
    pub held: Option<Duration>,
    /// Until replies waiting under a receive low-water mark are read.
    pub late: Option<Duration>,
    /// Output queued by the last flush itself, or connections to read
    /// again: no wait.
    pub queued: bool,
    /// Accepting stopped (a graceful stop): idle clients are looked at
    /// often.
    pub stopping: bool,
    /// Handing clients over: a full handover queue is tried again soon.
    pub handing_over: bool,
    /// Until requests held for the fleet are looked at (their deadline,
    /// the page).
    pub fleet: Option<Duration>,
    /// Clients handed in are left to take: no wait.
    pub handin_again: bool,
    /// The sentinel gate is shut: looked at often.
    pub gated: bool,
}

impl PassWait {
    /// How long the next wait may last. `retry_lock`: in accept_mutex
    /// mode, with the gate open and the mutex not taken, how soon to try
    /// again.
    pub fn timeout(&self, retry_lock: Option<Duration>) -> Duration {
        let mut t = self.timer;
        if let Some(held) = self.held {
            t = t.min(held);
        }
        if let Some(late) = self.late {
            t = t.min(late);
        }
        if self.queued {
            t = Duration::ZERO;
        }
        if self.stopping {
            t = t.min(super::GRACEFUL_IDLE / 2);
        }
        if self.handing_over {
            t = t.min(super::HANDOVER_RETRY);
        }
        if let Some(fleet) = self.fleet {
            t = t.min(fleet);
        }
        if self.handin_again {
            t = Duration::ZERO;
        }
        if self.gated {
            t = t.min(super::GATE_POLL);
        }
        if let Some(delay) = retry_lock {
            t = t.min(delay);
        }
        t
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

    fn quiet_pass() -> PassWait {
        PassWait {
            timer: MAX_WAIT,
            held: None,
            late: None,
            queued: false,
            stopping: false,
            handing_over: false,
            fleet: None,
            handin_again: false,
            gated: false,
        }
    }

    #[test]
    fn a_quiet_pass_waits_for_the_soonest_timer() {
        let ms = Duration::from_millis;
        assert_eq!(quiet_pass().timeout(None), MAX_WAIT);
        let w = PassWait {
            timer: ms(300),
            held: Some(ms(2)),
            late: Some(ms(7)),
            ..quiet_pass()
        };
        assert_eq!(w.timeout(None), ms(2), "held replies leave first");
        let w = PassWait {
            timer: ms(300),
            late: Some(ms(7)),
            fleet: Some(ms(40)),
            ..quiet_pass()
        };
        assert_eq!(w.timeout(None), ms(7));
        let w = PassWait {
            timer: ms(300),
            fleet: Some(ms(40)),
            ..quiet_pass()
        };
        assert_eq!(w.timeout(None), ms(40));
        assert_eq!(
            w.timeout(Some(ms(20))),
            ms(20),
            "the accept mutex tried again"
        );
    }

    #[test]
    fn work_left_from_the_pass_does_not_wait() {
        let ms = Duration::from_millis;
        let queued = PassWait {
            queued: true,
            ..quiet_pass()
        };
        assert_eq!(queued.timeout(None), Duration::ZERO);
        let handin = PassWait {
            handin_again: true,
            gated: true,
            ..quiet_pass()
        };
        assert_eq!(handin.timeout(Some(ms(3))), Duration::ZERO);
    }

    #[test]
    fn stopping_handing_over_and_the_gate_shorten_the_wait() {
        use super::super::{GATE_POLL, GRACEFUL_IDLE, HANDOVER_RETRY};
        let stopping = PassWait {
            stopping: true,
            ..quiet_pass()
        };
        assert_eq!(stopping.timeout(None), GRACEFUL_IDLE / 2);
        let handing = PassWait {
            stopping: true,
            handing_over: true,
            ..quiet_pass()
        };
        assert_eq!(handing.timeout(None), HANDOVER_RETRY);
        let gated = PassWait {
            gated: true,
            ..quiet_pass()
        };
        assert_eq!(gated.timeout(None), GATE_POLL);
        let sooner = PassWait {
            timer: Duration::from_millis(1),
            gated: true,
            ..quiet_pass()
        };
        assert_eq!(sooner.timeout(None), Duration::from_millis(1));
    }
}
