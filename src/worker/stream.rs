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
//! Replies: a reply of any shape (a bulk string, an array, map or set,
//! nested) for the request at the head of its client's replies is passed
//! to the client as it arrives once it is known to be large: it declares a
//! bulk of [`STREAM_THRESHOLD`] bytes or more, or that much of it is
//! already buffered (an LRANGE of many small elements). A
//! [`ReplyCursor`](crate::proto::redis::ReplyCursor) follows where the reply
//! is, holding back at most an unfinished header line, and checks it as
//! the whole-reply parser would. The server is not read while that client
//! has more than [`STREAM_HIGH`] bytes unwritten; a client that reads none
//! of it for [`STREAM_STALL`] is closed (the server connection is shared).
//! A large reply that cannot pass yet (an earlier reply of its client is
//! still awaited, or it is one fragment of a split MGET) is held in a
//! [`super::spool::Spool`] as it arrives (64 KiB chunks, never one
//! allocation of its size; the server is read on, as its connection is
//! shared) and given to its slot at the end; a held reply reaches the
//! client's output at most [`super::conn::HELD_HIGH`] at a time, as it
//! drains, and a split MGET is merged from the held fragments chunk by
//! chunk (`held.rs`). Error replies are buffered whole.
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
    Conn, Fragment, Hold, Multi, MultiMode, PairStream, RepStream, ReqStream, Slot, SpoolStream,
    SrvStream, Waiter,
};
use super::server::Ending;
use super::{Worker, STREAM_HIGH, STREAM_LOW, STREAM_STALL, STREAM_THRESHOLD};
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
        if !c.session.authenticated && redis::local::needs_auth(req) {
            return StreamStart::No;
        }
        // Redis Cluster: a request whose key came before its large argument
        // is routed by slot and kept in a spool to follow MOVED and ASK
        // (cluster_stream.rs); any other is buffered whole.
        let cluster = self.pools[pool].cluster.is_some();
        if self.pools[pool].cfg.replicas > 1 || (cluster && req.keys.is_empty()) {
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
                        let waiter = seq.map(|seq| Waiter::Client {
                            token,
                            id: client_id,
                            seq,
                            frag: None,
                        });
                        self.enqueue(st, waiter, req.op, |out| out.extend_from_slice(bytes), now);
                        if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
                            s.stream = Some(SrvStream {
                                client: token,
                                client_id,
                            });
                        }
                        target = Some((st, sid));
                    }
                    Err(msg) => {
                        let seq = self.push_slot(token, false, Slot::default());
                        self.fail_unsent(token, client_id, seq, None, pool, req.op, &msg);
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
                token,
                client_id,
                Some(seq),
                Some(idx as u32),
                pool,
                op,
                "Connection refused",
            );
            return;
        };
        self.note_key(pool, &pair_key);
        let st = match self.pair_conn(token, pool, server, client_id, op, now) {
            Ok(st) => st,
            Err(msg) => {
                self.fail_unsent(
                    token,
                    client_id,
                    Some(seq),
                    Some(idx as u32),
                    pool,
                    op,
                    &msg,
                );
                return;
            }
        };
        let waiter = Waiter::Client {
            token,
            id: client_id,
            seq,
            frag: Some(idx as u32),
        };
        self.enqueue(st, Some(waiter), op, |out| out.extend_from_slice(&cmd), now);
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
    ) -> Result<Token, String> {
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
            _ => return Err("Connection refused".to_string()),
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
    /// fail with `why`, so its reply completes.
    fn fail_unsent_pairs(&mut self, token: Token, why: &str) {
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
        self.pools[pool].proto.server_error(op, why, &mut out);
        for i in from..to {
            self.fragment_done(
                token,
                client_id,
                seq,
                Some(i as u32),
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
                            self.stats.pool_add(pool, PoolField::ClientErr, 0);
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
                        self.fail_unsent_pairs(token, "Protocol error in the request");
                        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
                            c.stream = None;
                        }
                        self.stats.pool_add(pool, PoolField::ClientErr, 0);
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
                            self.abort_server_stream(st, sid, "protocol error in a request");
                        }
                        self.stats.pool_add(pool, PoolField::ClientErr, 0);
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
                self.pools[pool]
                    .proto
                    .server_error(op, "Connection refused", &mut out);
                self.push_ready(token, out, false);
            }
            Some(server) => {
                let slot = self.conn_slot(token, pool, server, client_id, op);
                let seq = self.push_slot(token, false, Slot::default());
                match self.server_conn_dedicated(pool, server, slot, now) {
                    Ok(st) => {
                        self.note_key(pool, key);
                        let waiter = seq.map(|seq| Waiter::Client {
                            token,
                            id: client_id,
                            seq,
                            frag: None,
                        });
                        self.enqueue(st, waiter, op, |_| {}, now);
                        if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
                            s.stream = Some(SrvStream {
                                client: token,
                                client_id,
                            });
                            target = Some((st, s.id));
                        }
                    }
                    Err(msg) => self.fail_unsent(token, client_id, seq, None, pool, op, &msg),
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
        for e in s.inflight.iter_mut() {
            e.timed_from = now;
        }
    }

    /// A streamed request cannot be completed: its server connection holds
    /// half a command and is closed.
    pub(super) fn abort_server_stream(&mut self, st: Token, sid: u64, why: &str) {
        if matches!(self.conns.get(st.0), Some(Conn::Server(s)) if s.id == sid) {
            crate::log_info!("closing a server connection holding half a request: {why}");
            self.close_server_as(st, Ending::Error, why, Instant::now(), false);
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

    /// The client's output drained below the low mark: read the server
    /// streaming a reply to it again.
    pub(super) fn client_drained(&mut self, ct: Token) {
        let Some(Conn::Client(c)) = self.conns.get_mut(ct.0) else {
            return;
        };
        let Some((st, sid)) = c.rstream_from else {
            return;
        };
        let low = c.wbuf.len() < STREAM_LOW;
        if low {
            c.rstream_from = None;
        }
        // The client took some of it: not stalled.
        if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
            if let (true, Some(r)) = (s.id == sid, s.rstream.as_mut()) {
                r.progress = Instant::now();
            }
        }
        if low {
            self.unblock_reply(st, sid, false);
        }
    }

    /// Let a server paused by a streamed reply read again (`drop_client`:
    /// the client went away, the rest of the reply is dropped).
    pub(super) fn unblock_reply(&mut self, st: Token, sid: u64, drop_client: bool) {
        if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
            if s.id == sid {
                if let Some(r) = s.rstream.as_mut() {
                    if drop_client {
                        r.client = None;
                    }
                    if r.blocked {
                        r.blocked = false;
                        self.resume.push(st);
                    }
                }
            }
        }
    }

    /// Whether the reply starting `input` (incomplete, for request `front`;
    /// `hint`: the length the input must reach, 0 if unknown) is streamed:
    /// a bulk string or an aggregate of any shape that is large (its
    /// declared size, or the part of it already here, reaches
    /// [`STREAM_THRESHOLD`]) and that its client waits for at the head of
    /// its replies, not as a fragment of a multi-key request nor as a read
    /// that may be retried on another replica.
    pub(super) fn reply_stream_start(
        &self,
        input: &[u8],
        hint: usize,
        front: &super::conn::Inflight,
    ) -> Option<RepStream> {
        // Error replies stay whole (a cluster pool reads redirections in
        // them); a one-line reply has nothing to pass before its end.
        if !matches!(
            input.first(),
            Some(b'$' | b'*' | b'%' | b'~' | b'>' | b'|' | b'=')
        ) {
            return None;
        }
        if hint <= STREAM_THRESHOLD && input.len() < STREAM_THRESHOLD {
            return None;
        }
        let Waiter::Client {
            token: ct,
            id,
            seq,
            frag,
        } = front.waiter
        else {
            return None;
        };
        let Some(Conn::Client(c)) = self.conns.get(ct.0) else {
            return None;
        };
        let i = usize::try_from(seq.checked_sub(c.head_seq)?).ok()?;
        let f = c.pending.get(i)?;
        if c.id != id || f.ready || f.retry.is_some() {
            return None;
        }
        let hold = match (frag, &f.multi) {
            (None, None) if i == 0 => None,
            (None, None) => Some(Hold {
                spool: Box::default(),
                seq,
                frag,
            }),
            // Of split requests only MGET replies carry values.
            (Some(_), Some(m))
                if m.mode == MultiMode::Split
                    && matches!(m.req.op, crate::proto::Op::Redis(op) if op.class == redis::CmdClass::MGet) =>
            {
                Some(Hold {
                    spool: Box::default(),
                    seq,
                    frag,
                })
            }
            _ => return None,
        };
        Some(RepStream {
            client: Some((ct, id)),
            cursor: redis::ReplyCursor::new(),
            passed: 0,
            hold,
            blocked: false,
            progress: Instant::now(),
        })
    }

    /// Pass what the server's input holds of a streamed reply. True when
    /// the reply is complete (parse the next one).
    pub(super) fn pass_reply_stream(&mut self, st: Token, now: Instant) -> bool {
        loop {
            let Some(Conn::Server(s)) = self.conns.get_mut(st.0) else {
                return false;
            };
            let sid = s.id;
            let Some(rs) = s.rstream.as_mut() else {
                return true;
            };
            if rs.blocked {
                return false;
            }
            let (n, done) = match rs.cursor.advance(s.rbuf.bytes()) {
                Ok(step) => step,
                Err(e) => {
                    let (pool, server) = (s.pool, s.server);
                    crate::log_warn!(
                        "pool '{}': server '{}': bad reply: {}",
                        self.pools[pool].cfg.name,
                        self.pools[pool].servers[server].name,
                        e.0
                    );
                    self.close_server_as(st, Ending::Error, "Invalid argument", now, true);
                    return false;
                }
            };
            if n == 0 && !done {
                return false;
            }
            rs.passed += n;
            rs.progress = now;
            let mut added = 0;
            let mut over = None;
            if let (true, Some((ct, cid))) = (rs.hold.is_some(), rs.client) {
                // Held for its slot, as long as its client is there.
                match self.conns.get2_mut(st.0, ct.0) {
                    Some((Conn::Server(s), Conn::Client(c))) if c.id == cid => {
                        let super::conn::Server { rbuf, rstream, .. } = &mut **s;
                        if let Some(h) = rstream.as_mut().and_then(|r| r.hold.as_mut()) {
                            h.spool.push(&rbuf.bytes()[..n]);
                        }
                    }
                    Some((Conn::Server(s), _)) => {
                        if let Some(r) = s.rstream.as_mut() {
                            r.hold = None;
                            r.client = None;
                        }
                    }
                    _ => {}
                }
            } else if let Some((ct, cid)) = rs.client {
                match self.conns.get2_mut(st.0, ct.0) {
                    Some((Conn::Server(s), Conn::Client(c))) if c.id == cid => {
                        if c.wbuf.capacity() == 0 {
                            c.wbuf = self.bufs.take();
                        }
                        c.wbuf.extend(&s.rbuf.bytes()[..n]);
                        added = n;
                        if !done && c.wbuf.len() > STREAM_HIGH {
                            c.rstream_from = Some((st, sid));
                            if let Some(rs) = s.rstream.as_mut() {
                                rs.blocked = true;
                            }
                            over = Some(ct);
                        }
                        self.dirty_clients.push(ct);
                    }
                    Some((Conn::Server(s), _)) => {
                        if let Some(rs) = s.rstream.as_mut() {
                            rs.client = None;
                        }
                    }
                    _ => {}
                }
            }
            if let Some(Conn::Server(s)) = self.conns.get_mut(st.0) {
                s.rbuf.consume(n);
            }
            self.add_out(added);
            if done {
                self.finish_reply_stream(st, now);
                return true;
            }
            if let Some(ct) = over {
                // Write now; the server stays paused only if the client lags.
                if self.flush_client(ct) {
                    self.client_drained(ct);
                }
            }
        }
    }

    /// The last byte of a streamed reply passed: account it like any reply.
    fn finish_reply_stream(&mut self, st: Token, now: Instant) {
        let Some(Conn::Server(s)) = self.conns.get_mut(st.0) else {
            return;
        };
        let Some(rs) = s.rstream.take() else {
            return;
        };
        let Some(front) = s.inflight.pop_front() else {
            return;
        };
        let (pool, server) = (s.pool, s.server);
        s.sent = s.sent.saturating_sub(1);
        s.sent_bytes = s.sent_bytes.saturating_sub(front.len as u64);
        self.stats
            .server_sub(pool, server, ServerField::OutQueue, 1);
        self.stats
            .server_sub(pool, server, ServerField::OutQueueBytes, front.len as u64);
        self.stats
            .server_add(pool, server, ServerField::Responses, 1);
        self.stats
            .server_add(pool, server, ServerField::ResponseBytes, rs.passed as u64);
        self.pools[pool].record_success(server, now);
        self.record_reply(pool, server, &front, now);
        let Some((ct, cid)) = rs.client else {
            return;
        };
        if let Some(h) = rs.hold {
            self.held_done(ct, cid, h.seq, h.frag, h.spool);
            return;
        }
        let Some(Conn::Client(c)) = self.conns.get_mut(ct.0) else {
            return;
        };
        if let Waiter::Client { seq, .. } = front.waiter {
            if c.id == cid && c.head_seq == seq {
                c.pending.pop_front();
                c.head_seq += 1;
                c.rstream_from = None;
                let added = c.drain_ready();
                self.dirty_clients.push(ct);
                self.add_out(added);
            }
        }
    }

    /// Close the clients that have not read any of a streamed reply for
    /// [`STREAM_STALL`]: the server connection they hold is shared, and the
    /// replies of the other clients on it wait behind theirs.
    pub(super) fn sweep_stalled_streams(&mut self, now: Instant) {
        let stalled: Vec<(Token, u64)> = self
            .conns
            .iter()
            .filter_map(|(_, c)| match c {
                Conn::Server(s) => s.rstream.as_ref().and_then(|r| {
                    (r.blocked && now.duration_since(r.progress) > STREAM_STALL)
                        .then_some(r.client)
                        .flatten()
                }),
                _ => None,
            })
            .collect();
        for (ct, cid) in stalled {
            if matches!(self.conns.get(ct.0), Some(Conn::Client(c)) if c.id == cid) {
                crate::log_notice!(
                    "client not reading a large reply for {} s: closing it",
                    STREAM_STALL.as_secs()
                );
                self.close_client(ct, true);
            }
        }
    }
}
