//! A server connection's state, changed only through its methods: the
//! requests queued on it and their counters (unsent, sent, not yet added
//! to the shared counters), its timeout timer, its socket and buffers, and
//! what it carries beside plain requests (a streamed request or reply, a
//! kept request fed from its spool, a transaction or subscriber it is
//! pinned to).

use super::buffer::Buffer;
use super::conn::{ClientRef, Feed, Inflight, RepStream, SrvStream, Waiter};
use super::fault::{IoFault, ServerFault};
use super::spool::Spool;
use crate::net::Stream;
use crate::proto::Op;
use crate::stats::shm::StatsSlot;
use crate::stats::ServerField;
use mio::Token;
use std::collections::VecDeque;
use std::io::{self, ErrorKind, Write};
use std::time::{Duration, Instant};

/// What a writable event says of a server connection (`Server::writable`).
#[derive(Debug, PartialEq, Eq)]
pub enum Writable {
    /// Connected: write what is queued.
    Ready,
    /// Its connect (to server `server` of pool `pool`) just finished:
    /// write what is queued.
    Connected { pool: usize, server: usize },
    /// Its connect failed: it is closed for this.
    Failed(ServerFault),
}

/// What a server connection's timeout timer says when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerStep {
    /// Nothing to time: a blocking command (the server answers it when it
    /// asked), a pool without `timeout`, nothing in flight.
    Idle,
    /// Armed again, for this deadline.
    Arm(Instant),
    /// Its oldest request waited the pool's `timeout`: the connection fails.
    TimedOut,
}

/// A request at least this large ends a TLS record run (`Server::tls_cut`).
const TLS_CUT_MIN: usize = 8 * 1024;

/// Server connection state.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum ServerState {
    /// Non-blocking connect in progress.
    Connecting,
    /// Connected.
    Connected,
}

/// A server connection.
#[derive(Debug)]
pub struct Server {
    /// Socket.
    sock: Stream,
    /// TLS: the first `tls_cut` bytes of `wbuf` end a large request and
    /// are written apart from what follows, so the next request starts a
    /// TLS record of its own (0: no cut). memcached reads a large value
    /// straight into its item and does not look again at bytes its TLS
    /// library already decrypted past the value, so a request sharing
    /// the value's last record would wait until the timeout.
    tls_cut: usize,
    /// Unique id.
    id: u64,
    /// Pool index.
    pool: usize,
    /// Server index in the pool.
    server: usize,
    /// Connection slot index (of `server_connections`).
    slot: usize,
    /// Connect state.
    state: ServerState,
    /// When it was opened (its TLS handshake is bounded from there).
    opened: Instant,
    /// Input not yet parsed.
    rbuf: Buffer,
    /// Do not parse again until `rbuf` holds this many bytes.
    need: usize,
    /// The socket's receive low-water mark (`read_batch.rs`; 1: any byte
    /// wakes the worker) and when it was last set.
    read_mark: (usize, Instant),
    /// The shortest reply read lately (`read_batch.rs`).
    pub reply_floor: super::read_batch::ReplyFloor,
    /// Requests not yet written.
    wbuf: Buffer,
    /// Requests waiting for replies, in order.
    inflight: VecDeque<Inflight>,
    /// A timeout timer is armed for this connection.
    timer_armed: bool,
    /// Requests counted in the in_queue gauge (not yet written whole).
    unsent: u64,
    /// Bytes counted in the in_queue_bytes gauge.
    unsent_bytes: u64,
    /// Of `unsent`, requests queued in this pass of the loop and not yet
    /// added to the shared counters (requests, in_queue; added once per
    /// pass and connection, see `count_queued` in `server.rs`).
    uncounted: u64,
    /// Their bytes.
    uncounted_bytes: u64,
    /// Requests counted in the out_queue gauge.
    sent: u64,
    /// Bytes counted in the out_queue_bytes gauge.
    sent_bytes: u64,
    /// A large request being streamed to this connection.
    stream: Option<SrvStream>,
    /// A large reply being streamed from this connection.
    rstream: Option<RepStream>,
    /// A kept request being sent again on this connection from its spool.
    feed: Option<Feed>,
    /// A connection of its own for one streamed request (not in the
    /// server's connection slots; closed once answered).
    dedicated: bool,
    /// It carries a blocking command (BLPOP, XREAD BLOCK, ...): the pool's
    /// `timeout` does not apply (the command's own timeout does).
    blocking: bool,
    /// Pinned to this client for its transaction (see `txn.rs`): kept
    /// until the transaction ends, then closed.
    pinned: Option<Token>,
    /// A pub/sub connection: everything it receives goes to this client
    /// (token, id) as it arrives (see `pubsub.rs`).
    push_to: Option<ClientRef>,
}

