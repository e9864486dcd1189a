//! Large Redis values streamed instead of buffered whole.
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

use super::conn::{
    Conn, Fragment, Multi, MultiMode, PairStream, ReplyTo, ReqStream, Slot, SpoolStream, SrvStream,
    Waiter,
};
use super::fault::ServerFault;
use super::{Worker, STREAM_HIGH, STREAM_LOW, STREAM_THRESHOLD};
use crate::proto::redis::{self, Pair, StreamHead, StreamKind};
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
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return StreamStart::No;
        };
        let (pool, client_id) = (c.pool, c.id);
        let req = &head.req;
        if (!c.session.authenticated && redis::local::needs_auth(req)) || c.session.user.is_some() {
            // Refused, or checked against its ACL user: buffered whole.
            return StreamStart::No;
        }
        // Redis Cluster: a request whose key came before its large argument
        // is routed by slot and kept in a spool to follow MOVED and ASK
        // (cluster_stream.rs); any other is buffered whole.
        let cluster = self.pools[pool].cluster.is_some();
        // A migrating pool: buffered whole, so that the keys it names are
        // pulled to their new owners before it goes (see `migrate.rs`).
        if self.pools[pool].cfg.replicas > 1
            || (cluster && req.keys.is_empty())
            || self.pools[pool].migration.is_some()
        {
            return StreamStart::No;
        }
        if !c.pending.is_empty() {
            c.solo = true;
            return StreamStart::Wait;
        }
        c.solo = true;
        if head.kind == StreamKind::Pairs {
            self.start_pairs(token, &head);
            return StreamStart::Started;
        }
        if head.kind == StreamKind::Spool {
            let mut held = super::spool::Spool::default();
            held.push(bytes);
            c.stream = Some(ReqStream {
                server: None,
                left: head.body,
                args_left: head.args_left,
                blocked: false,
                pairs: None,
                spool: Some(Box::new(SpoolStream {
                    bytes: held,
                    argc: head.args_left + 2,
                    next_arg: 2,
                    op: head.req.op,
                    draining: false,
                })),
            });
            self.stats.worker_add(WorkerField::Requests, 1);
            return StreamStart::Started;
        }
        let Some(range) = req.keys.first() else {
            return StreamStart::No;
        };
        let key = &bytes[range.clone()];
        let mut target = None;
        match self.stream_server(pool, key, req.op, client_id, now) {
            None => self.reply_no_server(token, pool, req),
            Some(server) => {
                let slot = self.conn_slot(token, pool, server, client_id, req.op);
                match self.server_conn_dedicated(pool, server, slot, now) {
                    Ok(st) => {
                        let Some(Conn::Server(s)) = self.conns.get(st.0) else {
                            return StreamStart::No;
                        };
                        let sid = s.id;
                        self.note_key(pool, key);
                        let kept = self.stream_slot(pool, req, bytes);
                        let seq = self.push_slot(token, false, kept);
                        let waiter = ReplyTo::new(token, client_id, seq, None).waiter();
                        self.enqueue(st, waiter, req.op, |out| out.extend_from_slice(bytes), now);
                        if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
                            s.stream = Some(SrvStream {
                                client: token,
                                client_id,
                            });
                        }
                        target = Some((st, sid));
                    }
                    Err(fault) => {
                        let seq = self.push_slot(token, false, Slot::default());
                        self.fail_unsent(
                            ReplyTo::new(token, client_id, seq, None),
                            pool,
                            req.op,
                            &fault,
                        );
                    }
                }
            }
        }
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            c.stream = Some(ReqStream {
                server: target,
                left: head.body,
                args_left: head.args_left,
                blocked: false,
                pairs: None,
                spool: None,
            });
        }
        self.stats.worker_add(WorkerField::Requests, 1);
        StreamStart::Started
    }

    /// An MSET with a large value: its reply slot joins one fragment per
    /// pair; the pairs go out as they arrive (`pass_stream`).
    fn start_pairs(&mut self, token: Token, head: &StreamHead) {
        let Some(Conn::Client(c)) = self.conns.get(token.0) else {
            return;
        };
        let pool = c.pool;
        let pairs = head.args_left / 2;
        let slot = Slot {
            multi: Some(Box::new(Multi {
                req: head.req.clone(),
                bytes: Vec::new(),
                frags: (0..pairs)
                    .map(|i| Fragment {
                        keys: vec![i],
                        ..Fragment::default()
                    })
                    .collect(),
                remaining: pairs,
                error: None,
                mode: MultiMode::Split,
            })),
            ..Slot::default()
        };
        let Some(seq) = self.push_slot(token, false, slot) else {
            return;
        };
        self.stats
            .pool_add(pool, PoolField::Fragments, pairs as u64);
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            c.stream = Some(ReqStream {
                server: None,
                left: 0,
                args_left: head.args_left,
                blocked: false,
                pairs: Some(Box::new(PairStream {
                    seq,
                    next: 0,
                    conns: Vec::new(),
                })),
                spool: None,
            });
        }
        self.stats.worker_add(WorkerField::Requests, 1);
    }

    /// Send the pair at the start of a client's input as `MSET key value`
    /// on the connection its MSET uses for the key's server; a large value
    /// is then passed as it arrives.
    fn send_pair(&mut self, token: Token, pair: Pair, now: Instant) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        let (pool, client_id) = (c.pool, c.id);
        let Some(rs) = c.stream.as_mut() else {
            return;
        };
        let Some(ps) = rs.pairs.as_mut() else {
            return;
        };
        let (idx, seq) = (ps.next, ps.seq);
        ps.next += 1;
        rs.args_left = rs.args_left.saturating_sub(2);
        let input = c.rbuf.bytes();
        let (key, used, body) = match &pair {
            Pair::Small { key, len, .. } => (key.clone(), *len, 0),
            Pair::Large { key, head, body } => (key.clone(), *head, *body),
        };
        let mut cmd = Vec::with_capacity(used + 32);
        redis::reply::array(3, &mut cmd);
        redis::reply::bulk(b"MSET", &mut cmd);
        redis::reply::bulk(&input[key.clone()], &mut cmd);
        match &pair {
            Pair::Small { value, .. } => redis::reply::bulk(&input[value.clone()], &mut cmd),
            Pair::Large { body, .. } => {
                cmd.extend_from_slice(format!("${}\r\n", body - 2).as_bytes())
            }
        }
        let server = self.pools[pool].server_for(&input[key.clone()], now);
        let pair_key = input[key].to_vec();
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            c.rbuf.consume(used);
            if let Some(rs) = c.stream.as_mut() {
                // Dropped unless a connection takes it below.
                rs.left = body;
            }
        }
        let op = crate::proto::Op::Redis(redis::RedisOp {
            cmd: redis::Cmd::lookup(b"MSET").expect("MSET is in the table"),
            class: redis::CmdClass::MSet,
        });
        let Some(server) = server else {
            self.fail_unsent(
                ReplyTo::new(token, client_id, Some(seq), Some(idx as u32)),
                pool,
                op,
                &ServerFault::NoServer,
            );
            return;
        };
        self.note_key(pool, &pair_key);
        let st = match self.pair_conn(token, pool, server, client_id, op, now) {
            Ok(st) => st,
            Err(fault) => {
                self.fail_unsent(
                    ReplyTo::new(token, client_id, Some(seq), Some(idx as u32)),
                    pool,
                    op,
                    &fault,
                );
                return;
            }
        };
        let waiter = ReplyTo::new(token, client_id, Some(seq), Some(idx as u32)).waiter();
        self.enqueue(st, waiter, op, |out| out.extend_from_slice(&cmd), now);
        if body == 0 {
            return;
        }
        let Some(Conn::Server(s)) = self.conns.get_mut(st.0) else {
            return;
        };
        s.stream = Some(SrvStream {
            client: token,
            client_id,
        });
        let sid = s.id;
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            if let Some(rs) = c.stream.as_mut() {
                rs.server = Some((st, sid));
            }
        }
    }

    /// The connection of its own a pair-by-pair MSET uses for `server`:
    /// the one it opened before while that is still open (answered
    /// connections are closed), else a new one.
    fn pair_conn(
        &mut self,
        token: Token,
        pool: usize,
        server: usize,
        client_id: u64,
        op: crate::proto::Op,
        now: Instant,
    ) -> Result<Token, ServerFault> {
        let known = match self.conns.get(token.0) {
            Some(Conn::Client(c)) => c
                .stream
                .as_ref()
                .and_then(|rs| rs.pairs.as_ref())
                .and_then(|ps| ps.conns.iter().find(|e| e.0 == server))
                .map(|e| (e.1, e.2)),
            _ => None,
        };
        if let Some((st, sid)) = known {
            if matches!(self.conns.get(st.0), Some(Conn::Server(s)) if s.id == sid) {
                return Ok(st);
            }
        }
        let slot = self.conn_slot(token, pool, server, client_id, op);
        let st = self.server_conn_dedicated(pool, server, slot, now)?;
        let sid = match self.conns.get(st.0) {
            Some(Conn::Server(s)) => s.id,
            _ => return Err(ServerFault::NoServer),
        };
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            if let Some(ps) = c.stream.as_mut().and_then(|rs| rs.pairs.as_mut()) {
                ps.conns.retain(|e| e.0 != server);
                ps.conns.push((server, st, sid));
            }
        }
        Ok(st)
    }

    /// A pair-by-pair MSET ends before its last pair: the pairs not sent
    /// fail with `fault`, so its reply completes.
    fn fail_unsent_pairs(&mut self, token: Token, fault: ServerFault) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        let (pool, client_id) = (c.pool, c.id);
        let Some(rs) = c.stream.as_mut() else {
            return;
        };
        let Some(ps) = rs.pairs.as_ref() else {
            return;
        };
        let (seq, from, to) = (ps.seq, ps.next, ps.next + rs.args_left / 2);
        let op = match c.slot_mut(seq).and_then(|s| s.multi.as_ref()) {
            Some(m) => m.req.op,
            None => return,
        };
        let mut out = Vec::new();
        fault.write_reply(self.pools[pool].proto, op, &mut out);
        for i in from..to {
            self.fragment_done(
                ReplyTo::new(token, client_id, Some(seq), Some(i as u32)),
                out.clone(),
                true,
                false,
            );
        }
    }

    /// Pass what the client's input holds of its streamed request. True
    /// when the request is complete (parse the next one), false when more
    /// input is needed or the client is paused or closing.
    pub(super) fn pass_stream(&mut self, token: Token, now: Instant) -> bool {
        loop {
            let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
                return false;
            };
            let pool = c.pool;
            let Some(rs) = c.stream.as_mut() else {
                return true;
            };
            if let Some(sp) = rs.spool.as_mut() {
                if !sp.draining {
                    if rs.left > 0 {
                        // The large argument, before the key: held.
                        let n = rs.left.min(c.rbuf.len());
                        if n == 0 {
                            return false;
                        }
                        sp.bytes.push(&c.rbuf.bytes()[..n]);
                        c.rbuf.consume(n);
                        rs.left -= n;
                        continue;
                    }
                    let limits = self.pools[pool].limits;
                    match redis::whole_arg(c.rbuf.bytes(), &limits) {
                        Ok(None) => return false,
                        Ok(Some((value, len))) => {
                            sp.bytes.push(&c.rbuf.bytes()[..len]);
                            rs.args_left = rs.args_left.saturating_sub(1);
                            if sp.next_arg == 2 {
                                sp.next_arg = 3;
                                let numkeys = redis::resp::parse_int(&c.rbuf.bytes()[value]);
                                let name = match sp.op {
                                    crate::proto::Op::Redis(op) => op.cmd.name(),
                                    crate::proto::Op::Mc(_) => "",
                                };
                                let checked = redis::eval_numkeys(numkeys, sp.argc, name);
                                c.rbuf.consume(len);
                                if let Err(reply) = checked {
                                    // Answered here; the rest is read and dropped.
                                    rs.spool = None;
                                    self.push_ready(token, reply, false);
                                }
                                continue;
                            }
                            let key = c.rbuf.bytes()[value].to_vec();
                            c.rbuf.consume(len);
                            self.route_spool(token, &key, now);
                            continue;
                        }
                        Err(reply) => {
                            c.stream = None;
                            self.push_ready(token, reply, true);
                            return false;
                        }
                    }
                }
                let Some((st, sid)) = rs.server else {
                    // The server failed: its error is the reply, the rest
                    // of the request is dropped.
                    rs.spool = None;
                    continue;
                };
                if sp.bytes.is_empty() {
                    rs.spool = None;
                    continue;
                }
                if !self.feed_script_spool(token, st, sid, now) {
                    return false;
                }
                continue;
            }
            if rs.left > 0 {
                let n = rs.left.min(c.rbuf.len());
                if n == 0 {
                    return false;
                }
                rs.left -= n;
                let target = rs.server;
                let over = match target {
                    Some((st, sid)) => self.stream_out(token, st, sid, n, false),
                    None => false,
                };
                let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
                    return false;
                };
                c.rbuf.consume(n);
                if let (true, Some((st, _))) = (over, target) {
                    // Write now; pause the client only if the server lags.
                    self.write_server(st, now);
                    let lagging = matches!(self.conns.get(st.0), Some(Conn::Server(s)) if s.wbuf.len() > STREAM_HIGH);
                    if lagging {
                        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
                            if let Some(rs) = c.stream.as_mut() {
                                if rs.server.is_some() {
                                    rs.blocked = true;
                                    return false;
                                }
                            }
                        }
                    }
                }
                continue;
            }
            if rs.pairs.is_some() {
                if let Some((st, sid)) = rs.server.take() {
                    // A large value passed whole.
                    self.end_server_stream(st, sid, now);
                    continue;
                }
                if rs.args_left == 0 {
                    c.stream = None;
                    return true;
                }
                let limits = self.pools[pool].limits;
                match redis::stream_pair(c.rbuf.bytes(), &limits, STREAM_THRESHOLD) {
                    Ok(None) => return false,
                    Ok(Some(pair)) => self.send_pair(token, pair, now),
                    Err(reply) => {
                        self.fail_unsent_pairs(token, ServerFault::UnsentAfterBadPair);
                        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
                            c.stream = None;
                        }
                        self.push_ready(token, reply, true);
                        return false;
                    }
                }
                continue;
            }
            if rs.args_left > 0 {
                let limits = self.pools[pool].limits;
                match redis::stream_arg(c.rbuf.bytes(), &limits) {
                    Ok(None) => return false,
                    Ok(Some((header, n))) => {
                        // The header passes as part of the argument.
                        rs.args_left -= 1;
                        rs.left = header + n + 2;
                        continue;
                    }
                    Err(reply) => {
                        let target = rs.server;
                        c.stream = None;
                        if let Some((st, sid)) = target {
                            self.abort_server_stream(st, sid, ServerFault::HalfSentBadArg);
                        }
                        self.push_ready(token, reply, true);
                        return false;
                    }
                }
            }
            let target = rs.server;
            c.stream = None;
            if let Some((st, sid)) = target {
                self.end_server_stream(st, sid, now);
            }
            return true;
        }
    }

    /// The key of a request held in a spool was read: route it, then the
    /// held bytes drain to its server.
    fn route_spool(&mut self, token: Token, key: &[u8], now: Instant) {
        let Some(Conn::Client(c)) = self.conns.get(token.0) else {
            return;
        };
        let (pool, client_id) = (c.pool, c.id);
        let Some(op) = c
            .stream
            .as_ref()
            .and_then(|rs| rs.spool.as_ref())
            .map(|sp| sp.op)
        else {
            return;
        };
        let mut target = None;
        match self.pools[pool].server_for(key, now) {
            None => {
                self.stats.pool_add(pool, PoolField::ForwardError, 1);
                let mut out = Vec::new();
                ServerFault::NoServer.write_reply(self.pools[pool].proto, op, &mut out);
                self.push_ready(token, out, false);
            }
            Some(server) => {
                let slot = self.conn_slot(token, pool, server, client_id, op);
                let seq = self.push_slot(token, false, Slot::default());
                match self.server_conn_dedicated(pool, server, slot, now) {
                    Ok(st) => {
                        self.note_key(pool, key);
                        let waiter = ReplyTo::new(token, client_id, seq, None).waiter();
                        self.enqueue(st, waiter, op, |_| {}, now);
                        if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
                            s.stream = Some(SrvStream {
                                client: token,
                                client_id,
                            });
                            target = Some((st, s.id));
                        }
                    }
                    Err(fault) => self.fail_unsent(
                        ReplyTo::new(token, client_id, seq, None),
                        pool,
                        op,
                        &fault,
                    ),
                }
            }
        }
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            if let Some(rs) = c.stream.as_mut() {
                rs.server = target;
                match rs.spool.as_mut() {
                    Some(sp) if target.is_some() => sp.draining = true,
                    _ => rs.spool = None,
                }
            }
        }
    }

    /// Pass held bytes to the server as its output drains. True when all
    /// passed, false when the client waits for the server (or is gone).
    fn feed_script_spool(&mut self, ct: Token, st: Token, sid: u64, now: Instant) -> bool {
        loop {
            let (c, s) = match self.conns.get2_mut(ct.0, st.0) {
                Some((Conn::Client(c), Conn::Server(s))) if s.id == sid => (c, s),
                // The server failed: pass_stream sees it.
                _ => return true,
            };
            let room = STREAM_HIGH.saturating_sub(s.wbuf.len());
            let Some(sp) = c.stream.as_mut().and_then(|rs| rs.spool.as_mut()) else {
                return true;
            };
            let n = sp.bytes.front().len().min(room);
            if n > 0 {
                self.stream_out(ct, st, sid, n, true);
                continue;
            }
            if sp.bytes.is_empty() {
                return true;
            }
            // The server has enough queued: write it, and wait if it lags.
            self.write_server(st, now);
            let lagging = matches!(self.conns.get(st.0), Some(Conn::Server(s)) if s.id == sid && s.wbuf.len() >= STREAM_HIGH);
            if lagging {
                if let Some(Conn::Client(c)) = self.conns.get_mut(ct.0) {
                    if let Some(rs) = c.stream.as_mut() {
                        rs.blocked = true;
                    }
                }
                return false;
            }
        }
    }

    /// Copy the first `n` bytes of a client's input (`held`: of its held
    /// bytes, consumed) to the server connection its request streams to.
    /// Returns whether the server's output is now over the high mark.
    fn stream_out(&mut self, ct: Token, st: Token, sid: u64, n: usize, held: bool) -> bool {
        let (c, s) = match self.conns.get2_mut(ct.0, st.0) {
            Some((Conn::Client(c), Conn::Server(s))) if s.id == sid => (c, s),
            _ => return false,
        };
        let before = s.wbuf.len();
        match c.stream.as_mut().and_then(|rs| rs.spool.as_mut()) {
            Some(sp) if held => {
                s.wbuf.extend(&sp.bytes.front()[..n]);
                sp.bytes.consume(n);
            }
            _ => {
                s.wbuf.extend(&c.rbuf.bytes()[..n]);
                super::cluster_stream::spool_passing(c, n);
            }
        }
        s.unsent_bytes += n as u64;
        // The streamed request is the connection's last.
        if let Some(e) = s.inflight.back_mut() {
            if matches!(e.waiter, Waiter::Client { token, id, .. } if token == ct && id == c.id) {
                e.len += n;
            }
        }
        let (pool, server) = (s.pool, s.server);
        let over = s.wbuf.len() > STREAM_HIGH;
        self.stats
            .server_add(pool, server, ServerField::RequestBytes, n as u64);
        self.stats
            .server_add(pool, server, ServerField::InQueueBytes, n as u64);
        if before == 0 {
            self.dirty_servers.push(st);
        }
        over
    }

    /// A streamed request was queued whole: its timeout counts from now.
    fn end_server_stream(&mut self, st: Token, sid: u64, now: Instant) {
        let Some(Conn::Server(s)) = self.conns.get_mut(st.0) else {
            return;
        };
        if s.id != sid {
            return;
        }
        s.stream = None;
        if s.sock.is_tls() && s.tls_cut == 0 {
            // The streamed request ends a TLS record run.
            s.tls_cut = s.wbuf.len();
        }
        for e in s.inflight.iter_mut() {
            e.timed_from = now;
        }
    }

    /// A streamed request cannot be completed: its server connection holds
    /// half a command and is closed (`why` is the client's doing, so the
    /// server is not counted as failing).
    pub(super) fn abort_server_stream(&mut self, st: Token, sid: u64, why: ServerFault) {
        if matches!(self.conns.get(st.0), Some(Conn::Server(s)) if s.id == sid) {
            crate::log_info!("closing a server connection holding half a request: {why}");
            self.close_server(st, why, Instant::now());
        }
    }

    /// The server's output drained below the low mark: read the client
    /// streaming to it again.
    pub(super) fn server_drained(&mut self, st: Token) {
        let Some(Conn::Server(s)) = self.conns.get(st.0) else {
            return;
        };
        let Some(ss) = &s.stream else {
            return;
        };
        if s.wbuf.len() >= STREAM_LOW {
            return;
        }
        let (ct, cid) = (ss.client, ss.client_id);
        if let Some(Conn::Client(c)) = self.conns.get_mut(ct.0) {
            if c.id == cid {
                if let Some(rs) = c.stream.as_mut() {
                    if rs.blocked {
                        rs.blocked = false;
                        self.resume.push(ct);
                    }
                }
            }
        }
    }
}
