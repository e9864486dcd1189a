//! Large Redis values streamed instead of buffered whole: the bytes moved
//! and the connections they go on. What each byte of the request is for
//! (forwarded, held, the key, an MSET pair, the end, a protocol error) is
//! `proto::redis::StreamMachine`'s to say; what the worker does with them
//! next, where they go and when the client pauses is the request's
//! `ReqStream`'s (`req_stream.rs`); this side moves the bytes and opens
//! the connections.
//!
//! Requests: a single-key command whose bulk argument is at least
//! [`STREAM_THRESHOLD`] bytes is routed as soon as its head (everything
//! before that argument's value) is parsed. The head is queued on a server
//! connection of its own (so no other client's request waits behind a slow
//! upload, and an aborted one poisons nothing shared) and the rest passes
//! from the client's input to that connection's output as it arrives, the
//! later arguments framed and checked on the way. The client's earlier
//! requests are answered before it starts and its next ones wait for its
//! reply, so one client's requests still never overtake each other. The
//! client is not read while the server has more than [`STREAM_HIGH`] bytes
//! queued, and is read again below [`STREAM_LOW`]. The connection is closed
//! once the request is answered.
//!
//! An MSET with a value of at least [`STREAM_THRESHOLD`] bytes is applied
//! pair by pair: once its head shows a large argument, each pair is sent
//! as it arrives as `MSET key value` (a large value streamed as above) on
//! a connection of its own per server (so the pairs for one server keep
//! their order: the last of a repeated key still wins), and the client
//! gets one reply joined from theirs as a split MSET's: `+OK`, or the
//! first error. Such an MSET is not atomic even within one server (through
//! a proxy, an MSET across servers never was): a failed pair does not undo
//! the others, and a client gone in the middle leaves the pairs before
//! the one being streamed applied.
//!
//! A large argument before the key (an EVAL script; its key follows
//! numkeys) cannot be routed as it arrives: it is held in a
//! [`super::spool::Spool`] (64 KiB chunks, never one allocation of the
//! declared size) with numkeys and the key, numkeys checked as
//! redis-server checks it; once the key is read the request is routed
//! to a connection of its own and the held bytes pass to it as its output
//! drains (the client is not read meanwhile), then the arguments after the
//! key pass as above.
//!
//! Replies are streamed as `stream_reply.rs` says.
//!
//! Failures: a client that goes away in the middle of a request leaves the
//! server connection with half a command, so that connection is closed. A server connection that fails in the middle
//! of a request answers the client with the error; the client's input is
//! still framed, so the rest of its request is read and dropped and the
//! client stays usable. A server connection that fails in the middle of a
//! streamed reply leaves the client with half a reply: the client is closed
//! (if none of it was passed yet, the client gets the error reply instead).
//! So does a reply the cursor finds malformed.

use super::closes::half_sent;
use super::conn::{
    Client, Conn, ConnTable, ReplySlot, ReplyTo, ReqStream, ServerRef, SrvStream, Waiter,
};
use super::dirty::Dirty;
use super::fault::ServerFault;
use super::pool::PoolRt;
use super::req_stream::{FeedStep, PairOut, ReqAction};
use super::send_plan::{Dedicated, Reply, Sent, Usage};
use super::{Worker, STREAM_HIGH, STREAM_LOW, STREAM_THRESHOLD};
use crate::proto::redis::{self, StreamHead, StreamKind, StreamMachine};
use crate::proto::Op;
use crate::stats::shm::StatsSlot;
use crate::stats::{PoolField, ServerField, WorkerField};
use mio::Token;
use std::time::Instant;

/// What became of a request that could be streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamStart {
    /// Routed; its head is queued.
    Started,
    /// Earlier requests of the client are not answered yet: wait for them.
    Wait,
    /// Not streamable here: buffer it whole.
    No,
}

/// The server connection `st` drained: the client streaming to it, if it
/// was paused for it and reads again.
pub(super) fn drained_client(conns: &mut slab::Slab<Conn>, st: Token) -> Option<Token> {
    let s = conns.server(st.0)?;
    let ss = s.stream()?;
    if s.wbuf().len() >= STREAM_LOW {
        return None;
    }
    let (ct, cid) = (ss.client, ss.client_id);
    let c = conns.client_mut(ct.0).filter(|c| c.id() == cid)?;
    c.stream_mut()?.resume().then_some(ct)
}