/// What queueing a request changed, for the worker's lists and timer.
#[derive(Debug, Clone, Copy)]
pub struct Queued {
    /// The connection had no output before: it joins the dirty list.
    pub first_out: bool,
    /// The first request of this pass: it joins the list to count.
    pub first_uncounted: bool,
}

/// Requests and bytes moved between queue gauges.
pub type Moved = (u64, u64);

impl Server {
    /// A connection being opened (connect in progress) to server `server`
    /// of pool `pool`, in connection slot `slot`.
    pub fn new(
        sock: Stream,
        id: u64,
        at: (usize, usize, usize),
        now: Instant,
        dedicated: bool,
    ) -> Server {
        let (pool, server, slot) = at;
        Server {
            read_mark: (1, now),
            reply_floor: Default::default(),
            sock,
            tls_cut: 0,
            id,
            pool,
            server,
            slot,
            state: ServerState::Connecting,
            opened: now,
            rbuf: Buffer::default(),
            need: 0,
            wbuf: Buffer::default(),
            inflight: VecDeque::new(),
            timer_armed: false,
            unsent: 0,
            unsent_bytes: 0,
            uncounted: 0,
            uncounted_bytes: 0,
            sent: 0,
            sent_bytes: 0,
            stream: None,
            rstream: None,
            feed: None,
            dedicated,
            blocking: false,
            pinned: None,
            push_to: None,
        }
    }

    /// The receive low-water mark and when it was set (`read_batch.rs`).
    #[inline]
    pub fn read_mark(&self) -> (usize, Instant) {
        self.read_mark
    }

    /// Set the receive low-water mark to `mark` bytes at `now`; false when
    /// the socket refused it (the mark is then left as it was).
    #[inline]
    pub fn set_read_mark(&mut self, mark: usize, now: Instant) -> bool {
        if mark != self.read_mark.0 && !self.sock.set_recv_lowat(mark) {
            return false;
        }
        self.read_mark = (mark, now);
        true
    }

    /// Whether the connection is open (connected, not a TLS one, not a
    /// Unix socket): what a receive low-water mark may be set on.
    #[inline]
    pub fn plain_tcp(&self) -> bool {
        self.state == ServerState::Connected && self.sock.is_tcp() && !self.sock.is_tls()
    }

    /// Whether replies on this connection may be read in batches (see
    /// `read_batch.rs`): a memcached pool's plain TCP connection shared by
    /// requests (not one of its own, nor passing a streamed reply or a
    /// subscriber's frames).
    #[inline]
    pub fn reads_in_batches(&self, proto: crate::proto::Protocol) -> bool {
        proto == crate::proto::Protocol::Memcache
            && self.plain_tcp()
            && !self.is_dedicated()
            && self.rstream().is_none()
            && self.push_to().is_none()
    }

    /// Unique id.
    #[inline]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Pool index.
    #[inline]
    pub fn pool(&self) -> usize {
        self.pool
    }

    /// Server index in the pool.
    #[inline]
    pub fn server(&self) -> usize {
        self.server
    }

    /// Connection slot index.
    #[inline]
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// When it was opened.
    #[inline]
    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// The non-blocking connect is still in progress.
    #[inline]
    pub fn is_connecting(&self) -> bool {
        self.state == ServerState::Connecting
    }

    /// The connect finished.
    #[inline]
    pub fn set_connected(&mut self) {
        self.state = ServerState::Connected;
    }

