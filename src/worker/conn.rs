//! Connection state: clients, servers, and the per-request slots that keep
//! a client's replies in the order it sent its requests.

use super::buffer::Buffer;
pub use super::handle::ServerRef;
pub use super::server_conn::Server;
use super::spool::{Spool, SpoolReader};
use crate::net::Stream;
use crate::proto::{Op, Request};
use mio::Token;
use std::collections::VecDeque;
use std::time::Instant;

/// A reply being assembled for one client request, in request order.
#[derive(Debug, Default)]
pub struct ReplySlot {
    /// The reply is complete and can be written once earlier slots are.
    pub ready: bool,
    /// Reply bytes (empty until ready, except for a direct write).
    pub out: Vec<u8>,
    /// Close the client once this reply is written (quit, fatal error).
    pub close_after: bool,
    /// Fragments of a multi-key or broadcast request.
    pub multi: Option<Box<Multi>>,
    /// A read on a replicated pool: the other replicas to try on failure.
    pub retry: Option<Box<Retry>>,
    /// A request to a Redis Cluster: kept to follow MOVED and ASK.
    pub redirect: Option<Box<Redirect>>,
    /// A large reply held in chunks (instead of `out`): it passes to the
    /// client's output as that drains, at most [`HELD_HIGH`] at a time.
    pub held: Option<Box<Spool>>,
}

/// Most output a client gets from held replies before it drains it.
pub const HELD_HIGH: usize = 1024 * 1024;

/// A Redis Cluster request kept until its reply, to be sent again to the
/// node a `-MOVED` or `-ASK` names.
#[derive(Debug)]
pub struct Redirect {
    /// The request.
    pub req: Request,
    /// Its bytes (of a streamed request: its head, up to the large value).
    pub bytes: Vec<u8>,
    /// Redirections followed so far.
    pub hops: u8,
    /// TRYAGAIN replies waited out so far.
    pub tries: u8,
    /// A streamed request: every byte of it, kept in chunks as it passed
    /// (see `worker/cluster_stream.rs`).
    pub spool: Option<Spool>,
    /// The dedicated connection (and its id) it is being sent again on,
    /// from `spool`.
    pub feeding: Option<ServerRef>,
}

/// What a failed read of a replicated pool needs to be sent again.
#[derive(Debug)]
pub struct Retry {
    /// The request.
    pub req: Request,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The replicas, in the order they are tried.
    pub replicas: Vec<usize>,
    /// Index of the next replica to try.
    pub next: usize,
}

/// How a request split across servers is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiMode {
    /// Keys split per server, replies merged in key order.
    Split,
    /// The same request to every server; replies merged by the protocol.
    Broadcast,
    /// A write to every replica: the reply of the first replica that
    /// answered (a replica that could not be reached does not fail it).
    Replicate,
    /// A zone pool's write with `zone_writes: async`: to every zone, one
    /// fragment each in zone order, answered as soon as the first zone
    /// that did not fail (not reached, or an error) has answered, without
    /// waiting for the zones after it: the local zone's reply while it is
    /// there, the next zone's when it is lost.
    Zones,
}

/// A multi-key (or broadcast) request waiting for its fragments.
#[derive(Debug)]
pub struct Multi {
    /// The parsed request (its key ranges point into `bytes`).
    pub req: Request,
    /// The request's bytes.
    pub bytes: Vec<u8>,
    /// Per fragment: the key indices it carries and its reply.
    pub frags: Vec<Fragment>,
    /// Fragments still to answer.
    pub remaining: usize,
    /// The first failure, as the error reply to send instead of a merge.
    pub error: Option<Vec<u8>>,
    /// How the replies are joined.
    pub mode: MultiMode,
}

