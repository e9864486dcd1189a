//! Large Redis replies streamed instead of buffered whole (the request
//! half is `stream.rs`).
//!
//! Replies: a reply of any shape (a bulk string, an array, map or set,
//! nested) for the request at the head of its client's replies is passed
//! to the client as it arrives once it is known to be large: it declares a
//! bulk of [`STREAM_THRESHOLD`] bytes or more, or that much of it is
//! already buffered (an LRANGE of many small elements). A
//! [`ReplyCursor`](crate::proto::redis::ReplyCursor) follows where the reply
//! is, holding back at most an unfinished header line, and checks it as
//! the whole-reply parser would. While nothing else waits on the server
//! connection, it is not read while that client has more than
//! [`STREAM_HIGH`] bytes unwritten (the worker holds little of the reply
//! however large it is), and a client that reads none of it for
//! [`STREAM_STALL`](super::STREAM_STALL) is closed. Once another request waits on that
//! connection (it is shared: other clients' replies come behind this
//! one), the connection is never held back for one client: the rest of
//! the reply is moved out of the way into a spool of its client's
//! (`spool_rest`), held to `client_output_limit` together with that
//! client's output (256 MiB by default; the client alone is closed past
//! it), and the connection is read on.
//! A large reply that cannot pass yet (an earlier reply of its client is
//! still awaited, or it is one fragment of a split MGET) is held in a
//! [`super::spool::Spool`] as it arrives (64 KiB chunks, never one
//! allocation of its size; the server is read on, as its connection is
//! shared) and given to its slot at the end; a held reply reaches the
//! client's output at most [`super::conn::HELD_HIGH`] at a time, as it
//! drains, and a split MGET is merged from the held fragments chunk by
//! chunk (`held.rs`). Error replies are buffered whole.
//!
//! What streams, where each piece goes and when the server pauses are the
//! reply's `RepStream`'s to say (`rep_stream.rs`); this side moves the
//! bytes.

use super::conn::{BufPool, ClientRef, Conn, ConnTable, Inflight, ServerRef, Waiter};
use super::dirty::Dirty;
use super::fault::ServerFault;
use super::rep_stream::{Dest, Hold};
use super::{Worker, STREAM_LOW};
use crate::stats::shm::StatsSlot;
use crate::stats::ServerField;
use mio::Token;
use std::time::Instant;

/// Let server `r`, paused by a streamed reply, read again (`drop_client`:
/// the client went away, the rest of the reply is dropped): the connection
/// to resume if it was paused.
pub(super) fn unblock_reply(
    conns: &mut slab::Slab<Conn>,
    r: ServerRef,
    drop_client: bool,
) -> Option<Token> {
    let rs = conns.server_ref_mut(r)?.rstream_mut()?;
    rs.unblock(drop_client).then_some(r.token)
}

/// The client `ct`'s output drained below the low mark: the server
/// streaming a reply to it hears that it took some (not stalled) and, if
/// the output is low enough, reads again: the connection to resume, if
/// it was paused.
pub(super) fn client_drained(conns: &mut slab::Slab<Conn>, ct: Token) -> Option<Token> {
    let (from, low) = conns.client_mut(ct.0)?.drained_below(STREAM_LOW)?;
    if let Some(r) = conns.server_ref_mut(from).and_then(|s| s.rstream_mut()) {
        r.progressed(Instant::now());
    }
    if low {
        return unblock_reply(conns, from, false);
    }
    None
}

/// If the server connection `st` is paused for one client's streamed
/// reply and someone else's request waits on it: the rest of that reply
/// is moved out of the way, into a spool its client drains as it reads
/// (held to its output limit), and `st` is returned, to be read on.
pub(super) fn spool_rest(conns: &mut slab::Slab<Conn>, st: Token) -> Option<Token> {
    let s = conns.server_mut(st.0)?;
    let paused_for = s.rstream().and_then(|r| r.paused_for())?;
    if !s.others_wait(paused_for) {
        return None;
    }
    // The reply streams to the head of its client's replies: the rest
    // of it joins that slot once complete, behind what already passed.
    let seq = paused_for.and_then(|cr| conns.client_ref_mut(cr)).map(|c| {
        c.release_reply_wait();
        c.head_seq()
    });
    if let Some(r) = conns.server_mut(st.0).and_then(|s| s.rstream_mut()) {
        r.spool_rest(seq);
    }
    Some(st)
}

