//! Server replies matched to their requests: every complete reply in a
//! server connection's input goes, in order, to what waits for it (a
//! client's reply slot or fragment, a key being pulled or warmed, the slot
//! map, the proxy's own connection setup), with the server's counters
//! added once per pass.

use super::conn::{BufPool, Client, Conn, ConnTable, Inflight, RepStream, ReplyTo, Waiter};
use super::fault::ServerFault;
use super::pool::PoolRt;
use super::pubsub::Pushes;
use super::pull::Step;
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
            // Pub/sub: pushed to the client as it arrives, one frame at
            // a time.
            let mut rbuf = s.take_rbuf();
            let mut pushes = Pushes::of(&self.conns, &self.pools, token);
            while let Some(plan) = pushes.next(&mut self.conns, rbuf.bytes()) {
                self.send_subs(plan, now);
            }
            rbuf.consume(pushes.used());
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
            self.close_all(Some(super::closes::Close::Server {
                token,
                fault,
                at: now,
            }));
            return;
        }
        if batch.streamed {
            self.process_replies(token, now);
            return;
        }
        if let Some(st) = done_after_replies(&mut self.conns, token) {
            self.close_all(super::closes::done(&self.conns, st));
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
            let redo = if is_error && self.pools[pool].cluster.is_some() {
                let p = &mut self.pools[pool];
                p.redo_after(&mut self.conns, to, front.op, bytes, server, now)
            } else {
                None
            };
            if let Some(redo) = redo {
                self.redo(pool, to, front.op, redo, now);
            } else {
                self.recorder
                    .record_reply(&self.stats, &self.pools, (pool, server), front, now);
                // (A client gone: the reply is dropped.)
                let c = self.conns.client_mut(to.token.0)?;
                let p = &mut self.pools[c.pool()];
                match c.take_reply(p, to, bytes, is_error, &mut self.bufs, &mut self.resume) {
                    Taken::Gone => {}
                    Taken::Queued(added) => {
                        // `WorkerCtl::output_over`, with the client at hand.
                        let over = super::over_output_limit(self.ctl.output_limit(p), c.out_len());
                        self.dirty.client(to.token);
                        self.add_out(added);
                        if over {
                            self.flush_client(to.token);
                        }
                    }
                    Taken::Slot => {
                        self.fragment_done(to, bytes.to_vec(), is_error, false);
                        if self.ctl.output_over(&self.conns, to.token, &self.pools) {
                            self.flush_client(to.token);
                        }
                    }
                }
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
                let step = (self.conns.client_mut(ct.0))
                    .map_or(Step::Wait, |c| c.pull_reply(id, idx, part, Some(&reply)));
                self.run_held(ct, step, now);
            }
            Waiter::Warm { idx } => {
                let reply = bytes.to_vec();
                let copy = self.warms.reply(idx as usize, Some(&reply));
                self.send_copy(copy, None, now);
            }
            Waiter::SlotMap => self.pools[pool].cluster_slots_reply(server, bytes),
            _ if is_error => return self.pools[pool].setup_refused(server, front.op, bytes),
            _ => {}
        }
        None
    }
}

/// What handing a reply to its client came to (`Client::take_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// Not this client's (another one in its place now), or not owed.
    Gone,
    /// The next reply it expects, queued straight to its output with
    /// those ready behind it: this many bytes.
    Queued(usize),
    /// Anything else goes to its slot or fragment (`fragment_done`).
    Slot,
}

/// A client takes the replies to its requests.
impl Client {
    /// Take reply `bytes` for `to` (`is_error`: an error reply) from
    /// server connection of pool `p`. The next reply the client expects
    /// goes straight to its output, no intermediate copy, unless it is a
    /// zone read, which may fail over on a miss (a migrating pool's read
    /// of a moved key is taken when it found a value: a miss goes on to
    /// the next server).
    // Inlined into `process_replies`, its one caller on the hot path: a
    // call per reply costs ~30 instructions per request in the profile.
    #[inline(always)]
    fn take_reply(
        &mut self,
        p: &mut PoolRt,
        to: ReplyTo,
        bytes: &[u8],
        is_error: bool,
        bufs: &mut BufPool,
        resume: &mut Vec<Token>,
    ) -> Taken {
        let ReplyTo {
            token: ct,
            id,
            seq: Some(seq),
            frag,
        } = to
        else {
            return Taken::Gone;
        };
        if self.id() != id {
            return Taken::Gone;
        }
        if frag.is_some() || seq != self.head_seq() {
            return Taken::Slot;
        }
        let Some(front) = self.head() else {
            return Taken::Slot;
        };
        // (A zone read is looked at: it may fail over on a miss, and its
        // answer by another zone is counted.)
        let (zone_read, moved_hit) = match front.retry.as_deref() {
            None => (false, false),
            Some(r) => {
                let plain = !p.route.is_zoned() && !p.route.warms();
                let read = r.on_miss || !plain;
                (read, read && plain && !is_error && !p.proto.is_miss(bytes))
            }
        };
        if front.ready || front.multi.is_some() || (zone_read && !moved_hit) {
            return Taken::Slot;
        }
        if moved_hit {
            if let Some(settled) = self.read_settled(seq, true) {
                settled.carry_out(ct, resume, p.migration.as_deref_mut());
            }
        }
        self.pop_head();
        let rest = if bytes.len() >= WRITE_THROUGH_MIN {
            &bytes[self.write_through(bytes)..]
        } else {
            bytes
        };
        self.queue_output(rest, bufs);
        Taken::Queued(rest.len() + self.drain_ready(bufs))
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
    fn the_reply_a_client_expects_next_goes_straight_to_its_output() {
        let yaml =
            "p:\n  listen: 127.0.0.1:22999\n  redis: true\n  servers:\n    - 127.0.0.1:30001:1\n";
        let cfg = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let mut p = PoolRt::new(&cfg.pools[0], &[]);
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        c.push_reply(crate::worker::conn::ReplySlot::default());
        c.push_reply(crate::worker::conn::ReplySlot::default());
        let (mut bufs, mut resume) = (BufPool::default(), Vec::new());
        let mut take = |c: &mut Client, id, seq, frag| {
            let to = ReplyTo::new(Token(0), id, seq, frag);
            c.take_reply(&mut p, to, b"+OK\r\n", false, &mut bufs, &mut resume)
        };
        assert_eq!(take(&mut c, 10, Some(1), None), Taken::Slot, "not next");
        assert_eq!(
            take(&mut c, 10, Some(0), Some(0)),
            Taken::Slot,
            "a fragment"
        );
        assert_eq!(
            take(&mut c, 11, Some(0), None),
            Taken::Gone,
            "another client"
        );
        assert_eq!(take(&mut c, 10, None, None), Taken::Gone, "not owed");
        assert_eq!(c.out_len(), 0);
        assert_eq!(take(&mut c, 10, Some(0), None), Taken::Queued(5));
        assert_eq!((c.out_len(), c.head_seq()), (5, 1));
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
