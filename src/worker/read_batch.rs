//! Server replies read a batch at a time.
//!
//! A backend answers a pipelined stream of requests in many small sends
//! (memcached answers at most 20 requests of a connection per event, then
//! serves its other connections). Read as each one lands, every send
//! wakes the worker: an `epoll_wait` that sleeps, a wakeup the sender pays
//! for, a `read`, a pass. With many requests owed on a connection, the
//! worker instead asks the kernel (`SO_RCVLOWAT`) to report the socket
//! readable only once enough bytes are queued for the replies owed, less
//! what the last of them could lack.
//!
//! How many bytes each owed reply is counted for: half the shortest reply
//! the connection brought lately (`ReplyFloor`: over the current window
//! of 1024 replies and the one before), and never under `REPLY_MIN`, the
//! fewest any reply has. Whether a mark is set at all follows from
//! `REPLY_MIN` alone (`MARK_MIN`): clients that do not pipeline never get
//! one. A single short reply (a miss's `END`) brings the count down to
//! `REPLY_MIN` at once, so a load with misses among its hits is read as
//! with `REPLY_MIN` throughout; a load of hits alone (values of a size)
//! is woken a mark of up to 16 KB at a time rather than at every send.
//!
//! Nothing can wait on it for long:
//! - the mark only rises after a read, from the replies then owed, and
//!   only when they call for several times it (`RAISE_FACTOR`, so that
//!   a wavering count does not cost a system call a read); it falls as
//!   soon as they call for less; a request sent later only adds bytes to
//!   come;
//! - EOF and errors wake the worker whatever the mark;
//! - bytes left under the mark — a server that stops part-way, a reply
//!   slower than those behind it, or replies shorter than half the
//!   shortest seen lately (hits, then only misses) — are read anyway
//!   `READ_WAIT` after the mark was set with no read since, and a read
//!   that finds nothing sets the mark back to one byte;
//! - it is set only on plain TCP connections shared by requests (not TLS,
//!   whose library may hold decrypted bytes the mark cannot see, nor a
//!   connection of its own for a blocking command, a subscription or a
//!   streamed reply), and only for memcached pools, whose every command
//!   is answered at once.

use super::conn::{Conn, ConnTable, Server};
use super::deadlines::Deadlines;
use crate::proto::Protocol;
use mio::Token;
use slab::Slab;
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

/// The mark for `owed` replies of at least `per` bytes each: what they
/// will bring but one (the first may already be in hand in part), rounded
/// down to a power of two so that small changes in what is owed do not
/// each cost a system call; 1 for a single reply.
pub(super) fn mark_for(owed: usize, per: usize) -> usize {
    let least = per
        .max(REPLY_MIN)
        .saturating_mul(owed.saturating_sub(1))
        .saturating_add(1)
        .min(MARK_MAX);
    1 << (usize::BITS - 1 - least.leading_zeros())
}

/// Replies in one window of [`ReplyFloor`].
const FLOOR_WINDOW: u64 = 1024;

/// The shortest reply a connection brought lately: over the current
/// window of replies and the one before it, so that one short reply
/// lowers the estimate at once and is forgotten two windows later.
#[derive(Debug, Clone, Copy)]
pub struct ReplyFloor {
    now: usize,
    before: usize,
    seen: u64,
}

impl Default for ReplyFloor {
    fn default() -> Self {
        ReplyFloor {
            now: usize::MAX,
            before: usize::MAX,
            seen: 0,
        }
    }
}

impl ReplyFloor {
    /// `replies` more were read, the shortest of `least` bytes.
    #[inline]
    pub fn note(&mut self, replies: u64, least: usize) {
        if replies == 0 {
            return;
        }
        self.now = self.now.min(least);
        self.seen += replies;
        if self.seen >= FLOOR_WINDOW {
            self.before = self.now;
            self.now = usize::MAX;
            self.seen = 0;
        }
    }

    /// Bytes each reply still owed is counted for: half the shortest seen
    /// lately (`REPLY_MIN` before any).
    #[inline]
    pub fn per_reply(&self) -> usize {
        match self.now.min(self.before) {
            usize::MAX => REPLY_MIN,
            least => (least / 2).max(REPLY_MIN),
        }
    }
}