/// One server's share of a multi-key request.
#[derive(Debug, Default)]
pub struct Fragment {
    /// Indices into the request's keys.
    pub keys: Vec<usize>,
    /// The server's reply.
    pub reply: Vec<u8>,
    /// Or, when it was large, the reply held in chunks.
    pub held: Option<Box<Spool>>,
    /// The server could not be reached (the reply is the error to send).
    pub failed: bool,
    /// Which replica of its keys this fragment went to (0 = the owner; in
    /// a zone pool, the zone, 0 = the local one).
    pub attempt: u8,
    /// Its reply came (or it failed).
    pub answered: bool,
    /// Redis Cluster redirections followed for this fragment.
    pub hops: u8,
    /// Redis Cluster TRYAGAIN replies waited out for this fragment.
    pub tries: u8,
    /// A zone pool's read of keys another zone's fragment missed: when it
    /// fails, its keys are misses rather than the request's error.
    pub fallback: bool,
}

/// A client connection. Its counters and flags are private, changed
/// through its methods; the buffers, reply slots and per-feature state
/// are still fields of the worker's data path.
#[derive(Debug)]
pub struct Client {
    /// Socket.
    pub sock: Stream,
    /// Unique id (tokens are reused; ids are not).
    id: u64,
    /// Pool index.
    pool: usize,
    /// Unparsed input.
    pub rbuf: Buffer,
    /// Do not parse again until `rbuf` holds this many bytes.
    need: usize,
    /// Input bytes still to discard (the data block of a rejected
    /// oversized value, as memcached swallows it).
    swallow: usize,
    /// Output not yet written.
    pub wbuf: Buffer,
    /// Replies in request order; `pending[0]` has sequence number `head_seq`.
    pub pending: VecDeque<ReplySlot>,
    /// Sequence number of `pending[0]`.
    head_seq: u64,
    /// Peer closed its side: finish replies, then close.
    eof: bool,
    /// Stop reading: a quit or fatal error is queued.
    closing: bool,
    /// Reading paused: too many requests in flight (resumed as they drain).
    paused: bool,
    /// Parse nothing more until every reply is written: a streamed request
    /// goes on a connection of its own, so it starts only once the earlier
    /// requests are answered and the next ones wait for its reply (one
    /// client's requests never overtake each other).
    solo: bool,
    /// Redis session state (AUTH done, protocol version, name).
    pub session: crate::proto::redis::local::Session,
    /// Last activity (idle timeout).
    last_active: Instant,
    /// When it connected (TLS handshake timeout).
    opened: Instant,
    /// A large request being passed to its server as it arrives.
    pub stream: Option<ReqStream>,
    /// A server whose reading is paused until this client's output drains
    /// (a large reply streamed to it), with that server's id.
    rstream_from: Option<ServerRef>,
    /// A request held while its moved keys are pulled to their new owner
    /// (a migrating pool): nothing more is parsed until it goes on.
    pub gate: Option<Box<super::conn_state::Gate>>,
    /// Server connections of its blocking requests (token, connection id):
    /// closed with the client, so a client gone while blocked frees them.
    blocked: Vec<ServerRef>,
    /// A Redis transaction under way (see `txn.rs`).
    pub txn: Option<Box<super::conn_state::Txn>>,
    /// Pub/sub subscriptions (see `pubsub.rs`).
    pub subs: Option<Box<super::conn_state::Subs>>,
}

/// A large request being forwarded as it arrives (Redis): its head went to
/// the server (or, before its key, to `held`); the rest passes from the
/// client's input to the server's output as its framing says.
#[derive(Debug)]
pub struct ReqStream {
    /// The request's framing: what each byte of the client's input is for.
    pub machine: crate::proto::redis::StreamMachine,
    /// The server connection and its id; `None`: the request already
    /// failed (no server), the rest of it is read and dropped.
    pub server: Option<ServerRef>,
    /// Not reading the client: the server's output is over the high mark.
    pub blocked: bool,
    /// An MSET sent pair by pair.
    pub pairs: Option<Box<PairStream>>,
    /// The start of a request whose large argument came before its key
    /// (an EVAL script), held in chunks until the key is read, then
    /// passed to the key's server as that connection drains.
    pub held: Option<Box<Spool>>,
}