/// The clients that have not read any of a streamed reply for
/// [`super::STREAM_STALL`]: the server connection they hold is shared, and the
/// replies of the other clients on it wait behind theirs.
pub(super) fn stalled_readers(conns: &slab::Slab<Conn>, now: Instant) -> Vec<ClientRef> {
    conns
        .iter()
        .filter_map(|(_, c)| match c {
            Conn::Server(s) => s.rstream().and_then(|r| r.stalled(now)),
            _ => None,
        })
        .collect()
}

/// The next `n` bytes of server connection `st`'s streamed reply are
/// held for client `to`'s slot (`RepStream::keep`), within its output
/// limit (`limit`, by pool); past it the rest of the reply is read and
/// dropped, and the client, its pool and the bytes it kept are returned,
/// to be closed. A client gone: the rest is dropped.
fn hold_piece(
    conns: &mut slab::Slab<Conn>,
    st: Token,
    to: ClientRef,
    n: usize,
    limit: impl Fn(usize) -> usize,
) -> Option<(Token, usize, usize)> {
    match conns.get2_mut(st.0, to.token.0) {
        Some((Conn::Server(s), Conn::Client(c))) if c.id() == to.id => {
            let (r, input) = s.rstream_and_input()?;
            let kept = r.keep(&input.bytes()[..n], c.out_len(), limit(c.pool()))?;
            Some((to.token, c.pool(), kept))
        }
        Some((Conn::Server(s), _)) => {
            if let Some(r) = s.rstream_mut() {
                r.drop_client();
            }
            None
        }
        _ => None,
    }
}

/// The next `n` bytes of server connection `st`'s streamed reply pass to
/// client `to`'s output (`done`: the last of it): the bytes added, and the
/// client if the server now pauses for it (`RepStream::pause_if_lagging`),
/// which is written at once. A client gone: the rest is dropped.
fn pass_piece(
    conns: &mut slab::Slab<Conn>,
    bufs: &mut BufPool,
    dirty: &mut Dirty,
    st: Token,
    to: ClientRef,
    n: usize,
    done: bool,
) -> (usize, Option<Token>) {
    match conns.get2_mut(st.0, to.token.0) {
        Some((Conn::Server(s), Conn::Client(c))) if c.id() == to.id => {
            c.queue_output(&s.rbuf().bytes()[..n], bufs);
            let out = c.out_len();
            let mut over = None;
            if s.rstream_mut()
                .is_some_and(|r| r.pause_if_lagging(out, done))
            {
                c.wait_on_reply(ServerRef::new(st, s.id()));
                over = Some(to.token);
            }
            dirty.client(to.token);
            (n, over)
        }
        Some((Conn::Server(s), _)) => {
            if let Some(r) = s.rstream_mut() {
                r.drop_client();
            }
            (0, None)
        }
        _ => (0, None),
    }
}

/// What follows a streamed reply's end for its client (`reply_ended`).
pub(super) enum Then {
    /// Nothing: its client left, or was not waiting for it at its head.
    Nothing,
    /// Its slot was its client's head: the ready replies behind it were
    /// drained to its output, this many bytes.
    Drained(usize),
    /// It was held for its slot: the hold goes to it (`held_done`).
    Held(ClientRef, Hold),
}

/// A streamed reply whose last byte passed (`reply_ended`): its server,
/// the request it answered, and what follows for its client.
pub(super) struct Ended {
    pub pool: usize,
    pub server: usize,
    pub front: Inflight,
    pub then: Then,
}