/// A server connection's receive mark, as its reads go: it holds the
/// mark and the replies it owes.
impl Server {
    /// After a read (`got`: it brought bytes): the mark set for the
    /// replies still owed. Returns the time by which they are read anyway
    /// when a mark over one byte was set (for the worker's deadlines).
    #[inline]
    pub(super) fn mark_after_read(
        &mut self,
        proto: Protocol,
        got: bool,
        now: Instant,
    ) -> Option<Instant> {
        let owed = self.inflight().len();
        // Whether a mark is set at all follows from the fewest bytes any
        // reply has (so clients that do not pipeline never get one); how
        // high, from the replies seen lately.
        let mark = if got && self.reads_in_batches(proto) && mark_for(owed, REPLY_MIN) >= MARK_MIN {
            next_mark(
                self.read_mark().0,
                mark_for(owed, self.reply_floor.per_reply()),
            )
        } else {
            1
        };
        if self.read_mark().0 == 1 && mark == 1 {
            return None;
        }
        if !self.set_read_mark(mark, now) {
            return None;
        }
        (mark > 1).then_some(now + READ_WAIT)
    }

    /// Whether this is connection `id` and its mark was set `READ_WAIT`
    /// before `now` with no read since: what is there is read now.
    pub(super) fn read_overdue(&self, id: u64, now: Instant) -> bool {
        let (mark, since) = self.read_mark();
        self.id() == id && mark > 1 && since + READ_WAIT <= now
    }
}