    /// What a writable event says of it: still connecting, the connect
    /// finished (`Connected`) or failed (nothing was written on it then);
    /// connected already, it is written (`Ready`).
    #[inline]
    pub fn writable(&mut self) -> Writable {
        if !self.is_connecting() {
            return Writable::Ready;
        }
        match self.sock.take_error() {
            Ok(None) => {
                self.set_connected();
                Writable::Connected {
                    pool: self.pool(),
                    server: self.server(),
                }
            }
            Ok(Some(e)) | Err(e) => Writable::Failed(ServerFault::Connect(IoFault::from(&e))),
        }
    }

    /// Socket.
    #[inline]
    pub fn sock(&self) -> &Stream {
        &self.sock
    }

    /// Socket, to register, flush or read an error from.
    #[inline]
    pub fn sock_mut(&mut self) -> &mut Stream {
        &mut self.sock
    }

    /// Input not yet parsed.
    #[inline]
    pub fn rbuf(&self) -> &Buffer {
        &self.rbuf
    }

    /// Output not yet written.
    #[inline]
    pub fn wbuf(&self) -> &Buffer {
        &self.wbuf
    }

    /// Requests waiting for replies, in order.
    #[inline]
    pub fn inflight(&self) -> &VecDeque<Inflight> {
        &self.inflight
    }

    /// Queue a request's bytes (`write` appends them) and, unless it is
    /// answered nowhere, what waits for its reply; it counts as unsent
    /// and uncounted until written and counted.
    #[inline]
    pub fn queue(
        &mut self,
        waiter: Option<Waiter>,
        op: Op,
        write: impl FnOnce(&mut Vec<u8>),
        now: Instant,
        key: crate::stats::slowlog::KeyPrefix,
    ) -> Queued {
        let before = self.wbuf.len();
        self.wbuf.append_with(write);
        let len = self.wbuf.len() - before;
        self.queued(waiter, op, len, before, now, key)
    }

    /// Queue a request that goes as it came (`bytes`), as `queue` does,
    /// first writing what the socket takes of it straight from `bytes`
    /// when nothing waits to be written before it: the connection is open,
    /// not TLS, and sends no streamed or fed request. Only the rest is
    /// copied. A write error leaves the bytes queued, for the next write
    /// to meet and handle.
    #[inline]
    pub fn queue_through(
        &mut self,
        waiter: Option<Waiter>,
        op: Op,
        bytes: &[u8],
        now: Instant,
        key: crate::stats::slowlog::KeyPrefix,
    ) -> Queued {
        let before = self.wbuf.len();
        let open = self.state == ServerState::Connected && !self.sock.is_tls();
        let n = if before == 0 && open && self.stream.is_none() && self.feed.is_none() {
            self.sock.write(bytes).unwrap_or(0)
        } else {
            0
        };
        self.wbuf.extend(&bytes[n..]);
        self.queued(waiter, op, bytes.len(), before, now, key)
    }

    /// A request of `len` bytes was queued after `before` bytes of output:
    /// what waits for its reply, and its counts (see `queue`).
    #[inline]
    fn queued(
        &mut self,
        waiter: Option<Waiter>,
        op: Op,
        len: usize,
        before: usize,
        now: Instant,
        key: crate::stats::slowlog::KeyPrefix,
    ) -> Queued {
        if len >= TLS_CUT_MIN {
            self.cut_tls();
        }
        if let Some(waiter) = waiter {
            self.inflight.push_back(Inflight {
                waiter,
                op,
                len,
                sent_at: now,
                timed_from: now,
                key,
            });
        }
        self.unsent += 1;
        self.unsent_bytes += len as u64;
        let first_uncounted = self.uncounted == 0;
        self.uncounted += 1;
        self.uncounted_bytes += len as u64;
        Queued {
            first_out: before == 0,
            first_uncounted,
        }
    }

    /// More bytes of the last request queued (a streamed one), appended by
    /// `write`: they count as unsent, and as that request's length when
    /// `is_last` says the last request waiting is it.
    #[inline]
    pub fn queue_more(
        &mut self,
        write: impl FnOnce(&mut Buffer),
        is_last: impl FnOnce(&Waiter) -> bool,
    ) -> usize {
        let before = self.wbuf.len();
        write(&mut self.wbuf);
        let n = self.wbuf.len() - before;
        self.unsent_bytes += n as u64;
        if let Some(e) = self.inflight.back_mut() {
            if is_last(&e.waiter) {
                e.len += n;
            }
        }
        n
    }

