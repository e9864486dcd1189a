//! Replies held back for the rest of their batch.
//!
//! A client that pipelines sends a batch of requests in one write and
//! reads their replies together. A backend answers such a batch in more
//! than one segment (memcached sends a segment per reply, or per group of
//! them), so writing the client's output at the end of every pass that
//! added to it costs one `write` per segment — and a wakeup of the client
//! for each. Instead, at the end of a pass a client's queued output waits
//! while the first reply it still owes belongs to the same batch (the
//! requests taken from one parse of its input) as what is queued, for at
//! most `_walnut: reply_hold` (200 µs by default) and 32 KB.
//!
//! The bound keeps the cost to a client that reads replies as they come
//! small and known, and what cannot come by itself (a blocking command, a
//! subscription, a transaction, a streamed or gated request) is never
//! waited for (`Client::hold_output`). A client that pipelines and waits
//! for the whole batch — every pipelining client library does — loses
//! nothing: its last reply leaves when it arrives, as before. A client
//! that sends one request at a time is never held: its batch has one
//! reply. Nothing is held during a graceful stop or a handover.
//!
//! A held client is written by the pass that adds the rest of its batch
//! (it is marked dirty as any client given output), or by the first pass
//! at or past its deadline: the loop's wait ends by then (epoll's
//! millisecond timeout rounds it up when nothing else wakes the loop).

use super::client_conn::Hold;
use super::conn::ConnTable;
use super::deadlines::Deadlines;
use super::dirty::Dirty;
use super::Worker;
use mio::Token;
use std::time::{Duration, Instant};

/// Most output held for one client: past it, writing costs little next to
/// the copy, and the client's socket buffer is better kept busy.
const HOLD_MAX: usize = 32 * 1024;

impl Worker<'_> {
    /// Whether the client's output waits (see the module's doc) rather
    /// than being written in this flush at `now`.
    #[inline]
    pub(super) fn hold_client(&mut self, token: Token, now: Instant) -> bool {
        let Some(bound) = self.ctl.reply_hold else {
            return false;
        };
        if !self.intake.accepting() || self.handover.on() {
            return false;
        }
        let Some(c) = self.conns.client_mut(token.0) else {
            return false;
        };
        match c.hold_output(now, bound, HOLD_MAX) {
            Hold::Write => false,
            Hold::Keep => true,
            Hold::Begin => {
                self.hold_deadlines.push(now + bound, token);
                true
            }
        }
    }
}

/// The deadlines of held clients.
impl Deadlines<Token> {
    /// Clients whose hold ends by `now` are marked in `dirty`, to be
    /// written in this pass's flush. A client written or closed since it
    /// was held is marked anyway (a reused token may even name a server
    /// connection): its flush then finds nothing to hold and little or
    /// nothing to write. After `config set reply_hold` shortens the bound,
    /// a newer deadline can sit behind an older one: that client is
    /// written by the older one, or sooner by any pass that marks it.
    pub(super) fn release_due(&mut self, now: Instant, dirty: &mut Dirty) {
        while let Some(token) = self.pop_due(now) {
            dirty.client(token);
        }
    }
}

/// `_walnut: reply_hold` in µs as the worker keeps it (0: off).
pub fn bound(us: u64) -> Option<Duration> {
    (us > 0).then(|| Duration::from_micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_client_is_marked_to_be_written_once_its_deadline_passes() {
        let now = Instant::now();
        let mut held = Deadlines::new();
        held.push(now + Duration::from_micros(200), Token(7));
        held.push(now + Duration::from_micros(400), Token(9));
        let mut dirty = Dirty::default();
        held.release_due(now, &mut dirty);
        assert!(dirty.is_empty());
        held.release_due(now + Duration::from_micros(300), &mut dirty);
        assert_eq!(dirty.take_clients(), vec![Token(7)]);
        held.release_due(now + Duration::from_micros(400), &mut dirty);
        assert_eq!(dirty.take_clients(), vec![Token(9)]);
        assert!(dirty.take_servers().is_empty());
    }
}