/// An MSET with a large value, sent as one `MSET key value` per pair as
/// the pairs arrive; its reply joins theirs (a `Multi`, one fragment per
/// pair).
#[derive(Debug)]
pub struct PairStream {
    /// The client's slot for the joined reply.
    pub seq: u64,
    /// Per server: the connection of its own this MSET's pairs for that
    /// server go on, in order (a small pair never overtakes a large one
    /// for the same key), with its id.
    pub conns: Vec<(usize, ServerRef)>,
}

/// A (dedicated) server connection that carries a streamed request.
#[derive(Debug)]
pub struct SrvStream {
    /// The client sending it.
    pub client: Token,
    /// That client's id.
    pub client_id: u64,
}

/// A (dedicated) server connection a kept, streamed request is sent again
/// on from its spool (Redis Cluster, after MOVED or ASK), filled as the
/// connection's output drains.
#[derive(Debug)]
pub struct Feed {
    /// The client the request is of.
    pub client: Token,
    /// That client's id.
    pub client_id: u64,
    /// The request's sequence number (its slot holds the spool).
    pub seq: u64,
    /// How far the spool was queued.
    pub at: SpoolReader,
}

/// A large reply kept for a slot that cannot take it yet.
#[derive(Debug)]
pub struct Hold {
    /// The bytes so far.
    pub spool: Box<Spool>,
    /// The request's sequence number.
    pub seq: u64,
    /// Its fragment, for a split request.
    pub frag: Option<u32>,
}

/// A large reply (a bulk string, or an aggregate of any shape and size)
/// passed to its client as it arrives (the client was waiting for it at
/// the head of its replies).
#[derive(Debug)]
pub struct RepStream {
    /// The client and its id; `None` when it went away (the rest of the
    /// reply is read and dropped).
    pub client: Option<(Token, u64)>,
    /// Where the reply is: what was consumed of it, what it still owes.
    pub cursor: crate::proto::redis::ReplyCursor,
    /// Bytes of the reply handed on so far (to the client, or dropped).
    pub passed: usize,
    /// The reply cannot pass yet (an earlier reply of its client is still
    /// awaited, or it is one fragment of a split MGET): it is held in
    /// chunks and handed to its slot whole at the end.
    pub hold: Option<Hold>,
    /// Not reading the server: the client's output is over the high mark.
    pub blocked: bool,
    /// When bytes last passed (a client that stops reading is closed).
    pub progress: Instant,
}