    /// Queue more of the kept request it is fed from `spool`, up to
    /// `high` bytes of output: the bytes queued (counted as unsent and as
    /// the last request's) and whether the spool is now queued whole (the
    /// feed then ends and the timeouts count from `now`). `None`: it is
    /// fed from nothing.
    pub fn feed_more(&mut self, spool: &Spool, high: usize, now: Instant) -> Option<(usize, bool)> {
        let f = self.feed.as_mut()?;
        let mut added = 0;
        while self.wbuf.len() < high {
            let piece = f.at.piece(spool);
            if piece.is_empty() {
                break;
            }
            self.wbuf.extend(piece);
            f.at.advance(spool, piece.len());
            added += piece.len();
        }
        let done = f.at.remaining(spool) == 0;
        self.unsent_bytes += added as u64;
        // The request is the connection's last.
        if let Some(e) = self.inflight.back_mut() {
            e.len += added;
        }
        if done {
            self.feed = None;
            self.restart_timeouts(now);
        }
        Some((added, done))
    }

    /// TLS: what is queued so far is written apart from what follows (a
    /// large request ends here).
    #[inline]
    pub fn cut_tls(&mut self) {
        if self.tls_cut == 0 && self.sock.is_tls() {
            self.tls_cut = self.wbuf.len();
        }
    }

    /// Every request waiting has its timeout count from `now` (a streamed
    /// request before them was queued whole).
    pub fn restart_timeouts(&mut self, now: Instant) {
        for e in self.inflight.iter_mut() {
            e.timed_from = now;
        }
    }

