//! Server replies matched to their requests: every complete reply in a
//! server connection's input goes, in order, to what waits for it (a
//! client's reply slot or fragment, a key being pulled or warmed, the slot
//! map, the proxy's own connection setup), with the server's counters
//! added once per pass.

use super::cluster::Redo;
use super::conn::{Conn, ConnTable, Inflight, RepStream, ReplyTo, Waiter};
use super::fault::ServerFault;
use super::{Worker, WRITE_THROUGH_MIN};
use crate::proto::{Parse, Response};
use crate::stats::ServerField;
use mio::Token;
use slab::Slab;
use std::time::Instant;

impl Worker<'_> {
    /// Match every complete reply to the request at the head of the queue.
    pub(super) fn process_replies(&mut self, token: Token, now: Instant) {
        let Some(s) = self.conns.server_mut(token.0) else {
            return;
        };
        if s.rstream().is_some() && !self.pass_reply_stream(token, now) {
            return;
        }
        let Some(s) = self.conns.server_mut(token.0) else {
            return;
        };
        if s.needs_more() {
            return;
        }
        if s.push_to().is_some() {
            // Pub/sub: pushed to the client as it arrives.
            let mut rbuf = s.take_rbuf();
            let used = self.pubsub_frames(token, rbuf.bytes());
            rbuf.consume(used);
            if let Some(s) = self.conns.server_mut(token.0) {
                s.put_rbuf(rbuf, 0);
            }
            return;
        }
        let mut rbuf = s.take_rbuf();
        let (pool, server) = (s.pool(), s.server());
        let batch = self.match_replies(token, pool, server, rbuf.bytes(), now);
        batch.count(&self.stats, pool, server);
        if batch.gone {
            return;
        }
        rbuf.consume(batch.off);
        if batch.replies > 0 && self.pools[pool].record_success(server, now) {
            self.pools[pool].server_back(pool, server, &self.stats);
        }
        if let Some(s) = self.conns.server_mut(token.0) {
            s.put_rbuf(rbuf, batch.need);
            s.reply_floor.note(batch.replies, batch.least);
        }
        if let Some(fault) = batch.failure {
            crate::log_warn!(
                "pool '{}': server '{}': bad reply: {}",
                self.pools[pool].cfg.name,
                self.pools[pool].servers[server].name,
                fault.detail()
            );
            self.close_server(token, fault, now);
            return;
        }
        if batch.streamed {
            self.process_replies(token, now);
            return;
        }
        if let Some(st) = done_after_replies(&mut self.conns, token) {
            self.retire_server(st);
        }
    }

    /// The complete replies at the start of `input`, each handed to what
    /// waits for it, until a reply is incomplete, starts a stream, or is
    /// not one.
    #[inline(always)]
    fn match_replies(
        &mut self,
        token: Token,
        pool: usize,
        server: usize,
        input: &[u8],
        now: Instant,
    ) -> ReplyBatch {
        let proto = self.pools[pool].proto;
        let mut batch = ReplyBatch::default();
        loop {
            let Some(s) = self.conns.server_mut(token.0) else {
                batch.gone = true;
                return batch;
            };
            let input = &input[batch.off..];
            if input.is_empty() {
                return batch;
            }
            let Some(front) = s.inflight().front() else {
                batch.failure = Some(ServerFault::BadReply("unexpected data from server".into()));
                return batch;
            };
            match proto.parse_response(input, front.op) {
                Ok(Parse::Done(rsp)) => {
                    // One copy out of the queue (a moved-out `pop_front`
                    // costs two of its ~150 bytes).
                    let front = *front;
                    s.pop_answered();
                    batch.replies += 1;
                    batch.request_bytes += front.len as u64;
                    batch.reply_bytes += rsp.len as u64;
                    batch.least = if batch.least == 0 {
                        rsp.len
                    } else {
                        batch.least.min(rsp.len)
                    };
                    batch.off += rsp.len;
                    let bytes = &input[..rsp.len];
                    if let Some(fault) = self.route_reply(pool, server, &front, bytes, rsp, now) {
                        batch.failure = Some(fault);
                        return batch;
                    }
                }
                Ok(Parse::Incomplete { hint }) => {
                    batch.need = hint;
                    if proto == crate::proto::Protocol::Redis {
                        let front = s.inflight().front().copied();
                        if let Some(rs) =
                            front.and_then(|f| RepStream::start(&self.conns, input, hint, &f))
                        {
                            if let Some(s) = self.conns.server_mut(token.0) {
                                s.set_rstream(Some(rs));
                                batch.streamed = true;
                                batch.need = 0;
                            }
                        }
                    }
                    return batch;
                }
                Err(e) => {
                    batch.failure = Some(ServerFault::BadReply(e.0));
                    return batch;
                }
            }
        }
    }

    /// One complete reply to what waits for it: a client (or a fragment of
    /// its request), a key being pulled or warmed, the slot map, or the
    /// proxy's own connection setup. A fault here closes the connection
    /// (a server that refuses RESP3).
    #[inline(always)]
    fn route_reply(
        &mut self,
        pool: usize,
        server: usize,
        front: &Inflight,
        bytes: &[u8],
        rsp: Response,
        now: Instant,
    ) -> Option<ServerFault> {
        let proto = self.pools[pool].proto;
        let is_error = rsp.is_error;
        self.stats.count_mc_hits(front.op, bytes, rsp.values);
        let rewritten;
        let bytes = if !proto.keep_reply(front.op, bytes) {
            &[][..]
        } else if let Some(b) = self.pools[pool].scan_reply(server, front.op, bytes) {
            rewritten = b;
            &rewritten[..]
        } else if let Some(b) = proto.rewrite_reply(front.op, bytes) {
            rewritten = b;
            &rewritten[..]
        } else {
            bytes
        };
        if let Some(to) = front.waiter.reply_to() {
            // A cluster pool's error may send the request again.
            let redirected = is_error
                && self.pools[pool].cluster.is_some()
                && self.cluster_error_reply(pool, server, to, front.op, bytes, now);
            if !redirected {
                self.recorder
                    .record_reply(&self.stats, &self.pools, (pool, server), front, now);
                self.deliver(to, bytes, is_error);
            }
            return None;
        }
        match front.waiter {
            Waiter::Pull {
                token: ct,
                id,
                idx,
                part,
            } => {
                let reply = bytes.to_vec();
                self.pull_reply(ct, id, idx, part, Some(&reply), now);
            }
            Waiter::Warm { idx } => {
                let reply = bytes.to_vec();
                self.warm_reply(idx, Some(&reply));
            }
            Waiter::SlotMap => self.pools[pool].cluster_slots_reply(server, bytes),
            _ if is_error => return self.pools[pool].setup_refused(server, front.op, bytes),
            _ => {}
        }
        None
    }

    /// A cluster pool's error reply for a client's request: whether the
    /// request is sent again, and when, as the pool says
    /// (`PoolRt::cluster_answer`, `PoolRt::redo`). Out of line and cold: inlined into
    /// `process_replies`, its code cost every reply ~20 instructions
    /// (registers saved and moved around the loop) for replies that are
    /// almost never cluster errors.
    #[cold]
    #[inline(never)]
    fn cluster_error_reply(
        &mut self,
        pool: usize,
        server: usize,
        to: ReplyTo,
        op: crate::proto::Op,
        bytes: &[u8],
        now: Instant,
    ) -> bool {
        let p = &mut self.pools[pool];
        let redo = p
            .cluster_answer(bytes, server, to.seq.is_some())
            .and_then(|again| p.redo(&mut self.conns, to, op, again, now));
        match redo {
            None => return false,
            Some(Redo::At(at)) => self.timers.arm(at, super::tokens::RETRY_TIMER, 0),
            // ASKING for a MOVED too: while a migration ends, the old
            // owner already says MOVED but the new one, still importing,
            // would send the request back (MOVED) until it learns the
            // slot is its own; ASKING makes it serve it. A node that owns
            // the slot ignores it.
            Some(Redo::Now(target)) => self.send_again(pool, target, to, op, true, now),
        }
        true
    }

    /// Hand one reply to the client that waits for it.
    // Inlined into `process_replies`, its one caller on the hot path (as
    // it was before it took a `ReplyTo`): a call per reply costs ~30
    // instructions per request in the profile.
    #[inline(always)]
    fn deliver(&mut self, to: ReplyTo, bytes: &[u8], is_error: bool) {
        let ReplyTo {
            token: ct,
            id,
            seq: Some(seq),
            frag,
        } = to
        else {
            return;
        };
        let Some(c) = self.conns.client_mut(ct.0) else {
            return;
        };
        if c.id() != id {
            return;
        }
        // Fast path: the reply is the next one the client expects: write it
        // straight to the output buffer, no intermediate copy.
        if frag.is_none() && seq == c.head_seq() {
            if let Some(front) = c.head() {
                // (A zone read is looked at: it may fail over on a miss, and
                // its answer by another zone is counted.)
                // (So is a migrating pool's read of a moved key: it goes on
                // to the next server on a miss; a value found ends it here.)
                let (zone_read, moved_hit) = match front.retry.as_deref() {
                    None => (false, false),
                    Some(r) => {
                        let p = &self.pools[c.pool()];
                        let plain = !p.route.is_zoned() && !p.route.warms();
                        let read = r.on_miss || !plain;
                        (read, read && plain && !is_error && !p.proto.is_miss(bytes))
                    }
                };
                if !front.ready && front.multi.is_none() && (!zone_read || moved_hit) {
                    if moved_hit {
                        if let Some(settled) = c.read_settled(seq, true) {
                            let m = self.pools[c.pool()].migration.as_deref_mut();
                            settled.carry_out(ct, &mut self.resume, m);
                        }
                    }
                    c.pop_head();
                    let rest = if bytes.len() >= WRITE_THROUGH_MIN {
                        &bytes[c.write_through(bytes)..]
                    } else {
                        bytes
                    };
                    c.queue_output(rest, &mut self.bufs);
                    let added = rest.len() + c.drain_ready(&mut self.bufs);
                    // `check_output_limit`, with the client at hand.
                    let limit = self.ctl.output_limit(&self.pools[c.pool()]);
                    let over = super::over_output_limit(limit, c.out_len());
                    self.dirty.client(ct);
                    self.add_out(added);
                    if over {
                        self.flush_client(ct);
                    }
                    return;
                }
            }
        }
        self.fragment_done(to, bytes.to_vec(), is_error, false);
        if self.ctl.output_over(&self.conns, ct, &self.pools) {
            self.flush_client(ct);
        }
    }
}

