//! A client connection: its socket, buffers and ordered reply slots, and
//! the per-feature state (a streamed request, a held request, a
//! transaction, subscriptions), private and changed through its methods.
//! When it is read and parsed is `client_flow.rs`, a module of this one.

use super::buffer::Buffer;
use super::conn::BufPool;
use super::conn::{ReplySlot, ReqStream, HELD_HIGH};
use super::handle::ServerRef;
use super::subscriber::Subs;
use super::{conn_state::Gate, transaction::Txn};
use crate::net::Stream;
use crate::proto::redis::local::Session;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

#[path = "client_flow.rs"]
mod flow;
#[path = "client_left.rs"]
mod left;
#[path = "client_limit.rs"]
mod limit;
#[path = "client_write.rs"]
mod write;
pub use flow::{AfterRead, InputPass};
pub use write::{AfterWrite, WriteClose};

/// What [`Client::hold_output`] decided for the queued output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Write it now.
    Write,
    /// It begins to wait for the rest of its batch.
    Begin,
    /// It goes on waiting.
    Keep,
}

/// A client connection. Every field is private, changed through its
/// methods, so what the data path does to a client (read, queue a reply,
/// write, hold a request) is named in one place.
///
/// An idle client holds this struct and nothing else: its input and
/// output buffers and its reply queue are lent back to the worker's
/// [`BufPool`] once empty, and the state of the rarer features is boxed
/// in [`Rare`], dropped once empty (see `idle_client_size` in the tests
/// for the byte budget).
#[derive(Debug)]
pub struct Client {
    /// Socket.
    sock: Stream,
    /// Unique id (tokens are reused; ids are not).
    id: u64,
    /// Pool index.
    pool: usize,
    /// Unparsed input.
    rbuf: Buffer,
    /// Do not parse again until `rbuf` holds this many bytes.
    need: usize,
    /// Input bytes still to discard (the data block of a rejected
    /// oversized value, as memcached swallows it).
    swallow: usize,
    /// Output not yet written.
    wbuf: Buffer,
    /// Replies in request order; `pending[0]` has sequence number
    /// `head_seq`. Lent from the pool when input is read, given back once
    /// empty with the output written (`return_idle_output`).
    pending: VecDeque<ReplySlot>,
    /// Sequence number of `pending[0]`.
    head_seq: u64,
    /// Sequence number of the first request of the latest batch (the
    /// requests taken from one parse of the input): replies queued while
    /// more of that batch are owed may wait for them (`hold_output`).
    batch_start: u64,
    /// Since when the queued output has been held back for the rest of
    /// its batch (None: not held).
    held_since: Option<Instant>,
    /// Peer closed its side: finish replies, then close.
    eof: bool,
    /// Stop reading: a quit or fatal error is queued.
    closing: bool,
    /// Reading paused: too many requests in flight (resumed as they drain).
    paused: bool,
    /// Reading stopped before the socket was drained (paused, gated, a
    /// stream blocked, handing over): edge-triggered epoll will not report
    /// those bytes again, so the client is read as soon as it may read.
    unread: bool,
    /// Parse nothing more until the read of a moved key, asked where the
    /// key is (`PoolRt::moving`, a `Moving::Read`), is answered: a later write of
    /// the key must not overtake it; as nothing is parsed meanwhile, a
    /// client has one such read at a time. A flag, not a `Gate`: it is
    /// every moved read's cost while a pool migrates.
    moved_read: bool,
    /// Parse nothing more until every reply is written: a streamed request
    /// goes on a connection of its own, so it starts only once the earlier
    /// requests are answered and the next ones wait for its reply (one
    /// client's requests never overtake each other).
    solo: bool,
    /// Redis session state (AUTH done, protocol version, name).
    session: Session,
    /// Last activity (idle timeout). Until a TLS client's handshake ends
    /// it is when the client connected (the handshake's timeout counts
    /// from there): nothing touches a client before it has read plaintext.
    last_active: Instant,
    /// The state of its rarer features; `None` when none is in use.
    rare: Option<Box<Rare>>,
}