    /// Write as much output as the socket takes (a TLS cut apart).
    #[inline]
    pub fn write_out(&mut self) -> io::Result<()> {
        while !self.wbuf.is_empty() {
            let end = if self.tls_cut > 0 {
                self.tls_cut.min(self.wbuf.len())
            } else {
                self.wbuf.len()
            };
            match self.sock.write(&self.wbuf.bytes()[..end]) {
                Ok(0) => break,
                Ok(n) => {
                    self.wbuf.consume(n);
                    self.tls_cut = self.tls_cut.saturating_sub(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Read up to `chunk` more bytes of input: bytes read, and whether the
    /// read came short.
    #[inline]
    pub fn read_in(&mut self, chunk: usize) -> io::Result<(usize, bool)> {
        self.rbuf.read_stream(&mut self.sock, chunk)
    }

    /// Whether a request of someone other than `client` waits on this
    /// connection behind the reply being read (another client's, or the
    /// proxy's own): the connection is then shared, and not to be held
    /// back for `client`.
    pub fn others_wait(&self, client: Option<ClientRef>) -> bool {
        self.inflight
            .iter()
            .skip(1)
            .any(|f| match (f.waiter, client) {
                (Waiter::Client { token, id, .. }, Some(c)) => token != c.token || id != c.id,
                _ => true,
            })
    }

    /// The output was written whole: the unsent requests are now sent
    /// (the requests and bytes moved, none when nothing was unsent).
    #[inline]
    fn all_written(&mut self) -> Option<Moved> {
        if !self.wbuf.is_empty() || (self.unsent == 0 && self.unsent_bytes == 0) {
            return None;
        }
        let moved = (self.unsent, self.unsent_bytes);
        self.sent += moved.0;
        self.sent_bytes += moved.1;
        self.unsent = 0;
        self.unsent_bytes = 0;
        Some(moved)
    }

    /// The requests and bytes queued since the last count, now counted.
    #[inline]
    fn take_uncounted(&mut self) -> Option<Moved> {
        if self.uncounted == 0 && self.uncounted_bytes == 0 {
            return None;
        }
        let n = (self.uncounted, self.uncounted_bytes);
        self.uncounted = 0;
        self.uncounted_bytes = 0;
        Some(n)
    }

    /// Add the requests queued since the last count to the shared
    /// counters (requests and request bytes, the in_queue gauges).
    /// Counting once per pass and connection, not per request, keeps a
    /// pipelined batch from writing the same four shared words once per
    /// request; readers see them at most one pass of the loop late.
    #[inline]
    pub fn count_queued(&mut self, stats: &StatsSlot<'_>) {
        let Some((n, b)) = self.take_uncounted() else {
            return;
        };
        let (pool, server) = (self.pool, self.server);
        stats.server_add(pool, server, ServerField::Requests, n);
        stats.server_add(pool, server, ServerField::RequestBytes, b);
        stats.server_add(pool, server, ServerField::InQueue, n);
        stats.server_add(pool, server, ServerField::InQueueBytes, b);
    }

    /// The output was written whole ([`Server::all_written`]): what was
    /// unsent moves from the in_queue gauges to the out_queue ones.
    #[inline]
    pub fn count_written(&mut self, stats: &StatsSlot<'_>) {
        let Some((n, b)) = self.all_written() else {
            return;
        };
        let (pool, server) = (self.pool, self.server);
        stats.server_sub(pool, server, ServerField::InQueue, n);
        stats.server_sub(pool, server, ServerField::InQueueBytes, b);
        stats.server_add(pool, server, ServerField::OutQueue, n);
        stats.server_add(pool, server, ServerField::OutQueueBytes, b);
    }

    /// The connection closes: it leaves the connection count, and what it
    /// still holds leaves the queue gauges.
    pub fn leave_gauges(&mut self, stats: &StatsSlot<'_>) {
        self.count_queued(stats);
        let (pool, server) = (self.pool, self.server);
        stats.server_sub(pool, server, ServerField::ServerConnections, 1);
        stats.server_sub(pool, server, ServerField::InQueue, self.unsent);
        stats.server_sub(pool, server, ServerField::InQueueBytes, self.unsent_bytes);
        stats.server_sub(pool, server, ServerField::OutQueue, self.sent);
        stats.server_sub(pool, server, ServerField::OutQueueBytes, self.sent_bytes);
    }

    /// The request at the head was answered: it leaves the queue and the
    /// sent gauges.
    #[inline]
    pub fn pop_answered(&mut self) -> Option<Inflight> {
        let front = self.inflight.pop_front()?;
        self.sent = self.sent.saturating_sub(1);
        self.sent_bytes = self.sent_bytes.saturating_sub(front.len as u64);
        Some(front)
    }

    /// Every request still waiting, taken out (the connection closes).
    pub fn take_inflight(&mut self) -> VecDeque<Inflight> {
        std::mem::take(&mut self.inflight)
    }

    /// The input, taken out to parse while the worker is changed (put back
    /// by [`Server::put_rbuf`]).
    #[inline]
    pub fn take_rbuf(&mut self) -> Buffer {
        std::mem::take(&mut self.rbuf)
    }

    /// The input back, with how many bytes it needs before it is parsed
    /// again.
    #[inline]
    pub fn put_rbuf(&mut self, rbuf: Buffer, need: usize) {
        self.rbuf = rbuf;
        self.need = need;
    }

    /// The input is too short to parse again yet.
    #[inline]
    pub fn needs_more(&self) -> bool {
        self.rbuf.len() < self.need
    }

    /// A timeout timer is armed.
    #[inline]
    pub fn timer_armed(&self) -> bool {
        self.timer_armed
    }

    /// Note whether a timeout timer is armed (set when one is, cleared as
    /// it fires).
    #[inline]
    pub fn set_timer_armed(&mut self, armed: bool) {
        self.timer_armed = armed;
    }

    /// Its timer fired at `now`, the pool's timeout being `timeout`: it is
    /// armed again (for the oldest request's deadline, or a whole timeout
    /// on while a large value moves, which is never cut), or nothing is
    /// timed, or the oldest request timed out.
    pub fn timer_fired(&mut self, timeout: Option<Duration>, now: Instant) -> TimerStep {
        self.timer_armed = false;
        if self.blocking {
            // BLPOP k 60 waits as long as it asked: the server answers it.
            return TimerStep::Idle;
        }
        let Some(timeout) = timeout else {
            return TimerStep::Idle;
        };
        let deadline = if self.moving_large() {
            // A large value is moving: no timeout while it does.
            now + timeout
        } else {
            let Some(front) = self.inflight.front() else {
                return TimerStep::Idle;
            };
            let deadline = front.timed_from + timeout;
            if deadline <= now {
                return TimerStep::TimedOut;
            }
            deadline
        };
        self.timer_armed = true;
        TimerStep::Arm(deadline)
    }

    /// A large request being streamed to it.
    #[inline]
    pub fn stream(&self) -> Option<&SrvStream> {
        self.stream.as_ref()
    }

    /// Start or end (`None`) streaming a large request to it.
    #[inline]
    pub fn set_stream(&mut self, stream: Option<SrvStream>) -> Option<SrvStream> {
        std::mem::replace(&mut self.stream, stream)
    }

    /// The large request streamed to it was queued whole: it ends a TLS
    /// record run, and the requests waiting have their timeouts count from
    /// `now`.
    pub fn end_stream(&mut self, now: Instant) {
        self.stream = None;
        self.cut_tls();
        self.restart_timeouts(now);
    }

    /// A large reply being streamed from it.
    #[inline]
    pub fn rstream(&self) -> Option<&RepStream> {
        self.rstream.as_ref()
    }

    /// [`Server::rstream`], to change it.
    #[inline]
    pub fn rstream_mut(&mut self) -> Option<&mut RepStream> {
        self.rstream.as_mut()
    }

    /// The large reply being streamed from it, with the input it is read
    /// from.
    #[inline]
    pub fn rstream_and_input(&mut self) -> Option<(&mut RepStream, &Buffer)> {
        Some((self.rstream.as_mut()?, &self.rbuf))
    }

    /// The first `n` bytes of input were handled.
    #[inline]
    pub fn consume_input(&mut self, n: usize) {
        self.rbuf.consume(n);
    }

    /// Start or end (`None`) streaming a large reply from it; the one it
    /// replaces.
    #[inline]
    pub fn set_rstream(&mut self, rstream: Option<RepStream>) -> Option<RepStream> {
        std::mem::replace(&mut self.rstream, rstream)
    }

    /// A kept request being sent again on it from its spool.
    #[inline]
    pub fn feed(&self) -> Option<&Feed> {
        self.feed.as_ref()
    }

    /// Whether its output is refilled from a spool after a write: it is
    /// fed from one and connected (`Some`, with whether all it was sent
    /// went out, so it may be written again at once).
    #[inline]
    pub fn refills(&self) -> Option<bool> {
        (self.feed.is_some() && !self.is_connecting()).then(|| self.wbuf.is_empty())
    }

    /// Start or end (`None`) sending a kept request again on it.
    #[inline]
    pub fn set_feed(&mut self, feed: Option<Feed>) {
        self.feed = feed;
    }

    /// A large value moves on it (no timeout while it does).
    #[inline]
    pub fn moving_large(&self) -> bool {
        self.stream.is_some() || self.rstream.is_some() || self.feed.is_some()
    }

    /// A connection of its own: closed once answered.
    #[inline]
    pub fn is_dedicated(&self) -> bool {
        self.dedicated
    }

    /// Take no new request: close once answered. True when nothing is
    /// owed already: it closes now.
    #[inline]
    pub fn retire_when_answered(&mut self) -> bool {
        self.dedicated = true;
        self.is_done()
    }

    /// Nothing is waiting on it, moving on it, or left to parse.
    #[inline]
    pub fn is_done(&self) -> bool {
        self.inflight.is_empty() && self.stream.is_none() && self.rbuf.is_empty()
    }

    /// It now carries a blocking command.
    #[inline]
    pub fn set_blocking(&mut self) {
        self.blocking = true;
    }

    /// The client it is pinned to.
    #[inline]
    pub fn pinned(&self) -> Option<Token> {
        self.pinned
    }

    /// Pin it to a client's transaction, or unpin it (`None`).
    #[inline]
    pub fn pin(&mut self, client: Option<Token>) {
        self.pinned = client;
    }

    /// The subscriber whose pushes it carries (token, id).
    #[inline]
    pub fn push_to(&self) -> Option<ClientRef> {
        self.push_to
    }

    /// Carry the pushes of subscriber `id` at `client` (and be pinned to it).
    pub fn subscribe_for(&mut self, client: Token, id: u64) {
        self.push_to = Some(ClientRef::new(client, id));
        self.pinned = Some(client);
    }
}

#[cfg(test)]
#[path = "server_conn_tests.rs"]
mod tests;