/// After a pass of replies on connection `st`: the connection to close
/// now, if any: a transaction's once the reply that ends the transaction
/// is in (`txn::replied`), or one of a request's own (a blocking command,
/// a streamed request) once everything on it is answered and read.
#[inline]
fn done_after_replies(conns: &mut Slab<Conn>, st: Token) -> Option<Token> {
    let s = conns.server(st.0)?;
    if let Some(ct) = s.pinned() {
        return super::txn::replied(conns, st, ct);
    }
    let answered = s.inflight().is_empty() && s.stream().is_none() && s.rbuf().is_empty();
    (s.is_dedicated() && answered).then_some(st)
}

/// What one pass over a server connection's input matched, with its
/// counters added to the shared stats once per pass rather than per reply.
#[derive(Debug, Default)]
struct ReplyBatch {
    /// Bytes of complete replies.
    off: usize,
    /// Do not parse again until the input holds this many bytes.
    need: usize,
    /// Replies matched.
    replies: u64,
    /// Bytes of the requests they answered (out_queue_bytes).
    request_bytes: u64,
    /// Bytes of the replies.
    reply_bytes: u64,
    /// Bytes of the shortest of them (0: none).
    least: usize,
    /// The connection is to be closed for this.
    failure: Option<ServerFault>,
    /// A large reply started streaming.
    streamed: bool,
    /// The connection was closed while replies were handed out.
    gone: bool,
}