/// The pairs of client `token`'s pair-by-pair MSET not sent yet, when its
/// streamed request fails: each a fragment of its reply, answered with an
/// error of operation `op` in `pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unsent {
    pub pool: usize,
    pub op: Op,
    pub pairs: Vec<ReplyTo>,
}

/// What of client `token`'s streamed request is left unsent: none but
/// for an MSET sent pair by pair whose reply is still owed.
pub(super) fn unsent_pairs(conns: &slab::Slab<Conn>, token: Token) -> Option<Unsent> {
    let c = conns.client(token.0)?;
    let rs = c.stream()?;
    let seq = rs.pairs_seq()?;
    let op = c.slot(seq)?.multi.as_ref()?.req.op;
    let (cid, at) = (c.id(), Some(seq));
    let pairs = rs.pairs_unsent();
    Some(Unsent {
        pool: c.pool(),
        op,
        pairs: pairs
            .map(|i| ReplyTo::new(token, cid, at, Some(i as u32)))
            .collect(),
    })
}

/// Where the bytes a streamed request passes come from: the first `n` of
/// its client's input, or of the bytes it held (consumed as they pass).
#[derive(Debug, Clone, Copy)]
enum Passing {
    Input(usize),
    Held(usize),
}

/// Copy the bytes `pass` names from client `ct` to the server connection
/// `to` its request streams to, counted as request bytes; `to` is marked
/// to be written if its output was empty. Returns whether its output is
/// now over the high mark (false when either connection is gone).
fn stream_out(
    conns: &mut slab::Slab<Conn>,
    stats: &StatsSlot,
    dirty: &mut Dirty,
    ct: Token,
    to: ServerRef,
    pass: Passing,
) -> bool {
    let (c, s) = match conns.get2_mut(ct.0, to.token.0) {
        Some((Conn::Client(c), Conn::Server(s))) if s.id() == to.id => (c, s),
        _ => return false,
    };
    let before = s.wbuf().len();
    let cid = c.id();
    // The streamed request is the connection's last.
    let is_it =
        |w: &Waiter| matches!(*w, Waiter::Client { token, id, .. } if token == ct && id == cid);
    let n = match (pass, c.stream_mut().and_then(|rs| rs.held_mut())) {
        (Passing::Held(n), Some(spool)) => {
            s.queue_more(|w| w.extend(&spool.front()[..n]), is_it);
            spool.consume(n);
            n
        }
        (Passing::Held(n) | Passing::Input(n), _) => {
            s.queue_more(|w| w.extend(&c.input().bytes()[..n]), is_it);
            super::cluster_stream::spool_passing(c, n);
            n
        }
    };
    let (pool, server) = (s.pool(), s.server());
    let over = s.wbuf().len() > STREAM_HIGH;
    stats.server_add(pool, server, ServerField::RequestBytes, n as u64);
    stats.server_add(pool, server, ServerField::InQueueBytes, n as u64);
    if before == 0 {
        dirty.server(to.token);
    }
    over
}

/// What passing a streamed request's input on came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forwarded {
    /// The client is gone.
    Gone,
    /// Passed (or dropped, when the request has no server to go to).
    Passed,
    /// Passed, and server connection `st` now holds more than the high
    /// mark: it is written now, and the client paused if it still lags.
    Over(Token),
}

/// Pass the first `n` bytes of client `ct`'s input to the server its
/// request streams to (dropped when it has none); they leave its input.
fn forward_input(
    conns: &mut slab::Slab<Conn>,
    stats: &StatsSlot,
    dirty: &mut Dirty,
    ct: Token,
    n: usize,
) -> Forwarded {
    let target = match conns.get(ct.0) {
        Some(Conn::Client(c)) => c.stream().and_then(|rs| rs.server()),
        _ => return Forwarded::Gone,
    };
    let over = match target {
        Some(to) => stream_out(conns, stats, dirty, ct, to, Passing::Input(n)),
        None => false,
    };
    let Some(c) = conns.client_mut(ct.0) else {
        return Forwarded::Gone;
    };
    c.consume_input(n);
    match (over, target) {
        (true, Some(to)) => Forwarded::Over(to.token),
        _ => Forwarded::Passed,
    }
}

/// How far feeding a streamed request's held bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeldFed {
    /// All passed, or a connection is gone (a server that failed is
    /// seen by `pass_stream`).
    Done,
    /// The server connection's output holds enough: it is written first.
    Full,
}

