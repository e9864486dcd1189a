//! Client side of the data path: read, parse, route, queue replies in
//! order, write.

use super::conn::{Conn, Fragment, Inflight, Multi, Slot, Waiter};
use super::{Worker, READ_CHUNK};
use crate::proto::{Local, Parse, Request, Route};
use crate::stats::{PoolField, ServerField, WorkerField};
use mio::Token;
use smallvec::SmallVec;
use std::io::{ErrorKind, Read, Write};
use std::time::Instant;

/// Most bytes read from one client per event before other work runs.
const READ_BUDGET: usize = 256 * 1024;

impl Worker<'_> {
    pub(super) fn read_client(&mut self, token: Token, now: Instant) {
        let mut total = 0;
        loop {
            let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
                return;
            };
            if c.closing {
                return;
            }
            match c.rbuf.read_from(&mut c.sock, READ_CHUNK) {
                Ok(0) => {
                    c.eof = true;
                    break;
                }
                Ok(n) => {
                    total += n;
                    c.last_active = now;
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
                Err(_) => {
                    self.close_client(token, true);
                    return;
                }
            }
        }
        if self.ctl.quickack {
            if let Some(Conn::Client(c)) = self.conns.get(token.0) {
                if c.sock.is_tcp() {
                    use std::os::fd::AsRawFd;
                    crate::net::set_quickack(c.sock.as_raw_fd());
                }
            }
        }
        self.process_input(token, now);
        self.maybe_finish_client(token);
    }

    /// Parse and route every complete request in the client's input.
    fn process_input(&mut self, token: Token, now: Instant) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        if c.swallow > 0 {
            let n = c.swallow.min(c.rbuf.len());
            c.rbuf.consume(n);
            c.swallow -= n;
            if c.swallow > 0 {
                return;
            }
        }
        if c.rbuf.len() < c.need || c.closing {
            return;
        }
        let mut rbuf = std::mem::take(&mut c.rbuf);
        let pool = c.pool;
        let proto = self.pools[pool].proto;
        let limits = self.pools[pool].limits;
        let mut off = 0;
        let mut need = 0;
        let mut swallow = 0;
        loop {
            let input = &rbuf.bytes()[off..];
            if input.is_empty() {
                break;
            }
            match proto.parse_request(input, &limits) {
                Ok(Parse::Done(req)) => {
                    let len = req.len;
                    self.stats.worker_add(WorkerField::Requests, 1);
                    let closing = self.dispatch(token, req, &input[..len], now);
                    off += len;
                    if closing {
                        break;
                    }
                }
                Ok(Parse::Incomplete { hint }) => {
                    need = hint;
                    break;
                }
                Err(err) => {
                    self.stats.pool_add(pool, PoolField::ClientErr, 0);
                    let close = err.close;
                    self.push_ready(token, err.reply, close);
                    if close {
                        break;
                    }
                    let skip = err.skip.max(1);
                    if skip > input.len() {
                        swallow = skip - input.len();
                        off += input.len();
                        break;
                    }
                    off += skip;
                }
            }
        }
        rbuf.consume(off);
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            c.need = need;
            c.swallow = swallow;
            c.rbuf = rbuf;
            c.drain_ready();
            if !c.wbuf.is_empty() {
                self.dirty_clients.push(token);
            }
        }
    }

    /// Queue a reply the proxy composed itself.
    fn push_ready(&mut self, token: Token, out: Vec<u8>, close_after: bool) {
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            c.pending.push_back(Slot {
                ready: true,
                out,
                close_after,
                multi: None,
            });
            if close_after {
                c.closing = true;
            }
        }
    }

    /// Route one request. Returns true when the client must not be read further.
    fn dispatch(&mut self, token: Token, req: Request, bytes: &[u8], now: Instant) -> bool {
        let Some(Conn::Client(c)) = self.conns.get(token.0) else {
            return true;
        };
        let pool = c.pool;
        let client_id = c.id;
        if self.pools[pool].proto == crate::proto::Protocol::Redis
            && !c.session.authenticated
            && crate::proto::redis::local::needs_auth(&req)
        {
            self.push_ready(token, crate::proto::redis::local::NOAUTH.to_vec(), false);
            return false;
        }
        match req.route {
            Route::Local(Local::Reply(out)) => {
                if !req.noreply {
                    self.push_ready(token, out, false);
                }
                false
            }
            Route::Local(Local::Quit(out)) => {
                self.push_ready(token, out, true);
                true
            }
            Route::Local(Local::Stats) => {
                let out = self.local_stats(pool, bytes);
                self.push_ready(token, out, false);
                false
            }
            Route::Local(Local::RedisSession) => {
                let (out, close) = self.redis_session(token, &req, bytes);
                self.push_ready(token, out, close);
                close
            }
            Route::Single => {
                let key = req.keys.first().map_or(&b""[..], |r| &bytes[r.clone()]);
                match self.pools[pool].server_for(key, now) {
                    Some(s) => self.forward_single(token, client_id, pool, s, &req, bytes, now),
                    None => self.reply_no_server(token, pool, &req),
                }
                false
            }
            Route::Multi => {
                self.forward_multi(token, client_id, pool, req, bytes, now);
                false
            }
            Route::Broadcast => {
                self.forward_broadcast(token, client_id, pool, req, bytes, now);
                false
            }
        }
    }

    fn reply_no_server(&mut self, token: Token, pool: usize, req: &Request) {
        self.stats.pool_add(pool, PoolField::ForwardError, 1);
        if req.noreply {
            return;
        }
        let mut out = Vec::new();
        self.pools[pool]
            .proto
            .server_error(req.op, "Connection refused", &mut out);
        self.push_ready(token, out, false);
    }

    /// Forward a whole request to one server.
    #[allow(clippy::too_many_arguments)]
    fn forward_single(
        &mut self,
        token: Token,
        client_id: u64,
        pool: usize,
        server: usize,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        let seq = c.next_seq();
        let slot_idx = self.pools[pool].slot_for(server, client_id, req.op);
        let st = match self.server_conn(pool, server, slot_idx, now) {
            Ok(t) => t,
            Err(msg) => {
                self.stats.pool_add(pool, PoolField::ForwardError, 1);
                if !req.noreply {
                    let mut out = Vec::new();
                    self.pools[pool].proto.server_error(req.op, &msg, &mut out);
                    self.push_ready(token, out, false);
                }
                return;
            }
        };
        if !req.noreply {
            if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
                c.pending.push_back(Slot::default());
            }
        }
        let waiter = if req.noreply {
            None
        } else {
            Some(Waiter::Client {
                token,
                id: client_id,
                seq,
                frag: None,
            })
        };
        let proto = self.pools[pool].proto;
        self.enqueue(
            st,
            waiter,
            req.op,
            |out| proto.write_request(req, bytes, out),
            now,
        );
    }

    /// Split a multi-key request per server.
    fn forward_multi(
        &mut self,
        token: Token,
        client_id: u64,
        pool: usize,
        req: Request,
        bytes: &[u8],
        now: Instant,
    ) {
        // Group key indices by server, in client order.
        let mut groups: SmallVec<[(usize, Vec<usize>); 4]> = SmallVec::new();
        for (i, r) in req.keys.iter().enumerate() {
            let Some(s) = self.pools[pool].server_for(&bytes[r.clone()], now) else {
                self.reply_no_server(token, pool, &req);
                return;
            };
            match groups.iter_mut().find(|(gs, _)| *gs == s) {
                Some((_, v)) => v.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        if groups.len() <= 1 {
            let s = groups.first().map_or(0, |g| g.0);
            self.forward_single(token, client_id, pool, s, &req, bytes, now);
            return;
        }
        self.stats
            .pool_add(pool, PoolField::Fragments, groups.len() as u64);
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        let seq = c.next_seq();
        let frags = groups
            .iter()
            .map(|(_, keys)| Fragment {
                keys: keys.clone(),
                reply: Vec::new(),
            })
            .collect();
        let proto = self.pools[pool].proto;
        let op = req.op;
        c.pending.push_back(Slot {
            ready: false,
            out: Vec::new(),
            close_after: false,
            multi: Some(Box::new(Multi {
                req: req.clone(),
                bytes: bytes.to_vec(),
                frags,
                remaining: groups.len(),
                error: None,
                broadcast: false,
            })),
        });
        for (fi, (server, keys)) in groups.iter().enumerate() {
            let slot_idx = self.pools[pool].slot_for(*server, client_id, op);
            let waiter = Waiter::Client {
                token,
                id: client_id,
                seq,
                frag: Some(fi as u32),
            };
            match self.server_conn(pool, *server, slot_idx, now) {
                Ok(st) => self.enqueue(
                    st,
                    Some(waiter),
                    op,
                    |out| proto.write_fragment(bytes, &req, keys, out),
                    now,
                ),
                Err(msg) => {
                    self.stats.pool_add(pool, PoolField::ForwardError, 1);
                    let mut out = Vec::new();
                    proto.server_error(op, &msg, &mut out);
                    self.fragment_done(token, client_id, seq, Some(fi as u32), out, true, proto);
                }
            }
        }
    }

    /// Send a request to every server of the pool (flush_all).
    fn forward_broadcast(
        &mut self,
        token: Token,
        client_id: u64,
        pool: usize,
        req: Request,
        bytes: &[u8],
        now: Instant,
    ) {
        let n = self.pools[pool].servers.len();
        let proto = self.pools[pool].proto;
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        let seq = c.next_seq();
        let noreply = req.noreply;
        let op = req.op;
        let _ = &bytes;
        if !noreply {
            c.pending.push_back(Slot {
                ready: false,
                out: Vec::new(),
                close_after: false,
                multi: Some(Box::new(Multi {
                    req: req.clone(),
                    bytes: Vec::new(),
                    frags: (0..n).map(|_| Fragment::default()).collect(),
                    remaining: n,
                    error: None,
                    broadcast: true,
                })),
            });
        }
        for s in 0..n {
            let slot_idx = self.pools[pool].slot_for(s, client_id, op);
            let waiter = (!noreply).then_some(Waiter::Client {
                token,
                id: client_id,
                seq,
                frag: Some(s as u32),
            });
            match self.server_conn(pool, s, slot_idx, now) {
                Ok(st) => self.enqueue(st, waiter, op, |out| out.extend_from_slice(bytes), now),
                Err(msg) => {
                    if !noreply {
                        let mut out = Vec::new();
                        proto.server_error(op, &msg, &mut out);
                        self.fragment_done(token, client_id, seq, Some(s as u32), out, true, proto);
                    }
                }
            }
        }
    }

    /// Queue request bytes on a server connection.
    pub(super) fn enqueue(
        &mut self,
        st: Token,
        waiter: Option<Waiter>,
        op: crate::proto::Op,
        write: impl FnOnce(&mut Vec<u8>),
        now: Instant,
    ) {
        let Some(Conn::Server(s)) = self.conns.get_mut(st.0) else {
            return;
        };
        let before = s.wbuf.len();
        s.wbuf.extend_with(&mut self.scratch, write);
        let len = s.wbuf.len() - before;
        if let Some(waiter) = waiter {
            s.inflight.push_back(Inflight {
                waiter,
                op,
                len,
                sent_at: now,
            });
        }
        s.unsent += 1;
        s.unsent_bytes += len as u64;
        let (pool, server, id, arm) = (s.pool, s.server, s.id, !s.timer_armed && waiter.is_some());
        self.stats
            .server_add(pool, server, ServerField::Requests, 1);
        self.stats
            .server_add(pool, server, ServerField::RequestBytes, len as u64);
        self.stats.server_add(pool, server, ServerField::InQueue, 1);
        self.stats
            .server_add(pool, server, ServerField::InQueueBytes, len as u64);
        if arm {
            if let Some(t) = self.pools[pool].timeout() {
                if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
                    s.timer_armed = true;
                }
                self.arm_timer(now + t, st, id);
            }
        }
        if before == 0 {
            self.dirty_servers.push(st);
        }
    }

    /// Write as much queued output as the socket takes.
    pub(super) fn write_client(&mut self, token: Token) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        while !c.wbuf.is_empty() {
            match c.sock.write(c.wbuf.bytes()) {
                Ok(0) => break,
                Ok(n) => c.wbuf.consume(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close_client(token, true);
                    return;
                }
            }
        }
        self.maybe_finish_client(token);
    }

    /// Close a client that has nothing more to do (quit sent, or peer gone
    /// and every reply written).
    fn maybe_finish_client(&mut self, token: Token) {
        let Some(Conn::Client(c)) = self.conns.get(token.0) else {
            return;
        };
        let done_writing = c.wbuf.is_empty();
        if (c.closing || c.eof) && c.pending.is_empty() && done_writing {
            self.close_client(token, false);
        }
    }

    /// Drop a client. Replies still coming from servers for it are discarded.
    pub(super) fn close_client(&mut self, token: Token, error: bool) {
        let Some(Conn::Client(_)) = self.conns.get(token.0) else {
            return;
        };
        let Conn::Client(mut c) = self.conns.remove(token.0) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.sock);
        let pool = c.pool;
        self.pools[pool].clients = self.pools[pool].clients.saturating_sub(1);
        self.stats.pool_sub(pool, PoolField::ClientConnections, 1);
        self.stats.worker_sub(WorkerField::CurrConnections, 1);
        if error {
            self.stats.pool_add(pool, PoolField::ClientErr, 1);
        } else {
            self.stats.pool_add(pool, PoolField::ClientEof, 1);
        }
    }

    /// Deliver a reply (or a failure) for one request or fragment.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fragment_done(
        &mut self,
        token: Token,
        id: u64,
        seq: u64,
        frag: Option<u32>,
        reply: Vec<u8>,
        failed: bool,
        proto: crate::proto::Protocol,
    ) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        if c.id != id {
            return;
        }
        let Some(slot) = c.slot_mut(seq) else {
            return;
        };
        match (frag, slot.multi.as_mut()) {
            (Some(fi), Some(m)) => {
                if failed && m.error.is_none() {
                    m.error = Some(reply);
                } else if let Some(f) = m.frags.get_mut(fi as usize) {
                    f.reply = reply;
                }
                m.remaining = m.remaining.saturating_sub(1);
                if m.remaining == 0 {
                    let m = slot.multi.take();
                    if let Some(m) = m {
                        slot.out = match m.error {
                            Some(e) => e,
                            None => merge(proto, &m),
                        };
                    }
                    slot.ready = true;
                }
            }
            _ => {
                slot.out = reply;
                slot.ready = true;
            }
        }
        if seq == c.head_seq {
            c.drain_ready();
            if !c.wbuf.is_empty() {
                self.dirty_clients.push(token);
            }
        }
    }
}

fn merge(proto: crate::proto::Protocol, m: &Multi) -> Vec<u8> {
    let mut out = Vec::new();
    if m.broadcast {
        let replies: Vec<&[u8]> = m.frags.iter().map(|f| f.reply.as_slice()).collect();
        proto.merge_broadcast(&replies, &mut out);
    } else {
        let frags: Vec<(&[usize], &[u8])> = m
            .frags
            .iter()
            .map(|f| (f.keys.as_slice(), f.reply.as_slice()))
            .collect();
        proto.merge_responses(&m.bytes, &m.req, &frags, &mut out);
    }
    out
}

impl Read for super::conn::Client {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.sock.read(buf)
    }
}