impl ReplyBatch {
    /// Add the batch to the server's counters and take it off its queue
    /// gauges.
    fn count(&self, stats: &crate::stats::shm::StatsSlot<'_>, pool: usize, server: usize) {
        if self.replies == 0 {
            return;
        }
        stats.server_sub(pool, server, ServerField::OutQueue, self.replies);
        stats.server_sub(pool, server, ServerField::OutQueueBytes, self.request_bytes);
        stats.server_add(pool, server, ServerField::Responses, self.replies);
        stats.server_add(pool, server, ServerField::ResponseBytes, self.reply_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::proto::{Limits, Parse, Protocol};
    use crate::stats::slowlog::KeyPrefix;
    use crate::worker::conn::Server;

    /// A connected server connection (`dedicated`: a request's own) on a
    /// socket pair, in the table.
    fn conn(conns: &mut Slab<Conn>, dedicated: bool) -> Token {
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let mut s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), Instant::now(), dedicated);
        s.set_connected();
        Token(conns.insert(Conn::Server(Box::new(s))))
    }

    fn owe_one(conns: &mut Slab<Conn>, st: Token) {
        let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
            panic!("request parses");
        };
        let s = conns.server_mut(st.0).expect("server");
        let _ = s.queue(
            Some(Waiter::Internal),
            req.op,
            |w| w.extend_from_slice(bytes),
            Instant::now(),
            KeyPrefix::new(b""),
        );
    }

    #[test]
    fn a_connection_of_its_own_closes_once_answered_a_shared_one_stays() {
        let mut conns = Slab::new();
        let shared = conn(&mut conns, false);
        assert_eq!(done_after_replies(&mut conns, shared), None);
        let own = conn(&mut conns, true);
        owe_one(&mut conns, own);
        assert_eq!(done_after_replies(&mut conns, own), None, "still owed");
        let _ = conns.server_mut(own.0).and_then(|s| s.pop_answered());
        assert_eq!(done_after_replies(&mut conns, own), Some(own));
        assert_eq!(done_after_replies(&mut conns, Token(7)), None, "gone");
    }
}
