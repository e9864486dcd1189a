//! Server replies read a batch at a time.
//!
//! A backend answers a pipelined stream of requests in many small sends
//! (memcached answers at most 20 requests of a connection per event, then
//! serves its other connections). Read as each one lands, every send
//! wakes the worker: an `epoll_wait` that sleeps, a wakeup the sender pays
//! for, a `read`, a pass. With many requests owed on a connection, the
//! worker instead asks the kernel (`SO_RCVLOWAT`) to report the socket
//! readable only once enough bytes are queued for the replies owed, less
//! what the last of them could lack: `REPLY_MIN` bytes per owed reply but
//! the last, plus one. Every reply is at least that long, so the mark is
//! reached by the time the replies owed have all arrived, and sooner when
//! they carry values.
//!
//! Nothing can wait on it for long:
//! - the mark only rises after a read, from the replies then owed, and
//!   only when they call for several times it (`RAISE_FACTOR`, so that
//!   a wavering count does not cost a system call a read); it falls as
//!   soon as they call for less; a request sent later only adds bytes to
//!   come;
//! - EOF and errors wake the worker whatever the mark;
//! - a server that stops part-way (or a reply slower than those behind
//!   it) leaves bytes under the mark: `READ_WAIT` after the mark was set
//!   with no read since, the worker reads what is there anyway, and a
//!   read that finds nothing sets the mark back to one byte;
//! - it is set only on plain TCP connections shared by requests (not TLS,
//!   whose library may hold decrypted bytes the mark cannot see, nor a
//!   connection of its own for a blocking command, a subscription or a
//!   streamed reply), and only for memcached pools, whose every command
//!   is answered at once.

use super::conn::Conn;
use super::server_conn::Server;
use super::Worker;
use crate::proto::Protocol;
use mio::Token;
use std::time::{Duration, Instant};

/// Fewest bytes of any reply (memcached's `OK\r\n` and `HD\r\n` have 4;
/// one fewer allows a server that ends lines with `\n` alone).
const REPLY_MIN: usize = 3;

/// Highest mark set: far below any socket's receive buffer, so the mark
/// never waits for bytes the buffer could not hold.
const MARK_MAX: usize = 16 * 1024;

/// How long bytes may wait under a mark before the worker reads them.
const READ_WAIT: Duration = Duration::from_millis(1);

/// A mark is raised only when the replies owed call for this many times
/// it: a connection whose count of owed replies wavers would otherwise
/// pay a system call at nearly every read. Lowered it always is, as far
/// as they call for.
const RAISE_FACTOR: usize = 4;

/// Least mark set: under it (fewer than about 86 replies owed, as with
/// clients that do not pipeline), the wakeups saved do not pay for the
/// system calls that set and clear a mark as the count comes and goes.
const MARK_MIN: usize = 256;

/// The mark to set when `current` is set and the replies owed call for
/// `wanted` (`mark_for`): none (1) under `MARK_MIN`, else `current` while
/// it is safe and not far under.
fn next_mark(current: usize, wanted: usize) -> usize {
    if wanted < MARK_MIN {
        1
    } else if wanted < current || wanted >= current.saturating_mul(RAISE_FACTOR) {
        wanted
    } else {
        current
    }
}

/// The mark for `owed` replies: the fewest bytes they will bring but one
/// (the first may already be in hand in part), rounded down to a power of
/// two so that small changes in what is owed do not each cost a system
/// call; 1 for a single reply.
pub(super) fn mark_for(owed: usize) -> usize {
    let least = REPLY_MIN
        .saturating_mul(owed.saturating_sub(1))
        .saturating_add(1)
        .min(MARK_MAX);
    1 << (usize::BITS - 1 - least.leading_zeros())
}

/// Whether replies on this connection may be read in batches (see the
/// module's doc).
fn batches(s: &Server, proto: Protocol) -> bool {
    proto == Protocol::Memcache
        && s.plain_tcp()
        && !s.is_dedicated()
        && s.rstream().is_none()
        && s.push_to().is_none()
}

impl Worker<'_> {
    /// After a read of server connection `token` (`got`: it brought
    /// bytes): the mark for the replies it still owes, and the time by
    /// which they are read anyway.
    pub(super) fn set_read_mark(&mut self, token: Token, got: bool, now: Instant) {
        let Some(Conn::Server(s)) = self.conns.get_mut(token.0) else {
            return;
        };
        let proto = self.pools[s.pool()].proto;
        let mark = if got && batches(s, proto) {
            next_mark(s.read_mark().0, mark_for(s.inflight().len()))
        } else {
            1
        };
        if s.read_mark().0 == 1 && mark == 1 {
            return;
        }
        if !s.set_read_mark(mark, now) {
            return;
        }
        if mark > 1 {
            let id = s.id();
            self.read_deadlines.push(now + READ_WAIT, (token, id));
        }
    }

    /// Server connections whose mark was set `READ_WAIT` ago with no read
    /// since: read now, what is there (their next mark follows from it).
    pub(super) fn read_late(&mut self, now: Instant) {
        while let Some((token, id)) = self.read_deadlines.pop_due(now) {
            let Some(Conn::Server(s)) = self.conns.get(token.0) else {
                continue;
            };
            let (mark, since) = s.read_mark();
            if s.id() == id && mark > 1 && since + READ_WAIT <= now {
                self.read_server(token, now, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_stay_under_the_least_the_owed_replies_bring() {
        assert_eq!(mark_for(0), 1);
        assert_eq!(mark_for(1), 1);
        // Two replies: the first may lack all but a byte, the second has 3.
        assert_eq!(mark_for(2), 4);
        for owed in 2..20_000 {
            let m = mark_for(owed);
            assert!(m.is_power_of_two(), "{owed}: {m}");
            assert!(m <= REPLY_MIN * (owed - 1) + 1, "{owed}: {m}");
            assert!(m <= MARK_MAX);
            // Not far under it either: at least half of it, to the cap.
            assert!(
                m * 2 > (REPLY_MIN * (owed - 1) + 1).min(MARK_MAX),
                "{owed}: {m}"
            );
        }
        assert_eq!(mark_for(usize::MAX), MARK_MAX);
    }

    #[test]
    fn marks_fall_at_once_and_rise_by_a_factor() {
        // Lowered whenever the owed replies call for less.
        assert_eq!(next_mark(1024, 512), 512);
        assert_eq!(next_mark(1024, 1), 1);
        // None for few replies owed.
        assert_eq!(next_mark(1024, 128), 1);
        assert_eq!(next_mark(1, 128), 1);
        // Kept while safe and within the factor.
        assert_eq!(next_mark(1024, 1024), 1024);
        assert_eq!(next_mark(1024, 2048), 1024);
        // Raised past it.
        assert_eq!(next_mark(1024, 4096), 4096);
        assert_eq!(next_mark(1, 256), 256);
        for current in [1, 2, 4, 64, 1024, MARK_MAX] {
            for owed in 0..5000 {
                let want = mark_for(owed);
                assert!(next_mark(current, want) <= want, "{current} {owed}");
            }
        }
    }
}