impl Client {
    /// A client just accepted (or carried over) on `sock`.
    pub fn new(
        sock: Stream,
        id: u64,
        pool: usize,
        session: crate::proto::redis::local::Session,
        now: Instant,
    ) -> Client {
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
            eof: false,
            closing: false,
            paused: false,
            solo: false,
            session,
            last_active: now,
            opened: now,
            stream: None,
            rstream_from: None,
            gate: None,
            blocked: Vec::new(),
            txn: None,
            subs: None,
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

    /// When it connected.
    #[inline]
    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// Last activity.
    #[inline]
    pub fn last_active(&self) -> Instant {
        self.last_active
    }

    /// It was active (read from, or busy) at `now`.
    #[inline]
    pub fn touch(&mut self, now: Instant) {
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

    /// The peer closed its side.
    #[inline]
    pub fn is_eof(&self) -> bool {
        self.eof
    }

    /// Note that the peer closed its side.
    #[inline]
    pub fn set_eof(&mut self) {
        self.eof = true;
    }

    /// A quit or fatal error is queued: nothing more is read.
    #[inline]
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Read nothing more: close once the queued replies are written.
    #[inline]
    pub fn close_after_replies(&mut self) {
        self.closing = true;
    }

    /// Bytes of input to gather before parsing again.
    #[inline]
    pub fn need(&self) -> usize {
        self.need
    }

    /// Input bytes still to discard.
    #[inline]
    pub fn swallow(&self) -> usize {
        self.swallow
    }

    /// Discard the next `n` input bytes (carried over from a predecessor).
    #[inline]
    pub fn swallow_next(&mut self, n: usize) {
        self.swallow = n;
    }

    /// Discard what input is still to be swallowed; whether more is.
    #[inline]
    pub fn swallow_input(&mut self) -> bool {
        if self.swallow == 0 {
            return false;
        }
        let n = self.swallow.min(self.rbuf.len());
        self.rbuf.consume(n);
        self.swallow -= n;
        self.swallow > 0
    }

    /// Where a parse pass stopped: the input it needs before parsing
    /// again, the input still to discard, and whether reading pauses.
    #[inline]
    pub fn end_pass(&mut self, need: usize, swallow: usize, paused: bool) {
        self.need = need;
        self.swallow = swallow;
        self.paused = paused;
    }

    /// The input holds enough to parse again, and reading goes on.
    #[inline]
    pub fn ready_to_parse(&self) -> bool {
        self.rbuf.len() >= self.need && !self.closing
    }

    /// A streamed request goes next: nothing more is parsed until every
    /// earlier reply is written.
    #[inline]
    pub fn go_solo(&mut self) {
        self.solo = true;
    }

    /// The next request must wait for every earlier reply (a streamed one
    /// goes alone); once they are written, it no longer waits.
    #[inline]
    pub fn solo_waits(&mut self) -> bool {
        if !self.solo {
            return false;
        }
        if !self.pending.is_empty() {
            return true;
        }
        self.solo = false;
        false
    }

    /// Reading is paused (too many requests in flight).
    #[inline]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Resume reading a paused client once its replies drained below
    /// `max_inflight` (half of it, plus one) and `max_out` bytes of output
    /// (a solo client: all of them). Whether it was resumed.
    #[inline]
    pub fn resume_if_drained(&mut self, max_inflight: usize, max_out: usize) -> bool {
        if self.paused
            && self.pending.len() < max_inflight / 2 + 1
            && (!self.solo || self.pending.is_empty())
            && self.wbuf.len() < max_out
        {
            self.paused = false;
            return true;
        }
        false
    }

    /// The server whose streamed reply waits for this client's output to
    /// drain.
    #[inline]
    pub fn rstream_from(&self) -> Option<ServerRef> {
        self.rstream_from
    }

    /// A streamed reply from `server` waits until the output drains.
    #[inline]
    pub fn wait_on_reply(&mut self, server: ServerRef) {
        self.rstream_from = Some(server);
    }

    /// The output drained some: the server whose streamed reply waits for
    /// it, and whether it is below `low` (the server is then let go).
    #[inline]
    pub fn drained_below(&mut self, low: usize) -> Option<(ServerRef, bool)> {
        let from = self.rstream_from?;
        let released = self.wbuf.len() < low;
        if released {
            self.rstream_from = None;
        }
        Some((from, released))
    }

    /// No streamed reply waits for it any more (it ended, or the client
    /// goes): the server it waited on, if one did.
    #[inline]
    pub fn release_reply_wait(&mut self) -> Option<ServerRef> {
        self.rstream_from.take()
    }

    /// Server connections of its blocking requests.
    #[inline]
    pub fn blocked(&self) -> &[ServerRef] {
        &self.blocked
    }

    /// A blocking request went on `conn`: its connections are now `live`
    /// (those of earlier ones still open) and `conn`.
    pub fn block_on(&mut self, live: Vec<ServerRef>, conn: ServerRef) {
        self.blocked = live;
        self.blocked.push(conn);
    }

    /// The connections of its blocking requests, taken (it closes).
    pub fn take_blocked(&mut self) -> Vec<ServerRef> {
        std::mem::take(&mut self.blocked)
    }

    /// Sequence number the next request gets.
    pub fn next_seq(&self) -> u64 {
        self.head_seq + self.pending.len() as u64
    }

    /// The slot of sequence number `seq`, if still pending.
    pub fn slot_mut(&mut self, seq: u64) -> Option<&mut ReplySlot> {
        let i = seq.checked_sub(self.head_seq)?;
        self.pending.get_mut(i as usize)
    }

    /// Move every ready reply at the head into the output buffer; returns
    /// the bytes moved.
    pub fn drain_ready(&mut self) -> usize {
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

/// What a server reply answers.
#[derive(Debug, Clone, Copy)]
pub enum Waiter {
    /// A client's request (or one fragment of it): a [`ReplyTo`] with its
    /// reply slot, built by [`ReplyTo::waiter`] and read back by
    /// [`Waiter::reply_to`]. Its fields are kept apart rather than as a
    /// `ReplyTo` because the slot is never absent here: an optional one
    /// would widen every in-flight request by 8 bytes.
    Client {
        /// Client token.
        token: Token,
        /// Client id (stale if the client is gone).
        id: u64,
        /// Request sequence number.
        seq: u64,
        /// Fragment index for multi-key requests.
        frag: Option<u32>,
    },
    /// A request of the proxy's own (AUTH, SELECT on connect): the reply is dropped.
    Internal,
    /// `CLUSTER SLOTS` of a Redis Cluster pool: the reply is the new slot map.
    SlotMap,
    /// A read of a key being copied from a warm pool to a cold one
    /// (`warm.rs`; the state is the worker's `warms[idx]`).
    Warm {
        /// Index into the worker's warm copies.
        idx: u32,
    },
    /// One step of pulling a moved key to its new owner for a held
    /// request (see `migrate.rs`).
    Pull {
        /// Client token.
        token: Token,
        /// Client id.
        id: u64,
        /// Index of the key in the client's gate.
        idx: u32,
        /// Which step.
        part: super::conn_state::PullPart,
    },
}

impl Waiter {
    /// Where the reply goes, when a client waits for it.
    #[inline]
    pub fn reply_to(&self) -> Option<ReplyTo> {
        match *self {
            Waiter::Client {
                token,
                id,
                seq,
                frag,
            } => Some(ReplyTo::new(token, id, Some(seq), frag)),
            _ => None,
        }
    }
}

/// Where a request's reply goes: its client (the token, and the id, so a
/// token reused by a later client is not mistaken for it), the request's
/// place in that client's order of replies (`None`: a noreply request,
/// answered nowhere) and, for a request split over servers, its fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    /// Client token.
    pub token: Token,
    /// Client id.
    pub id: u64,
    /// Reply sequence number.
    pub seq: Option<u64>,
    /// Fragment index of a split request.
    pub frag: Option<u32>,
}

impl ReplyTo {
    /// Client `id` at `token`: its reply slot `seq`, and the fragment of a
    /// split request.
    pub fn new(token: Token, id: u64, seq: Option<u64>, frag: Option<u32>) -> ReplyTo {
        ReplyTo {
            token,
            id,
            seq,
            frag,
        }
    }

    /// Client `id` at `token`, before its reply slot is reserved.
    pub fn client(token: Token, id: u64) -> ReplyTo {
        ReplyTo {
            token,
            id,
            seq: None,
            frag: None,
        }
    }

    /// What waits for the server's reply (nothing for a noreply request).
    pub fn waiter(self) -> Option<Waiter> {
        self.seq.map(|seq| Waiter::Client {
            token: self.token,
            id: self.id,
            seq,
            frag: self.frag,
        })
    }
}

/// A request sent (or queued) to a server, waiting for its reply.
#[derive(Debug, Clone, Copy)]
pub struct Inflight {
    /// Who gets the reply.
    pub waiter: Waiter,
    /// Operation (reply parsing depends on it).
    pub op: Op,
    /// Request bytes (queue gauges).
    pub len: usize,
    /// When the request was queued (latency).
    pub sent_at: Instant,
    /// Where its timeout counts from: `sent_at`, or the end of a streamed
    /// request queued before it.
    pub timed_from: Instant,
    /// First key of the request, kept while the slow log is on.
    pub key: crate::stats::slowlog::KeyPrefix,
}

/// A connection of the worker.
#[derive(Debug)]
pub enum Conn {
    /// Client side.
    Client(Box<Client>),
    /// Server side.
    Server(Box<Server>),
}