/// A client's state for the features few clients use at a time, boxed
/// apart so that an ordinary client does not carry it, and dropped once
/// it is empty again: every `Client` method that empties a field tidies.
#[derive(Debug, Default)]
struct Rare {
    /// A large request being passed to its server as it arrives.
    stream: Option<ReqStream>,
    /// A server whose reading is paused until this client's output drains
    /// (a large reply streamed to it), with that server's id.
    rstream_from: Option<ServerRef>,
    /// A request held while its moved keys are pulled to their new owner
    /// (a migrating pool): nothing more is parsed until it goes on.
    gate: Option<Box<Gate>>,
    /// Server connections of its blocking requests (token, connection id):
    /// closed with the client, so a client gone while blocked frees them.
    blocked: Vec<ServerRef>,
    /// A Redis transaction under way (see `txn.rs`).
    txn: Option<Box<Txn>>,
    /// Pub/sub subscriptions (see `pubsub.rs`).
    subs: Option<Box<Subs>>,
}

impl Rare {
    /// Nothing in it: the box can go.
    fn is_empty(&self) -> bool {
        self.stream.is_none()
            && self.rstream_from.is_none()
            && self.gate.is_none()
            && self.blocked.is_empty()
            && self.txn.is_none()
            && self.subs.is_none()
    }
}

impl Client {
    /// A client just accepted (or carried over) on `sock`.
    pub fn new(sock: Stream, id: u64, pool: usize, session: Session, now: Instant) -> Client {
        Client {
            sock,
            id,
            pool,
            rbuf: Buffer::default(),
            need: 0,
            swallow: 0,
            wbuf: Buffer::default(),
            pending: VecDeque::new(),
            head_seq: 0,
            batch_start: 0,
            held_since: None,
            eof: false,
            closing: false,
            paused: false,
            unread: false,
            moved_read: false,
            solo: false,
            session,
            last_active: now,
            rare: None,
        }
    }

    /// Its rarer state, boxed on first use.
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drop the rarer state's box once nothing is left in it.
    #[inline]
    fn tidy(&mut self) {
        if self.rare.as_ref().is_some_and(|r| r.is_empty()) {
            self.rare = None;
        }
    }

    /// Its socket.
    #[inline]
    pub fn sock(&self) -> &Stream {
        &self.sock
    }

    /// [`Client::sock`], to change it (deregister, flush TLS).
    #[inline]
    pub fn sock_mut(&mut self) -> &mut Stream {
        &mut self.sock
    }

    /// The client leaves this worker whole (handed over): its socket, and
    /// the output not yet written.
    pub fn into_sock_and_output(self) -> (Stream, Buffer) {
        (self.sock, self.wbuf)
    }

    /// Unparsed input.
    #[inline]
    pub fn input(&self) -> &Buffer {
        &self.rbuf
    }

    /// Read from the socket into the input (a buffer lent from `bufs` if
    /// it has none): bytes read and whether the read was short.
    #[inline]
    pub fn read_input(&mut self, bufs: &mut BufPool, chunk: usize) -> io::Result<(usize, bool)> {
        if self.rbuf.capacity() == 0 {
            self.rbuf = bufs.take();
        }
        if self.pending.capacity() == 0 {
            // What it reads may be requests: their replies need a queue.
            // The queue replaced holds no memory: nothing to drop.
            std::mem::forget(std::mem::replace(&mut self.pending, bufs.take_replies()));
        }
        self.rbuf.read_stream(&mut self.sock, chunk)
    }

    /// Drop the first `n` bytes of input (passed on or kept).
    #[inline]
    pub fn consume_input(&mut self, n: usize) {
        self.rbuf.consume(n);
    }

    /// The input, taken to parse while the worker is borrowed; given back
    /// with [`Client::put_input`].
    #[inline]
    pub fn take_input(&mut self) -> Buffer {
        std::mem::take(&mut self.rbuf)
    }

    /// Give back the input taken by [`Client::take_input`] (or carried
    /// over from a predecessor).
    #[inline]
    pub fn put_input(&mut self, rbuf: Buffer) {
        self.rbuf = rbuf;
    }

