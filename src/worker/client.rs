//! Client side of the data path: read, parse, route, queue replies in
//! order, write.

use super::client_conn::{AfterRead, AfterWrite, InputPass, WriteClose};
use super::closes::{Close, Kept};
use super::conn::Origin;
use super::conn::{Conn, ConnTable, Waiter};
use super::pool::PoolRt;
use super::pull::AfterPull;
use super::pull::Hold;
use super::queue::RequestBytes;
use super::txn::TxnStep;
use super::{Worker, WorkerCtl, READ_BUDGET, READ_CHUNK, STREAM_LOW, STREAM_THRESHOLD};
use crate::proto::{Local, Parse, Request, Route};
use crate::stats::{PoolField, WorkerField};
use mio::Token;
use slab::Slab;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::time::Instant;

impl Worker<'_> {
    /// Read what the client sent. `hup`: the peer also closed its side, so
    /// read on to the end of the stream even after a short read.
    pub(super) fn read_client(&mut self, token: Token, now: Instant, hup: bool) {
        let mut total = 0;
        // While handing over: the most a client's handover carries.
        let handing = self.handover.carry();
        loop {
            let Some(c) = self.conns.client_mut(token.0) else {
                return;
            };
            // Handing over, what is read is not parsed here; a client
            // that crosses after all carries it over.
            if !c.read_now(handing, hup) {
                break;
            }
            match c.read_input(&mut self.bufs, READ_CHUNK) {
                Ok((0, _)) => {
                    c.set_eof();
                    break;
                }
                Ok((n, short)) => {
                    total += n;
                    c.touch(now);
                    if short && !hup {
                        // Drained: edge-triggered epoll reports new data.
                        break;
                    }
                    if total >= READ_BUDGET {
                        // Parse what we have; the rest is read on the loop's
                        // next pass through this client (it stays readable).
                        self.process_input(token, now);
                        total = 0;
                        continue;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    if e.kind() == ErrorKind::InvalidData {
                        // TLS: which side failed and why (a plain-text client,
                        // a certificate refused), with the peer.
                        crate::log_warn!(
                            "client {} of pool '{}': {}",
                            crate::net::peer_of(c.sock().as_raw_fd()),
                            self.pools[c.pool()].cfg.name,
                            e
                        );
                    }
                    self.close_all(Some(Close::Client { token, error: true }));
                    return;
                }
            }
        }
        self.process_input(token, now);
        if let Some(c) = self.conns.client(token.0) {
            if c.sock().is_tls() && c.has_output() {
                // Replies queued while the TLS handshake ran go out once
                // a read has finished it (no EPOLLOUT edge comes for that).
                self.dirty.client(token);
            }
            if let AfterRead::Close { error } = c.after_read(|r| self.conns.server_ref(r).is_some())
            {
                // A blocked client's server connections go with it.
                self.close_all(Some(Close::Client { token, error }));
                return;
            }
        }
        // TCP_QUICKACK where a delayed ACK can stall: the client's request is
        // incomplete, so no reply will carry the ACK, and a client sending
        // with Nagle waits for it before sending the rest (the 40 ms stalls
        // of Nagle meeting a delayed ACK). A complete request is answered, and the reply
        // carries the ACK: no extra system call per request then.
        if self.ctl.quickack {
            if let Some(c) = self.conns.client(token.0) {
                if c.sock().is_tcp() && !c.input().is_empty() {
                    crate::net::set_quickack(c.sock());
                }
            }
        }
        // Nothing more to do (quit sent, or peer gone and every reply
        // written): it closes.
        if self.conns.client(token.0).is_some_and(|c| c.finished()) {
            self.close_all(Some(Close::Client {
                token,
                error: false,
            }));
        }
    }

    /// Parse and route every complete request in the client's input,
    /// when it is to be parsed now (`Client::parse_now`), once a streamed
    /// request took its share, and `need` bytes are there.
    fn process_input(&mut self, token: Token, now: Instant) {
        // While handing over: the most a client's handover carries.
        let handing = self.handover.carry();
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        if !c.parse_now(handing) {
            return;
        }
        if c.stream().is_some() && !self.pass_stream(token, now) {
            if let Some(c) = self.conns.client_mut(token.0) {
                c.return_idle_input(&mut self.bufs);
            }
            return;
        }
        let Some(c) = self
            .conns
            .client_mut(token.0)
            .filter(|c| c.ready_to_parse())
        else {
            return;
        };
        let mut rbuf = c.take_input();
        let pool = c.pool();
        let first = c.next_seq();
        let pass = self.parse_input(token, pool, rbuf.bytes(), now);
        self.stats.worker_add(WorkerField::Requests, pass.requests);
        rbuf.consume(pass.off);
        if let Some(c) = self.conns.client_mut(token.0) {
            c.end_pass(pass.need, pass.swallow, pass.paused);
            if c.must_read_again() {
                // Paused by an earlier pass, the socket left unread, and
                // this pass (not a read) let it go on: read it (a long
                // pipeline would otherwise wait for an event that never
                // comes).
                self.resume.push(token);
            }
            c.batch_from(first);
            if rbuf.is_empty() {
                // Lend the empty buffer back: idle clients hold no memory.
                self.bufs.give(rbuf);
            } else {
                c.put_input(rbuf);
            }
            let added = c.drain_ready(&mut self.bufs);
            if c.has_output() {
                self.dirty.client(token);
            }
            self.add_out(added);
        }
        if pass.streamed {
            self.process_input(token, now);
        }
    }

    /// Parse and dispatch the requests at the start of `input` until one is
    /// incomplete, the client must wait (too many in flight, a streamed
    /// request), or it is to be closed.
    fn parse_input(&mut self, token: Token, pool: usize, input: &[u8], now: Instant) -> InputPass {
        let proto = self.pools[pool].proto;
        let limits = self.pools[pool].limits;
        let max_inflight = self.ctl.max_inflight(&self.pools[pool]);
        let mut pass = InputPass::default();
        loop {
            let input = &input[pass.off..];
            if input.is_empty() {
                return pass;
            }
            let mut limits = limits;
            // Backpressure: a client with too many requests in flight is
            // not read until its replies drain (resumed in write_client).
            if let Some(c) = self.conns.client_mut(token.0) {
                limits.pre_auth = !c.session().authenticated;
                if c.must_pause(max_inflight) {
                    pass.paused = true;
                    return pass;
                }
            }
            match proto.parse_request(input, &limits) {
                Ok(Parse::Done(req)) => {
                    let len = req.len;
                    pass.requests += 1;
                    if matches!(req.route, Route::Local(Local::Stats)) {
                        // memcached `stats` reports this worker's count.
                        self.stats
                            .worker_add(WorkerField::Requests, std::mem::take(&mut pass.requests));
                    }
                    self.ends_input = len == input.len();
                    let closing = self.dispatch(token, req, &input[..len], now);
                    self.ends_input = false;
                    pass.off += len;
                    if closing {
                        return pass;
                    }
                }
                Ok(Parse::Incomplete { hint }) => {
                    pass.need = hint;
                    if hint > STREAM_THRESHOLD && proto == crate::proto::Protocol::Redis {
                        // A large argument: the request is forwarded as it
                        // arrives once its head is parsed.
                        let head =
                            crate::proto::redis::stream_head(input, &limits, STREAM_THRESHOLD);
                        if let Some(head) = head {
                            let len = head.req.len;
                            let start = self.start_stream(token, head, &input[..len], now);
                            pass.stream_start(len, start);
                        }
                    }
                    return pass;
                }
                Err(err) => {
                    let (close, skip) = (err.close, err.skip);
                    let name = &self.pools[pool].cfg.name;
                    let c = self.conns.client_mut(token.0);
                    if let Some(req) = c.and_then(|c| c.refuse(err, name, input)) {
                        // Routed in the refused request's place.
                        pass.requests += 1;
                        let len = req.len;
                        self.dispatch(token, *req, &input[..len], now);
                    }
                    if close || !pass.skip_refused(skip, input.len()) {
                        return pass;
                    }
                }
            }
        }
    }

    /// Route one request. Returns true when the client must not be read further.
    fn dispatch(&mut self, token: Token, req: Request, bytes: &[u8], now: Instant) -> bool {
        let Some(c) = self.conns.client(token.0) else {
            return true;
        };
        let pool = c.pool();
        let client_id = c.id();
        let users = &self.pools[pool].cfg.security.users;
        if let Some(out) = crate::proto::redis::local::refusal(c.session(), users, &req, bytes) {
            self.conns.push_ready(token, out, false);
            return false;
        }
        // Pub/sub and transactions: their commands, and whatever a client
        // in one of those states sends (checked here first: the common
        // request pays two comparisons, not two lookups).
        let stateful = c.is_stateful()
            || matches!(req.op, crate::proto::Op::Redis(op) if matches!(
                op.class,
                crate::proto::redis::CmdClass::PubSub | crate::proto::redis::CmdClass::Transaction
            ));
        if stateful {
            let (conns, pools) = (&mut self.conns, &mut self.pools);
            if let Some(plan) = super::pubsub::command(conns, pools, token, &req, bytes, now) {
                self.send_subs(plan, now);
                return false;
            }
            match self.txn_dispatch(token, &req, bytes, now) {
                TxnStep::NotTxn => {}
                TxnStep::Done => return false,
                // Held while its keys are pulled: read no further.
                TxnStep::Held => return true,
            }
        }
        match req.route {
            Route::Local(Local::Reply(out)) => {
                let c = self.conns.client_mut(token.0).filter(|_| !req.noreply);
                if let Some(n) = c.and_then(|c| c.push_local(out, &mut self.bufs)) {
                    self.add_out(n);
                }
                false
            }
            Route::Local(Local::Quit(out)) => {
                self.conns.push_ready(token, out, true);
                true
            }
            Route::Local(Local::Stats) => {
                let out = super::local::mc_stats(&self.stats, pool, &self.pools[pool], bytes);
                self.conns.push_ready(token, out, false);
                false
            }
            Route::Local(Local::RedisSession) => {
                let (out, close) =
                    super::local::redis_session(&mut self.conns, &self.pools, token, bytes);
                self.conns.push_ready(token, out, close);
                close
            }
            Route::Single | Route::Multi => {
                let owner = match self.gate(token, pool, &req, bytes, AfterPull::Route, now) {
                    Hold::Go { owner } => owner,
                    Hold::Held => return true,
                    Hold::Refused => return false,
                };
                self.dispatch_routed(token, req, bytes, owner, now);
                false
            }
            Route::Broadcast => {
                // As the pool's plan says; the client count is INFO's alone.
                let clients = || self.stats.pool_total(pool, PoolField::ClientConnections);
                let sends = self.pools[pool].broadcast_plan(&req, clients);
                let to = Origin {
                    token,
                    client_id,
                    pool,
                }
                .reply_to();
                self.send_plan(to, pool, &req, bytes, sends, now);
                false
            }
        }
    }

    /// Send a key-routed request on (a held one, once its keys are where
    /// they belong, comes here too).
    /// `owner`: the server of its one key, when the caller placed it
    /// already (a migrating pool's request whose key did not move).
    pub(super) fn dispatch_routed(
        &mut self,
        token: Token,
        req: Request,
        bytes: &[u8],
        owner: Option<u32>,
        now: Instant,
    ) {
        let Some(c) = self.conns.client(token.0) else {
            return;
        };
        let at = Origin {
            token,
            client_id: c.id(),
            pool: c.pool(),
        };
        self.recorder.note_key(
            at.pool,
            req.keys.first().map_or(&b""[..], |r| &bytes[r.clone()]),
        );
        let plan = self.pools[at.pool].route.plan(&req);
        if plan.count_routes {
            self.pools[at.pool].count_routes(at.pool, &req, bytes, &self.stats);
        }
        if let Some(shadow) = plan.shadow {
            let copy = self.shadows.copy(shadow, &mut self.pools, &req, bytes, now);
            self.send_copy(copy, Some((&req, bytes)), now);
        }
        if plan.zone_copies {
            let copy = self.pools[at.pool].zone_copy(at.pool, &req, bytes);
            self.send_copy(Some(copy), Some((&req, bytes)), now);
        }
        self.forward(at, &plan, &req, bytes, owner, now);
    }

    /// Queue request bytes on a server connection (written by a closure,
    /// or as they came: `queue::RequestBytes`); then the pass's lists it
    /// joins as its `Queued` says (`Dirty::queued`: to count, to write)
    /// and its timeout timer (`Server::arm_once`).
    #[inline]
    pub(super) fn enqueue(
        &mut self,
        st: Token,
        waiter: Option<Waiter>,
        op: crate::proto::Op,
        bytes: impl RequestBytes,
        now: Instant,
    ) {
        let Some(s) = self.conns.server_mut(st.0) else {
            return;
        };
        let waits = waiter.is_some();
        let q = bytes.queue_on(s, waiter, op, now, self.recorder.slow_key());
        if let Some(at) = s.arm_once(waits, &self.pools, now) {
            self.timers.arm(at, st, s.id());
        }
        self.dirty.queued(st, q);
    }

    /// Write as much queued output as the socket takes; then what the
    /// client's `after_write` says.
    pub(super) fn write_client(&mut self, token: Token) {
        if !self.flush_client(token) {
            return;
        }
        if let Some(st) = super::stream_reply::client_drained(&mut self.conns, token) {
            self.resume.push(st);
        }
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        if c.wants_held_reply(STREAM_LOW) {
            // Its output drained: more of the held reply at the head of
            // its replies (written on the loop's next flush round).
            let added = c.drain_ready(&mut self.bufs);
            if added > 0 {
                self.dirty.client(token);
                self.add_out(added);
            }
        }
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        let max_inflight = self.ctl.max_inflight(&self.pools[c.pool()]);
        match c.after_write(max_inflight, READ_CHUNK * 4) {
            AfterWrite::Read => self.read_client(token, std::time::Instant::now(), true),
            AfterWrite::Close => self.close_all(Some(Close::Client {
                token,
                error: false,
            })),
            AfterWrite::Stay => {}
        }
    }

    /// Write queued output (`Client::flush`); close the client on a
    /// socket error or when more than `client_output_limit` bytes stay
    /// unwritten. Returns whether the client is still open.
    pub(super) fn flush_client(&mut self, token: Token) -> bool {
        let Some(c) = self.conns.client_mut(token.0) else {
            return false;
        };
        let limit = self.ctl.output_limit(&self.pools[c.pool()]);
        let flushed = c.flush(limit, &mut self.bufs);
        if flushed.written > 0 {
            // (Most calls write nothing: a writable edge with no output.)
            self.out.sub(flushed.written, &self.stats);
        }
        let close = match flushed.close {
            None => return true,
            Some(WriteClose::Failed) => Close::Client { token, error: true },
            Some(WriteClose::OverLimit(bytes)) => {
                let how = Kept::Buffered;
                Close::OverLimit { token, bytes, how }
            }
        };
        self.close_all(Some(close));
        false
    }
}