/// Pass client `ct`'s held bytes to the server connection `to` its request
/// streams to, as much as its output takes (`ReqStream::feed`).
fn feed_held(
    conns: &mut slab::Slab<Conn>,
    stats: &StatsSlot,
    dirty: &mut Dirty,
    ct: Token,
    to: ServerRef,
) -> HeldFed {
    loop {
        let (c, s) = match conns.get2_mut(ct.0, to.token.0) {
            Some((Conn::Client(c), Conn::Server(s))) if s.id() == to.id => (c, s),
            _ => return HeldFed::Done,
        };
        let Some(rs) = c.stream() else {
            return HeldFed::Done;
        };
        match rs.feed(s.wbuf().len()) {
            FeedStep::Pass(n) => {
                stream_out(conns, stats, dirty, ct, to, Passing::Held(n));
            }
            FeedStep::Done => return HeldFed::Done,
            FeedStep::Full => return HeldFed::Full,
        }
    }
}

/// The connection of its own client `ct`'s pair-by-pair MSET uses for
/// `server`: the one it opened before, while that is still open
/// (answered connections are closed); none, and a new one is opened.
fn known_pair_conn(conns: &slab::Slab<Conn>, ct: Token, server: usize) -> Option<Token> {
    let r = conns.client(ct.0)?.stream()?.pair_conn(server)?;
    conns.server_ref(r).map(|_| r.token)
}

/// An MSET pair taken off its client's input: its client's pool, the
/// MSET's operation and where the pair's reply goes (its fragment of the
/// MSET's slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PairTo {
    pub pool: usize,
    pub op: Op,
    pub to: ReplyTo,
}

/// Take the pair at the start of client `token`'s input (`pair`) off it:
/// where its reply goes, and its key. `None`: no MSET sent pair by pair.
fn take_pair(
    conns: &mut slab::Slab<Conn>,
    token: Token,
    pair: &PairOut,
) -> Option<(PairTo, Vec<u8>)> {
    let c = conns.client_mut(token.0)?;
    let (pool, cid) = (c.pool(), c.id());
    let rs = c.stream()?;
    let (seq, op) = (rs.pairs_seq()?, rs.op());
    let key = c.input().bytes()[pair.key.clone()].to_vec();
    c.consume_input(pair.len);
    let to = ReplyTo::new(token, cid, Some(seq), Some(pair.index as u32));
    Some((PairTo { pool, op, to }, key))
}

/// How an MSET pair (`pair`, its `key`, taken off as `to` says) goes out:
/// `MSET key value` to its key's server in pool `p`, on the connection
/// its MSET uses for that server (opened if it has none); a large value
/// then passes as it arrives.
fn pair_plan<'a>(
    conns: &slab::Slab<Conn>,
    p: &mut PoolRt,
    to: &PairTo,
    key: &[u8],
    pair: &'a PairOut,
    now: Instant,
) -> Dedicated<'a> {
    let server = p.server_for(key, now);
    Dedicated {
        pool: to.pool,
        server,
        op: to.op,
        conn: server.and_then(|s| known_pair_conn(conns, to.to.token, s)),
        usage: Usage::Pair {
            server: server.unwrap_or_default(),
            large: pair.large,
        },
        reply: Reply::At(to.to),
        note: None,
        write: Sent::Bytes(&pair.cmd),
    }
}

/// How a request whose head is `head` (`bytes`), from client `cid` of
/// `pool` (`p`), goes out when its key is in its head: the head to the
/// key's server on a connection of its own, the rest passing as it
/// arrives. A cluster pool's keeps its head in its slot, to follow a
/// redirection (`ReplySlot::streamed`).
fn single_plan<'a>(
    p: &mut PoolRt,
    pool: usize,
    cid: u64,
    head: &'a StreamHead,
    bytes: &'a [u8],
    now: Instant,
) -> Dedicated<'a> {
    let req = &head.req;
    let key = req.keys.first().map_or(&[][..], |k| &bytes[k.clone()]);
    let server = p.key_server(key, req.op, cid, now);
    let slot = match server {
        Some(_) => ReplySlot::streamed(p.cluster.is_some(), req, bytes),
        None => ReplySlot::default(),
    };
    Dedicated {
        pool,
        server,
        op: req.op,
        conn: None,
        usage: Usage::Stream,
        reply: Reply::New {
            slot,
            noreply: false,
        },
        note: Some(key),
        write: Sent::Bytes(bytes),
    }
}