    /// Lend an empty input buffer back to `bufs`: idle clients hold no
    /// memory.
    #[inline]
    pub fn return_idle_input(&mut self, bufs: &mut BufPool) {
        if self.rbuf.is_empty() && self.rbuf.capacity() > 0 {
            bufs.give(std::mem::take(&mut self.rbuf));
        }
    }

    /// Output not yet written.
    #[inline]
    pub fn output(&self) -> &Buffer {
        &self.wbuf
    }

    /// Bytes of output not yet written.
    #[inline]
    pub fn out_len(&self) -> usize {
        self.wbuf.len()
    }

    /// Some output is not yet written.
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// Give the output a buffer from `bufs` if it has none.
    #[inline]
    pub fn ensure_output(&mut self, bufs: &mut BufPool) {
        if self.wbuf.capacity() == 0 {
            self.wbuf = bufs.take();
        }
    }

    /// Queue `bytes` for writing (a buffer lent from `bufs` if it has none).
    #[inline]
    pub fn queue_output(&mut self, bytes: &[u8], bufs: &mut BufPool) {
        self.ensure_output(bufs);
        self.wbuf.extend(bytes);
    }

    /// Write `bytes` straight to the socket when no output waits before
    /// them and the connection is not TLS: how many the socket took. 0
    /// when it took none, or on an error, which the next write of the
    /// queued rest meets again and handles.
    #[inline]
    pub fn write_through(&mut self, bytes: &[u8]) -> usize {
        if !self.wbuf.is_empty() || self.sock.is_tls() {
            return 0;
        }
        self.sock.write(bytes).unwrap_or(0)
    }

    /// Write what the socket takes of the output in one call; the bytes
    /// written.
    #[inline]
    pub fn write_output(&mut self) -> io::Result<usize> {
        let n = self.sock.write(self.wbuf.bytes())?;
        self.wbuf.consume(n);
        if self.wbuf.is_empty() {
            self.held_since = None;
        }
        Ok(n)
    }

    /// The requests from sequence number `first` on were taken from one
    /// parse of the input: if there are any, they are the latest batch.
    #[inline]
    pub fn batch_from(&mut self, first: u64) {
        if self.next_seq() > first {
            self.batch_start = first;
        }
    }

    /// Whether the queued output waits, at the end of a pass at `now`, for
    /// more replies of its batch rather than being written now (see
    /// `worker/reply_hold.rs`): only while the first reply owed is one of
    /// the latest batch's and will come from a server unprompted (not a
    /// blocking command, a subscription, a transaction, a streamed or
    /// gated request), the output is under `max` bytes, and it has waited
    /// less than `bound`.
    #[inline]
    pub fn hold_output(&mut self, now: Instant, bound: Duration, max: usize) -> Hold {
        let owed_in_batch = self.head_seq > self.batch_start
            && self.pending.front().is_some_and(|s| !s.ready)
            && !self.wbuf.is_empty()
            && self.wbuf.len() < max;
        // `rare`: a streamed, gated, blocking, subscribed or transaction
        // request, or a streamed reply (its box is dropped once empty).
        if !owed_in_batch || self.closing || self.eof || self.solo || self.rare.is_some() {
            self.held_since = None;
            return Hold::Write;
        }
        match self.held_since {
            None => {
                self.held_since = Some(now);
                Hold::Begin
            }
            Some(since) if now.saturating_duration_since(since) < bound => Hold::Keep,
            Some(_) => {
                self.held_since = None;
                Hold::Write
            }
        }
    }

    /// Lend an empty output buffer back to `bufs`, and the reply queue
    /// too once no reply is owed: an idle client holds neither.
    #[inline]
    pub fn return_idle_output(&mut self, bufs: &mut BufPool) {
        if self.wbuf.is_empty() && self.wbuf.capacity() > 0 {
            bufs.give(std::mem::take(&mut self.wbuf));
        }
        if self.pending.is_empty() && self.pending.capacity() > 0 {
            bufs.give_replies(std::mem::take(&mut self.pending));
        }
    }