/// When the marked connections' bytes are read anyway: each one's
/// deadline, by token and id.
impl Deadlines<(Token, u64)> {
    /// The next server connection of `conns` whose mark was set
    /// `READ_WAIT` before `now` with no read since (`Server::read_overdue`):
    /// the worker reads what is there (its next mark follows from that
    /// read). Deadlines of connections gone, or read since, are dropped.
    pub(super) fn next_late(&mut self, conns: &Slab<Conn>, now: Instant) -> Option<Token> {
        while let Some((token, id)) = self.pop_due(now) {
            if conns
                .server(token.0)
                .is_some_and(|s| s.read_overdue(id, now))
            {
                return Some(token);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_stay_under_the_least_the_owed_replies_bring() {
        assert_eq!(mark_for(0, REPLY_MIN), 1);
        assert_eq!(mark_for(1, REPLY_MIN), 1);
        // Two replies: the first may lack all but a byte, the second has 3.
        assert_eq!(mark_for(2, REPLY_MIN), 4);
        for owed in 2..20_000 {
            let m = mark_for(owed, REPLY_MIN);
            assert!(m.is_power_of_two(), "{owed}: {m}");
            assert!(m <= REPLY_MIN * (owed - 1) + 1, "{owed}: {m}");
            assert!(m <= MARK_MAX);
            // Not far under it either: at least half of it, to the cap.
            assert!(
                m * 2 > (REPLY_MIN * (owed - 1) + 1).min(MARK_MAX),
                "{owed}: {m}"
            );
        }
        assert_eq!(mark_for(usize::MAX, REPLY_MIN), MARK_MAX);
    }

    #[test]
    fn the_floor_follows_the_shortest_reply_of_two_windows() {
        let mut f = ReplyFloor::default();
        assert_eq!(f.per_reply(), REPLY_MIN);
        f.note(0, 0);
        assert_eq!(f.per_reply(), REPLY_MIN);
        f.note(10, 1000);
        assert_eq!(f.per_reply(), 500);
        // One short reply lowers it at once, never under REPLY_MIN.
        f.note(1, 5);
        assert_eq!(f.per_reply(), REPLY_MIN);
        // Forgotten two windows later.
        f.note(FLOOR_WINDOW, 1000);
        assert_eq!(f.per_reply(), REPLY_MIN);
        f.note(FLOOR_WINDOW, 1000);
        assert_eq!(f.per_reply(), 500);
        // A mark from it stays under what the owed replies bring if they
        // are as long as half the shortest seen, and within the cap.
        for owed in 2..5000 {
            let m = mark_for(owed, f.per_reply());
            assert!(m <= 500 * (owed - 1) + 1 && m <= MARK_MAX, "{owed}: {m}");
        }
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
                let want = mark_for(owed, REPLY_MIN);
                assert!(next_mark(current, want) <= want, "{current} {owed}");
            }
        }
    }

    /// A connected plain TCP connection shared by requests, over loopback
    /// (its peer returned, to keep it open).
    fn conn(now: Instant) -> (Server, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let sock = std::net::TcpStream::connect(l.local_addr().expect("address")).expect("connect");
        let (peer, _) = l.accept().expect("accept");
        let sock = crate::net::Stream::Tcp(mio::net::TcpStream::from_std(sock));
        let mut s = Server::new(sock, 4, (0, 0, 0), now, false);
        s.set_connected();
        (s, peer)
    }

    /// `n` memcached `get`s owed on `s`.
    fn owe(s: &mut Server, n: usize, now: Instant) {
        let bytes = b"get k\r\n";
        let Ok(crate::proto::Parse::Done(req)) =
            Protocol::Memcache.parse_request(bytes, &Default::default())
        else {
            panic!("request parses");
        };
        for _ in 0..n {
            let _ = s.queue(
                Some(super::super::conn::Waiter::Internal),
                req.op,
                |w| w.extend_from_slice(bytes),
                now,
                crate::stats::slowlog::KeyPrefix::new(b""),
            );
        }
    }

    #[test]
    fn a_mark_is_set_for_many_replies_owed_and_read_late_past_its_wait() {
        let t = Instant::now();
        let (mut s, _peer) = conn(t);
        owe(&mut s, 50, t);
        assert_eq!(
            s.mark_after_read(Protocol::Memcache, true, t),
            None,
            "few owed"
        );
        owe(&mut s, 150, t);
        assert_eq!(
            s.mark_after_read(Protocol::Redis, true, t),
            None,
            "a Redis pool's connection"
        );
        assert_eq!(
            s.mark_after_read(Protocol::Memcache, false, t),
            None,
            "a read that brought nothing"
        );
        assert_eq!(
            s.mark_after_read(Protocol::Memcache, true, t),
            Some(t + READ_WAIT)
        );
        assert_eq!(s.read_mark().0, mark_for(200, REPLY_MIN));
        // Read anyway once its wait is over, if the slot is still its.
        assert!(!s.read_overdue(4, t));
        assert!(s.read_overdue(4, t + READ_WAIT));
        assert!(!s.read_overdue(5, t + READ_WAIT), "another connection");
        // The same mark again (no system call): its time and deadline renewed.
        let later = t + READ_WAIT;
        assert_eq!(
            s.mark_after_read(Protocol::Memcache, true, later),
            Some(later + READ_WAIT)
        );
        assert_eq!(s.read_mark(), (mark_for(200, REPLY_MIN), later));
        // Nothing brought: back to one byte, nothing to read late.
        assert_eq!(s.mark_after_read(Protocol::Memcache, false, later), None);
        assert_eq!(s.read_mark().0, 1);
        assert!(!s.read_overdue(4, later + READ_WAIT));
    }

    #[test]
    fn a_marked_connection_is_read_late_once_its_wait_is_over() {
        let t = Instant::now();
        let (mut s, _peer) = conn(t);
        owe(&mut s, 200, t);
        let at = s
            .mark_after_read(Protocol::Memcache, true, t)
            .expect("a mark");
        let mut conns = Slab::new();
        let st = Token(conns.insert(Conn::Server(Box::new(s))));
        let mut late = Deadlines::new();
        late.push(at, (st, 4));
        late.push(at, (st, 5));
        late.push(at, (Token(9), 4));
        assert_eq!(late.next_late(&conns, t), None, "within its wait");
        assert_eq!(late.next_late(&conns, at), Some(st));
        assert_eq!(
            late.next_late(&conns, at),
            None,
            "another connection's, and one gone, dropped"
        );
    }

    #[test]
    fn a_connection_of_its_own_is_never_marked() {
        let t = Instant::now();
        let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
        let mut s = Server::new(crate::net::Stream::Unix(sock), 4, (0, 0, 0), t, true);
        s.set_connected();
        owe(&mut s, 500, t);
        assert_eq!(s.mark_after_read(Protocol::Memcache, true, t), None);
        assert_eq!(s.read_mark().0, 1);
    }
}