/// How client `token`'s request held in a spool goes out once its `key`
/// is read: to the key's server on a connection of its own (nothing
/// queued yet: the held bytes drain to it, `FeedHeld`). `None`: the
/// client or its streamed request is gone.
fn spool_plan<'a>(
    conns: &slab::Slab<Conn>,
    pools: &mut [PoolRt],
    token: Token,
    key: &'a [u8],
    now: Instant,
) -> Option<Dedicated<'a>> {
    let c = conns.client(token.0)?;
    let pool = c.pool();
    let op = c.stream()?.op();
    Some(Dedicated {
        pool,
        server: pools[pool].server_for(key, now),
        op,
        conn: None,
        usage: Usage::Stream,
        reply: Reply::New {
            slot: ReplySlot::default(),
            noreply: false,
        },
        note: Some(key),
        write: Sent::Bytes(&[]),
    })
}

/// Whether a request whose head is `head` streams from client `c` in pool
/// `p` (`fleet`: this worker is a fleet member's); if not, it is buffered
/// whole.
fn streams_here(c: &Client, p: &PoolRt, fleet: bool, head: &StreamHead) -> bool {
    let req = &head.req;
    if (!c.session().authenticated && redis::local::needs_auth(req)) || c.session().user.is_some() {
        // Refused, or checked against its ACL user.
        return false;
    }
    // Redis Cluster: a request whose key came before its large argument
    // is routed by slot and kept in a spool to follow MOVED and ASK
    // (cluster_stream.rs); any other is buffered whole.
    let cluster = p.cluster.is_some();
    // A migrating pool: buffered whole, so that the keys it names are
    // pulled to their new owners before it goes (see `migrate.rs`); a
    // fleet member's `migration: true` pool too, so that it passes the
    // fleet's checks (`Worker::gate`).
    let route = &p.route;
    if route.copies() > 1
        || (cluster && req.keys.is_empty())
        || route.is_migrating()
        || (fleet && p.cfg.migration)
    {
        return false;
    }
    !(head.kind == StreamKind::Single && req.keys.is_empty())
}

/// Server connection `st` carries client `ct`'s (`cid`) streamed request
/// from now on: its name for the client's side, none when it is gone.
pub(super) fn stream_to(
    conns: &mut slab::Slab<Conn>,
    st: Token,
    ct: Token,
    cid: u64,
) -> Option<ServerRef> {
    let s = conns.server_mut(st.0)?;
    s.set_stream(Some(SrvStream {
        client: ct,
        client_id: cid,
    }));
    Some(ServerRef::new(st, s.id()))
}