/// Server connection `st`'s streamed reply passed whole: it and its
/// request leave the connection, counted like any reply; a client it
/// passed to at its head takes its next replies. `None`: there was none.
pub(super) fn reply_ended(
    conns: &mut slab::Slab<Conn>,
    stats: &StatsSlot,
    bufs: &mut BufPool,
    dirty: &mut Dirty,
    st: Token,
) -> Option<Ended> {
    let s = conns.server_mut(st.0)?;
    let rs = s.set_rstream(None)?;
    let front = s.pop_answered()?;
    let (passed, client, hold) = rs.end();
    let (pool, server) = (s.pool(), s.server());
    stats.server_sub(pool, server, ServerField::OutQueue, 1);
    stats.server_sub(pool, server, ServerField::OutQueueBytes, front.len as u64);
    stats.server_add(pool, server, ServerField::Responses, 1);
    stats.server_add(pool, server, ServerField::ResponseBytes, passed as u64);
    let then = match (client, hold) {
        (None, _) => Then::Nothing,
        (Some(c), Some(h)) => Then::Held(c, h),
        (Some(cr), None) => match (conns.client_ref_mut(cr), front.waiter) {
            (Some(c), Waiter::Client { seq, .. }) if c.head_seq() == seq => {
                c.pop_head();
                c.release_reply_wait();
                let added = c.drain_ready(bufs);
                dirty.client(cr.token);
                Then::Drained(added)
            }
            _ => Then::Nothing,
        },
    };
    Some(Ended {
        pool,
        server,
        front,
        then,
    })
}

impl Worker<'_> {
    /// Pass what the server's input holds of a streamed reply. True when
    /// the reply is complete (parse the next one).
    pub(super) fn pass_reply_stream(&mut self, st: Token, now: Instant) -> bool {
        loop {
            let Some(s) = self.conns.server_mut(st.0) else {
                return false;
            };
            let Some((rs, input)) = s.rstream_and_input() else {
                return true;
            };
            if rs.is_blocked() {
                return false;
            }
            let (n, done) = match rs.advance(input.bytes(), now) {
                Ok(Some(step)) => step,
                Ok(None) => return false,
                Err(e) => {
                    let (pool, server) = (s.pool(), s.server());
                    let fault = ServerFault::BadReply(e.0);
                    crate::log_warn!(
                        "pool '{}': server '{}': bad reply: {}",
                        self.pools[pool].cfg.name,
                        self.pools[pool].servers[server].name,
                        fault.detail()
                    );
                    self.close_all(Some(super::closes::Close::Server {
                        token: st,
                        fault,
                        at: now,
                    }));
                    return false;
                }
            };
            let (mut added, mut over, mut over_limit) = (0, None, None);
            match rs.dest() {
                // Held for its slot, as long as its client is there and
                // within its output limit.
                Dest::Hold(to) => {
                    let (ctl, pools) = (&self.ctl, &self.pools);
                    let limit = |pool: usize| ctl.output_limit(&pools[pool]);
                    over_limit = hold_piece(&mut self.conns, st, to, n, limit);
                }
                Dest::Pass(to) => {
                    let (bufs, dirty) = (&mut self.bufs, &mut self.dirty);
                    (added, over) = pass_piece(&mut self.conns, bufs, dirty, st, to, n, done);
                }
                Dest::Drop => {}
            }
            if let Some(s) = self.conns.server_mut(st.0) {
                s.consume_input(n);
            }
            self.add_out(added);
            if let Some((token, _, bytes)) = over_limit {
                self.close_all(Some(super::closes::Close::OverLimit {
                    token,
                    bytes,
                    how: super::closes::Kept::BufferedOrHeld,
                }));
            }
            if done {
                let (bufs, dirty) = (&mut self.bufs, &mut self.dirty);
                let Some(end) = reply_ended(&mut self.conns, &self.stats, bufs, dirty, st) else {
                    return true;
                };
                let (pool, server) = (end.pool, end.server);
                if self.pools[pool].record_success(server, now) {
                    self.pools[pool].server_back(pool, server, &self.stats);
                }
                self.recorder.record_reply(
                    &self.stats,
                    &self.pools,
                    (pool, server),
                    &end.front,
                    now,
                );
                match end.then {
                    Then::Nothing => {}
                    Then::Drained(added) => self.add_out(added),
                    Then::Held(c, h) => self.held_done(c.token, c.id, h.seq, h.frag, h.spool),
                }
                return true;
            }
            if let Some(ct) = over {
                // Write now; the server stays paused only if the client
                // lags and nothing else waits on this connection.
                if self.flush_client(ct) {
                    self.resume.extend(client_drained(&mut self.conns, ct));
                }
                self.resume.extend(spool_rest(&mut self.conns, st));
            }
        }
    }
}

#[cfg(test)]
#[path = "stream_reply_tests.rs"]
mod tests;