    /// Redis session state.
    #[inline]
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// [`Client::session`], to change it (AUTH, HELLO, a handover).
    #[inline]
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// A subscriber or a transaction: it holds state a server connection
    /// of its own carries, so it cannot move to another worker.
    #[inline]
    pub fn is_stateful(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| r.subs.is_some() || r.txn.is_some())
    }

    /// The large request being passed to its server as it arrives.
    #[inline]
    pub fn stream(&self) -> Option<&ReqStream> {
        self.rare.as_ref()?.stream.as_ref()
    }

    /// [`Client::stream`], to change it.
    #[inline]
    pub fn stream_mut(&mut self) -> Option<&mut ReqStream> {
        self.rare.as_mut()?.stream.as_mut()
    }

    /// The streamed request with the input it passes on, lent together.
    #[inline]
    pub fn stream_and_input(&mut self) -> Option<(&mut ReqStream, &mut Buffer)> {
        Some((self.rare.as_mut()?.stream.as_mut()?, &mut self.rbuf))
    }

    /// Replace its session state (carried over from a predecessor worker).
    #[inline]
    pub fn set_session(&mut self, session: Session) {
        self.session = session;
    }

    /// A large request starts passing to its server.
    #[inline]
    pub fn start_stream(&mut self, rs: ReqStream) {
        self.rare().stream = Some(rs);
    }

    /// The streamed request ended (or the client goes): its state, taken.
    #[inline]
    pub fn take_stream(&mut self) -> Option<ReqStream> {
        let rs = self.rare.as_mut()?.stream.take();
        self.tidy();
        rs
    }

    /// The request held while its moved keys are pulled.
    #[inline]
    pub fn gate(&self) -> Option<&Gate> {
        self.rare.as_ref()?.gate.as_deref()
    }

    /// [`Client::gate`], to change it.
    #[inline]
    pub fn gate_mut(&mut self) -> Option<&mut Gate> {
        self.rare.as_mut()?.gate.as_deref_mut()
    }

    /// Hold a request until its moved keys are pulled.
    #[inline]
    pub fn set_gate(&mut self, gate: Box<Gate>) {
        self.rare().gate = Some(gate);
    }

    /// The held request goes on (or the client goes): the gate, taken.
    #[inline]
    pub fn take_gate(&mut self) -> Option<Box<Gate>> {
        let gate = self.rare.as_mut()?.gate.take();
        self.tidy();
        gate
    }

    /// Hold its next requests until the read of a moved key it just
    /// queued is answered ([`Client::read_settled`]).
    #[inline]
    pub fn hold_for_read(&mut self) {
        self.moved_read = true;
    }

    /// The transaction under way.
    #[inline]
    pub fn txn(&self) -> Option<&Txn> {
        self.rare.as_ref()?.txn.as_deref()
    }

    /// [`Client::txn`], to change it.
    #[inline]
    pub fn txn_mut(&mut self) -> Option<&mut Txn> {
        self.rare.as_mut()?.txn.as_deref_mut()
    }

    /// The transaction, taken (it ends, or is worked on outside the client).
    #[inline]
    pub fn take_txn(&mut self) -> Option<Box<Txn>> {
        let txn = self.rare.as_mut()?.txn.take();
        self.tidy();
        txn
    }

    /// Put back (or start, or end with `None`) its transaction.
    #[inline]
    pub fn set_txn(&mut self, txn: Option<Box<Txn>>) {
        if txn.is_some() {
            self.rare().txn = txn;
        } else if let Some(r) = self.rare.as_mut() {
            r.txn = None;
            self.tidy();
        }
    }

    /// The connection `r` its transaction is pinned to was lost, and the
    /// server's WATCH and MULTI state with it: the transaction ends and
    /// the client closes once the errors of its requests in flight are
    /// written: carrying on would run its next commands outside the
    /// transaction it believes it is in, or send them to a connection
    /// that no longer exists. False when `r` is not its transaction's.
    pub fn txn_lost(&mut self, r: ServerRef) -> bool {
        if self.txn().is_none_or(|t| t.conn() != Some(r)) {
            return false;
        }
        self.set_txn(None);
        self.close_after_replies();
        true
    }

    /// Its subscriptions.
    #[inline]
    pub fn subs(&self) -> Option<&Subs> {
        self.rare.as_ref()?.subs.as_deref()
    }

    /// [`Client::subs`], to change them.
    #[inline]
    pub fn subs_mut(&mut self) -> Option<&mut Subs> {
        self.rare.as_mut()?.subs.as_deref_mut()
    }

    /// Its subscriptions, taken (they change outside the client, or it goes).
    #[inline]
    pub fn take_subs(&mut self) -> Option<Box<Subs>> {
        let subs = self.rare.as_mut()?.subs.take();
        self.tidy();
        subs
    }

    /// Put back (or drop, with `None`) its subscriptions.
    #[inline]
    pub fn set_subs(&mut self, subs: Option<Box<Subs>>) {
        if subs.is_some() {
            self.rare().subs = subs;
        } else if let Some(r) = self.rare.as_mut() {
            r.subs = None;
            self.tidy();
        }
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

    /// When it connected, while its TLS handshake goes on (see
    /// `last_active`).
    #[inline]
    pub fn opened(&self) -> Instant {
        debug_assert!(self.sock.is_handshaking());
        self.last_active
    }

    /// Last activity.
    #[inline]
    pub fn last_active(&self) -> Instant {
        self.last_active
    }

    /// It was active (read from, or busy) at `now`.
    #[inline]
    pub fn touch(&mut self, now: Instant) {
        debug_assert!(!self.sock.is_handshaking(), "touched in its TLS handshake");
        self.last_active = now;
    }

    /// Sequence number of the first pending reply.
    #[inline]
    pub fn head_seq(&self) -> u64 {
        self.head_seq
    }

    /// The first pending reply was written straight to the output: the
    /// next one is now first.
    #[inline]
    pub fn pop_head(&mut self) {
        self.pending.pop_front();
        self.head_seq += 1;
    }

    /// The server whose streamed reply waits for this client's output to
    /// drain.
    #[inline]
    pub fn rstream_from(&self) -> Option<ServerRef> {
        self.rare.as_ref()?.rstream_from
    }

    /// A streamed reply from `server` waits until the output drains.
    #[inline]
    pub fn wait_on_reply(&mut self, server: ServerRef) {
        self.rare().rstream_from = Some(server);
    }

    /// The output drained some: the server whose streamed reply waits for
    /// it, and whether it is below `low` (the server is then let go).
    #[inline]
    pub fn drained_below(&mut self, low: usize) -> Option<(ServerRef, bool)> {
        let from = self.rare.as_ref()?.rstream_from?;
        let released = self.wbuf.len() < low;
        if released {
            self.release_reply_wait();
        }
        Some((from, released))
    }

    /// No streamed reply waits for it any more (it ended, or the client
    /// goes): the server it waited on, if one did.
    #[inline]
    pub fn release_reply_wait(&mut self) -> Option<ServerRef> {
        let from = self.rare.as_mut()?.rstream_from.take();
        self.tidy();
        from
    }

    /// Server connections of its blocking requests.
    #[inline]
    pub fn blocked(&self) -> &[ServerRef] {
        self.rare.as_ref().map_or(&[], |r| &r.blocked)
    }

    /// A blocking request went on `conn`: its connections are now `live`
    /// (those of earlier ones still open) and `conn`.
    pub fn block_on(&mut self, live: Vec<ServerRef>, conn: ServerRef) {
        let rare = self.rare();
        rare.blocked = live;
        rare.blocked.push(conn);
    }

    /// The connections of its blocking requests, taken (it closes).
    pub fn take_blocked(&mut self) -> Vec<ServerRef> {
        let Some(r) = self.rare.as_mut() else {
            return Vec::new();
        };
        let blocked = std::mem::take(&mut r.blocked);
        self.tidy();
        blocked
    }

    /// The connections it holds for itself alone, taken (it closes):
    /// its transaction's, its push connections, its blocking requests'.
    pub fn take_own_conns(&mut self) -> Vec<ServerRef> {
        let mut own: Vec<ServerRef> = self.take_txn().and_then(|t| t.conn()).into_iter().collect();
        own.extend(
            self.take_subs()
                .into_iter()
                .flat_map(|s| s.conns)
                .map(|(_, r)| r),
        );
        own.extend(self.take_blocked());
        own
    }

    /// Sequence number the next request gets.
    pub fn next_seq(&self) -> u64 {
        self.head_seq + self.pending.len() as u64
    }

    /// Some reply is still owed.
    #[inline]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The first reply owed, if any.
    #[inline]
    pub fn head(&self) -> Option<&ReplySlot> {
        self.pending.front()
    }

    /// Every reply owed, in request order.
    #[inline]
    pub fn slots(&self) -> impl Iterator<Item = &ReplySlot> {
        self.pending.iter()
    }

    /// A request was taken: its reply goes last (sequence `next_seq`).
    #[inline]
    pub fn push_reply(&mut self, slot: ReplySlot) {
        self.pending.push_back(slot);
    }

    /// Queue a reply the proxy composed itself (ready now); with
    /// `close_after`, the client closes once it is written.
    pub fn push_ready(&mut self, out: Vec<u8>, close_after: bool) {
        self.push_reply(ReplySlot {
            ready: true,
            out,
            close_after,
            ..ReplySlot::default()
        });
        if close_after {
            self.close_after_replies();
        }
    }

    /// A reply the proxy gives itself (PING, memcached's `version`, ...):
    /// straight into the output when no reply is waiting before it, so a
    /// fixed one costs no allocation. Returns the bytes put straight into
    /// the output (the worker counts them against its buffer budget), or
    /// `None` when the reply was queued behind the ones owed.
    pub fn push_local(
        &mut self,
        out: std::borrow::Cow<'static, [u8]>,
        bufs: &mut BufPool,
    ) -> Option<usize> {
        let out = match out {
            std::borrow::Cow::Borrowed(b) if !self.has_pending() => b,
            out => {
                self.push_ready(out.into_owned(), false);
                return None;
            }
        };
        self.queue_output(out, bufs);
        Some(out.len())
    }

    /// Copy the first `n` bytes of input into the spool of the request
    /// kept in its last slot (a streamed request that may be redirected).
    pub fn keep_input_in_last(&mut self, n: usize) {
        if let Some(sp) = self
            .pending
            .back_mut()
            .and_then(|s| s.redirect.as_mut())
            .and_then(|r| r.spool.as_mut())
        {
            sp.push(&self.rbuf.bytes()[..n]);
        }
    }

    /// The slot of sequence number `seq`, if still pending.
    #[inline]
    pub fn slot(&self, seq: u64) -> Option<&ReplySlot> {
        let i = seq.checked_sub(self.head_seq)?;
        self.pending.get(usize::try_from(i).ok()?)
    }

    /// The slot of sequence number `seq`, if still pending.
    pub fn slot_mut(&mut self, seq: u64) -> Option<&mut ReplySlot> {
        let i = seq.checked_sub(self.head_seq)?;
        self.pending.get_mut(i as usize)
    }

    /// Move every ready reply at the head into the output buffer (one
    /// lent from `bufs`, at its full size, if it has none: grown from
    /// nothing it would be reallocated several times a batch); returns
    /// the bytes moved.
    #[inline]
    pub fn drain_ready(&mut self, bufs: &mut BufPool) -> usize {
        // Checked inline: after a reply in order, nothing behind it is
        // ready nearly always (a reply from another server is).
        if !self.pending.front().is_some_and(|s| s.ready) {
            return 0;
        }
        self.drain_ready_slots(bufs)
    }

    #[inline(never)]
    fn drain_ready_slots(&mut self, bufs: &mut BufPool) -> usize {
        self.ensure_output(bufs);
        let before = self.wbuf.len();
        while let Some(front) = self.pending.front_mut() {
            if !front.ready {
                break;
            }
            if let Some(held) = front.held.as_mut() {
                let room = HELD_HIGH.saturating_sub(self.wbuf.len());
                held.drain_into(&mut self.wbuf, room);
                if !held.is_empty() {
                    break;
                }
            }
            let Some(slot) = self.pending.pop_front() else {
                break;
            };
            self.head_seq += 1;
            self.wbuf.extend(&slot.out);
            if slot.close_after {
                self.closing = true;
                self.pending.clear();
                break;
            }
        }
        self.wbuf.len() - before
    }
}

impl Read for Client {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.read(buf)
    }
}

#[cfg(test)]
#[path = "client_conn_tests.rs"]
mod tests;