/// A client's output limit as replies are queued for it.
impl WorkerCtl {
    /// Whether replies just queued took the client at `token` over its
    /// `client_output_limit` (`pools`: the worker's, its pool among
    /// them). The worker then writes what the socket takes at once and
    /// closes the client if it is still over (`Worker::flush_client`), so
    /// one burst of replies cannot grow the buffer far past the limit
    /// before the end of the loop's pass.
    #[inline]
    pub(super) fn output_over(&self, conns: &Slab<Conn>, token: Token, pools: &[PoolRt]) -> bool {
        conns
            .client(token.0)
            .is_some_and(|c| c.output_over(self.output_limit(&pools[c.pool()])).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_queued_past_a_clients_output_limit_are_written_at_once() {
        let yaml = "a:\n  listen: 127.0.0.1:22121\n  client_output_limit: 100\n  servers:\n   - 127.0.0.1:11211:1\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let pools = vec![PoolRt::new(&c.pools[0], &[])];
        let mut ctl = WorkerCtl {
            pool_names: vec!["a".into()],
            ..WorkerCtl::default()
        };
        let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
        let client = pools[0].new_client(crate::net::Stream::Unix(sock), 0, 1, Instant::now());
        let mut conns = Slab::new();
        let t = Token(conns.insert(Conn::Client(Box::new(client))));
        let mut bufs = super::super::conn::BufPool::default();
        let mut out = |conns: &mut Slab<Conn>, n: usize| {
            if let Some(c) = conns.client_mut(t.0) {
                c.queue_output(&vec![b'x'; n], &mut bufs);
            }
        };
        out(&mut conns, 100);
        assert!(!ctl.output_over(&conns, t, &pools), "at the pool's limit");
        out(&mut conns, 1);
        assert!(ctl.output_over(&conns, t, &pools));
        ctl.client_output_limit = Some(0);
        assert!(
            !ctl.output_over(&conns, t, &pools),
            "the override: no limit"
        );
        ctl.client_output_limit = Some(50);
        assert!(ctl.output_over(&conns, t, &pools), "the override first");
        assert!(
            !ctl.output_over(&conns, Token(t.0 + 1), &pools),
            "no client"
        );
    }
}