impl Worker<'_> {
    /// Route a request whose large argument is still arriving and queue its
    /// head on a connection of its own.
    pub(super) fn start_stream(
        &mut self,
        token: Token,
        head: StreamHead,
        bytes: &[u8],
        now: Instant,
    ) -> StreamStart {
        let Some(c) = self.conns.client_mut(token.0) else {
            return StreamStart::No;
        };
        let (pool, cid) = (c.pool(), c.id());
        if !streams_here(c, &self.pools[pool], self.fleet.is_some(), &head) {
            return StreamStart::No;
        }
        c.go_solo();
        if c.has_pending() {
            return StreamStart::Wait;
        }
        let machine = StreamMachine::new(&head, self.pools[pool].limits, STREAM_THRESHOLD);
        let mut single = None;
        let rs = match head.kind {
            StreamKind::Pairs => {
                // Its reply slot joins one fragment per pair; the pairs go
                // out as they arrive (`pass_stream`).
                let (slot, pairs) = ReqStream::pairs_slot(&head);
                let Some(seq) = self.conns.push_slot(token, false, slot) else {
                    return StreamStart::Started;
                };
                self.stats
                    .pool_add(pool, PoolField::Fragments, pairs as u64);
                ReqStream::pairs(machine, seq)
            }
            StreamKind::Spool => ReqStream::held(machine, bytes),
            StreamKind::Single => {
                // Routed by the key in its head; the head is queued on a
                // connection of its own once the stream is the client's
                // (it then names that connection; none when the request
                // failed, answered with the error).
                single = Some(single_plan(
                    &mut self.pools[pool],
                    pool,
                    cid,
                    &head,
                    bytes,
                    now,
                ));
                ReqStream::single(machine, None)
            }
        };
        if let Some(c) = self.conns.client_mut(token.0) {
            c.start_stream(rs);
        }
        if let Some(plan) = single {
            self.send_dedicated(token, plan, now);
        }
        self.stats.worker_add(WorkerField::Requests, 1);
        StreamStart::Started
    }

    /// Pass what the client's input holds of its streamed request. True
    /// when the request is complete (parse the next one), false when more
    /// input is needed or the client is paused or closing.
    pub(super) fn pass_stream(&mut self, token: Token, now: Instant) -> bool {
        loop {
            let Some(c) = self.conns.client_mut(token.0) else {
                return false;
            };
            let Some((rs, rbuf)) = c.stream_and_input() else {
                return true;
            };
            match rs.next(rbuf) {
                ReqAction::More => return false,
                ReqAction::FeedHeld(r) => loop {
                    let fed = feed_held(&mut self.conns, &self.stats, &mut self.dirty, token, r);
                    if fed == HeldFed::Done {
                        break;
                    }
                    // The server has enough queued: write it, and wait if
                    // it lags.
                    self.write_server(r.token, now);
                    let queued = self.conns.server_ref(r).map(|s| s.wbuf().len());
                    if queued.is_some_and(|n| n >= STREAM_HIGH) {
                        if let Some(rs) =
                            self.conns.client_mut(token.0).and_then(|c| c.stream_mut())
                        {
                            rs.pause();
                        }
                        return false;
                    }
                },
                ReqAction::Forward(n) => {
                    let (stats, dirty) = (&self.stats, &mut self.dirty);
                    match forward_input(&mut self.conns, stats, dirty, token, n) {
                        Forwarded::Gone => return false,
                        Forwarded::Passed => {}
                        Forwarded::Over(st) => {
                            // Write now; pause the client only if the
                            // server lags.
                            self.write_server(st, now);
                            let queued = self.conns.server(st.0).map(|s| s.wbuf().len());
                            let rs = self.conns.client_mut(token.0).and_then(|c| c.stream_mut());
                            if let (Some(q), Some(rs)) = (queued, rs) {
                                if rs.pause_if_lagging(q) {
                                    return false;
                                }
                            }
                        }
                    }
                }
                ReqAction::Route(key) => {
                    // The held bytes drain to its server next (`FeedHeld`).
                    if let Some(plan) = spool_plan(&self.conns, &mut self.pools, token, &key, now) {
                        self.send_dedicated(token, plan, now);
                    }
                }
                ReqAction::Refused(reply) => self.conns.push_ready(token, reply, false),
                ReqAction::Pair(pair) => {
                    if let Some((to, key)) = take_pair(&mut self.conns, token, &pair) {
                        let p = &mut self.pools[to.pool];
                        let plan = pair_plan(&self.conns, p, &to, &key, &pair, now);
                        if plan.server.is_some() {
                            self.recorder.note_key(to.pool, &key);
                        }
                        self.send_dedicated(token, plan, now);
                    }
                }
                ReqAction::PairEnd(r) => {
                    // A large value passed whole.
                    if let Some(s) = self.conns.server_ref_mut(r) {
                        s.end_stream(now);
                    }
                }
                ReqAction::Done(target) => {
                    c.take_stream();
                    if let Some(s) = target.and_then(|r| self.conns.server_ref_mut(r)) {
                        s.end_stream(now);
                    }
                    return true;
                }
                ReqAction::Fail(reply) => {
                    // A protocol error: the MSET's pairs not sent fail
                    // first (so that its reply completes), a server
                    // connection holding half the request is closed, and
                    // the client gets the error and is closed.
                    if let Some(u) = unsent_pairs(&self.conns, token) {
                        let mut out = Vec::new();
                        let proto = self.pools[u.pool].proto;
                        ServerFault::UnsentAfterBadPair.write_reply(proto, u.op, &mut out);
                        for to in u.pairs {
                            self.fragment_done(to, out.clone(), true, false);
                        }
                    }
                    let half = self.conns.client_mut(token.0).and_then(|c| c.take_stream());
                    if let Some(r) = half.and_then(|rs| rs.server()) {
                        self.close_all(half_sent(&self.conns, r, ServerFault::HalfSentBadArg));
                    }
                    self.conns.push_ready(token, reply, true);
                    return false;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
