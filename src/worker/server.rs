//! Server side of the data path: connections (lazy or preconnected),
//! batched writes, reads, failures and ejection (replies are matched to
//! their requests in `server_reply.rs`).

use super::conn::{Conn, ConnTable, Server, ServerRef, Waiter};
use super::fault::{Ending, IoFault, ServerFault};
use super::{Worker, READ_BUDGET, READ_CHUNK};
use crate::stats::{PoolField, ServerField, WorkerField};
use mio::{Interest, Token};
use std::io::{ErrorKind, Write};
use std::time::Instant;

impl Worker<'_> {
    /// The server connection `r` names, if it is still open (its token
    /// was not reused by another connection since).
    #[inline]
    pub(super) fn server_ref(&self, r: ServerRef) -> Option<&Server> {
        match self.conns.get(r.token.0) {
            Some(Conn::Server(s)) if s.id() == r.id => Some(s),
            _ => None,
        }
    }

    /// [`Worker::server_ref`], to change it.
    #[inline]
    pub(super) fn server_ref_mut(&mut self, r: ServerRef) -> Option<&mut Server> {
        match self.conns.get_mut(r.token.0) {
            Some(Conn::Server(s)) if s.id() == r.id => Some(s),
            _ => None,
        }
    }

    /// The open connection in slot `slot` of a server, connecting if needed.
    pub(super) fn server_conn(
        &mut self,
        pool: usize,
        server: usize,
        slot: usize,
        now: Instant,
    ) -> Result<Token, ServerFault> {
        self.server_conn_for(pool, server, slot, now, false, false)
    }

    /// A new connection to a server for one streamed request only: it
    /// takes no other request (so none waits behind a slow upload) and is
    /// closed once that request is answered. `slot` gives its protocol
    /// (RESP2 or RESP3) as for the shared connections.
    pub(super) fn server_conn_dedicated(
        &mut self,
        pool: usize,
        server: usize,
        slot: usize,
        now: Instant,
    ) -> Result<Token, ServerFault> {
        self.server_conn_for(pool, server, slot, now, false, true)
    }

    /// Close a dedicated connection whose request was answered (or whose
    /// client left).
    pub(super) fn retire_server(&mut self, token: Token) {
        let Some(_) = self.conns.server(token.0) else {
            return;
        };
        let Conn::Server(mut s) = self.conns.remove(token.0) else {
            return;
        };
        let _ = self.poll.registry().deregister(s.sock_mut());
        self.forget_server(token, &mut s);
    }

    /// A shared connection to an address the server left: it takes no new
    /// request and closes once what it was sent is answered.
    pub(super) fn retire_when_answered(&mut self, token: Token) {
        let Some(s) = self.conns.server_mut(token.0) else {
            return;
        };
        s.retire_when_answered();
        if s.is_done() {
            self.retire_server(token);
        }
    }

    /// A server connection leaves the worker: its connection slot is freed
    /// and its queues leave the server's gauges.
    fn forget_server(&mut self, token: Token, s: &mut super::conn::Server) {
        count_queued(&self.stats, s);
        let (pool, server, slot) = (s.pool(), s.server(), s.slot());
        let (unsent, unsent_bytes, sent, sent_bytes) = s.queue_gauges();
        if self.pools[pool].servers[server].conns[slot] == Some(token) {
            self.pools[pool].servers[server].conns[slot] = None;
        }
        self.stats
            .server_sub(pool, server, ServerField::ServerConnections, 1);
        self.stats
            .server_sub(pool, server, ServerField::InQueue, unsent);
        self.stats
            .server_sub(pool, server, ServerField::InQueueBytes, unsent_bytes);
        self.stats
            .server_sub(pool, server, ServerField::OutQueue, sent);
        self.stats
            .server_sub(pool, server, ServerField::OutQueueBytes, sent_bytes);
    }

    /// The connection in `slot` to a server, opened if there is none (or
    /// a new one apart from the slot, `dedicated`).
    #[inline]
    pub(super) fn server_conn_for(
        &mut self,
        pool: usize,
        server: usize,
        slot: usize,
        now: Instant,
        probe: bool,
        dedicated: bool,
    ) -> Result<Token, ServerFault> {
        // The open connection, nearly every request's: looked up here,
        // inline, without the call to the opener's much larger frame.
        if let (false, Some(t)) = (dedicated, self.pools[pool].servers[server].conns[slot]) {
            if self.conns.server(t.0).is_some() {
                return Ok(t);
            }
        }
        self.open_server_conn(pool, server, slot, now, probe, dedicated)
    }

    #[inline(never)]
    fn open_server_conn(
        &mut self,
        pool: usize,
        server: usize,
        slot: usize,
        now: Instant,
        probe: bool,
        dedicated: bool,
    ) -> Result<Token, ServerFault> {
        if let Some(fault) = self.pools[pool].refuse_connect(server, now, probe) {
            return Err(fault);
        }
        self.pools[pool].look_up_again(server, now);
        let p = &self.pools[pool];
        let Some(endpoint) = p.servers[server].endpoint.clone() else {
            return Err(ServerFault::Unresolved);
        };
        let opened = crate::net::connect(&endpoint, p.cfg.tcpkeepalive)
            .and_then(|s| p.tls.connected(s, &p.servers[server].tls_host));
        let mut sock = match opened {
            Ok(s) => s,
            Err(e) => {
                let fault = ServerFault::Connect(IoFault::from(&e));
                self.stats
                    .server_add(pool, server, ServerField::ServerErr, 1);
                self.pools[pool].note_failure(pool, server, now, &fault, &self.stats);
                return Err(fault);
            }
        };
        let id = self.next_id();
        let entry = self.conns.vacant_entry();
        let token = Token(entry.key());
        if let Err(e) =
            self.poll
                .registry()
                .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
        {
            return Err(ServerFault::Register(IoFault::from(&e)));
        }
        entry.insert(Conn::Server(Box::new(Server::new(
            sock,
            id,
            (pool, server, slot),
            now,
            dedicated,
        ))));
        if !dedicated {
            self.pools[pool].servers[server].conns[slot] = Some(token);
        }
        self.stats
            .server_add(pool, server, ServerField::ServerConnections, 1);
        self.stats.worker_add(WorkerField::ServerConnects, 1);
        self.server_handshake(token, pool, server, slot, now);
        Ok(token)
    }

    /// Redis: AUTH, SELECT and, on a RESP3 slot, `HELLO 3` before any
    /// client request uses the connection.
    fn server_handshake(
        &mut self,
        token: Token,
        pool: usize,
        server: usize,
        slot: usize,
        now: Instant,
    ) {
        if !self.pools[pool].cfg.redis {
            return;
        }
        let steps = {
            let p = &self.pools[pool];
            crate::proto::redis::handshake::handshake(
                &crate::proto::redis::handshake::ServerSetup {
                    password: p.cfg.redis_auth.as_deref(),
                    user: p.cfg.security.redis_auth_user.as_deref(),
                    db: p.cfg.redis_db,
                    read_replicas: p.cfg.cluster_read_replicas,
                    resp3: p.servers[server].slot_is_resp3(slot),
                },
            )
        };
        for (op, bytes) in steps {
            self.enqueue(
                token,
                Some(Waiter::Internal),
                op,
                |out| out.extend_from_slice(&bytes),
                now,
            );
        }
    }

    pub(super) fn server_writable(&mut self, token: Token, now: Instant) {
        let Some(s) = self.conns.server_mut(token.0) else {
            return;
        };
        if s.is_connecting() {
            match s.sock_mut().take_error() {
                Ok(None) => {
                    s.set_connected();
                    let (pool, server) = (s.pool(), s.server());
                    crate::log_debug!(
                        "pool '{}': connected to server '{}'",
                        self.pools[pool].cfg.name,
                        self.pools[pool].servers[server].name
                    );
                }
                Ok(Some(e)) | Err(e) => {
                    // Still connecting: no request was written.
                    self.close_server(token, ServerFault::Connect(IoFault::from(&e)), now);
                    return;
                }
            }
        }
        self.write_server(token, now);
    }

    /// Write queued requests (one write for everything queued this iteration).
    pub(super) fn write_server(&mut self, token: Token, now: Instant) {
        if matches!(self.conns.server(token.0), Some(s) if s.rstream().is_some_and(|r| r.blocked)) {
            // Requests may now wait behind a reply paused for its
            // lagging client: if they are someone else's, read on.
            self.spool_rest(token);
        }
        // A connection fed from a spool is refilled as it drains, and
        // written again while its socket takes more.
        loop {
            self.write_server_once(token, now);
            if !self.refill_feed(token, now) {
                return;
            }
        }
    }

    /// Count what was queued this pass on connections not written in it
    /// (still connecting, or their socket full).
    pub(super) fn count_queued_all(&mut self) {
        for t in std::mem::take(&mut self.counting) {
            if let Some(s) = self.conns.server_mut(t.0) {
                count_queued(&self.stats, s);
            }
        }
    }

    fn write_server_once(&mut self, token: Token, now: Instant) {
        let Some(s) = self.conns.server_mut(token.0) else {
            return;
        };
        if s.is_connecting() {
            return;
        }
        if s.sock().is_tls() {
            if let Err(e) = s.sock_mut().flush() {
                self.close_server(token, ServerFault::Socket(IoFault::from(&e)), now);
                return;
            }
        }
        if let Err(e) = s.write_out() {
            self.close_server(token, ServerFault::Socket(IoFault::from(&e)), now);
            return;
        }
        let streaming = s.stream().is_some();
        count_queued(&self.stats, s);
        if let Some((n, b)) = s.all_written() {
            let (pool, server) = (s.pool(), s.server());
            self.stats.server_sub(pool, server, ServerField::InQueue, n);
            self.stats
                .server_sub(pool, server, ServerField::InQueueBytes, b);
            self.stats
                .server_add(pool, server, ServerField::OutQueue, n);
            self.stats
                .server_add(pool, server, ServerField::OutQueueBytes, b);
        }
        if streaming {
            self.server_drained(token);
        }
    }

    pub(super) fn read_server(&mut self, token: Token, now: Instant, hup: bool) {
        let mut total = 0;
        let mut got = false;
        loop {
            let Some(s) = self.conns.server_mut(token.0) else {
                return;
            };
            if s.rstream().is_some_and(|r| r.blocked) {
                // A streamed reply's client lags: read on when it drains.
                return;
            }
            if total >= READ_BUDGET {
                // Hand what arrived on (a large reply may be streaming)
                // before reading more.
                self.process_replies(token, now);
                total = 0;
                continue;
            }
            match s.read_in(READ_CHUNK) {
                Ok((0, _)) => {
                    self.process_replies(token, now);
                    self.close_server(token, ServerFault::Closed, now);
                    return;
                }
                Ok((n, short)) => {
                    total += n;
                    got = true;
                    if short && !hup {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close_server(token, ServerFault::Socket(IoFault::from(&e)), now);
                    return;
                }
            }
        }
        if let Some(s) = self.conns.server(token.0) {
            if s.sock().is_tls() && !s.wbuf().is_empty() {
                // Requests written during the TLS handshake wait inside
                // rustls up to its limit; the rest waits here until the
                // handshake ends, which a read finishes, not an EPOLLOUT.
                self.write_server(token, now);
            }
        }
        self.process_replies(token, now);
        self.set_read_mark(token, got, now);
    }

    /// Close a server connection for `fault`; every request waiting on it
    /// gets its error reply. Only a fault of the server's counts towards
    /// its backoff and ejection (not a connection this side gave up on).
    pub(super) fn close_server(&mut self, token: Token, fault: ServerFault, now: Instant) {
        let Some(_) = self.conns.server(token.0) else {
            return;
        };
        let Conn::Server(mut s) = self.conns.remove(token.0) else {
            return;
        };
        let _ = self.poll.registry().deregister(s.sock_mut());
        let (pool, server) = (s.pool(), s.server());
        if let Some(ss) = s.set_stream(None) {
            self.stream_lost(token, s.id(), ss.client, ss.client_id);
        }
        // The client that got part of a streamed reply cannot be answered
        // (one that got none of it gets the error below).
        let half_answered = s
            .set_rstream(None)
            .filter(|r| r.passed > 0 && r.hold.is_none())
            .and_then(|r| r.client);
        self.forget_server(token, &mut s);
        if let Some(sub) = s.push_to() {
            // Its subscriptions there are gone: the subscriber is told by
            // its connection closing, as by a Redis of its own.
            if self.client_ref(sub).is_some() {
                crate::log_info!(
                    "pool '{}': server '{}' lost under a subscriber: closing it",
                    self.pools[pool].cfg.name,
                    self.pools[pool].servers[server].name
                );
                self.close_client(sub.token, true);
            }
        }
        self.count_ending(pool, server, &fault, s.inflight().len(), now);
        let proto = self.pools[pool].proto;
        for f in s.take_inflight() {
            if matches!(f.waiter, Waiter::SlotMap) {
                self.pools[pool].cluster_map_failed();
            }
            if let Waiter::Pull {
                token: ct,
                id,
                idx,
                part,
            } = f.waiter
            {
                self.pull_reply(ct, id, idx, part, None, now);
            }
            if let Waiter::Warm { idx } = f.waiter {
                self.warm_reply(idx, None);
            }
            if let Some(to) = f.waiter.reply_to() {
                let mut out = Vec::new();
                fault.write_reply(proto, f.op, &mut out);
                self.stats.pool_add(pool, PoolField::ForwardError, 1);
                self.fragment_done(to, out, true, true);
            }
        }
        if let Some(client) = half_answered {
            if self.client_ref(client).is_some() {
                self.close_client(client.token, true);
            }
        }
        if let Some(ct) = s.pinned() {
            self.txn_lost(ct, token, s.id());
        }
    }

    /// The server connection a client streams a request to is gone: the
    /// rest of the request is dropped as it arrives (its reply is the
    /// connection's error), and a client paused for it reads again.
    fn stream_lost(&mut self, token: Token, sid: u64, ct: Token, cid: u64) {
        let Some(c) = self.conns.client_mut(ct.0) else {
            return;
        };
        if c.id() != cid {
            return;
        }
        if let Some(rs) = c
            .stream_mut()
            .filter(|rs| rs.server == Some(ServerRef::new(token, sid)))
        {
            rs.server = None;
            if rs.blocked {
                rs.blocked = false;
                self.resume.push(ct);
            }
        }
    }

    /// A closed server connection in the counters and the log; a failure
    /// of the server's own (not an idle connection it ended) counts towards
    /// its ejection, and in a cluster pool the slot map is asked again.
    fn count_ending(
        &mut self,
        pool: usize,
        server: usize,
        fault: &ServerFault,
        waiting: usize,
        now: Instant,
    ) {
        let how = fault.ending();
        let field = match how {
            Ending::Eof => ServerField::ServerEof,
            Ending::Error => ServerField::ServerErr,
            Ending::Timeout => ServerField::ServerTimedout,
        };
        self.stats.server_add(pool, server, field, 1);
        if how == Ending::Eof && waiting == 0 {
            return;
        }
        let level = if fault.is_tls() {
            crate::log::level::WARN
        } else {
            crate::log::level::INFO
        };
        crate::log::write(
            level,
            format_args!(
                "pool '{}': server '{}' closed: {} ({} requests failed)",
                self.pools[pool].cfg.name, self.pools[pool].servers[server].name, fault, waiting
            ),
        );
        if fault.is_fault() {
            self.pools[pool].note_failure(pool, server, now, fault, &self.stats);
        }
        if self.pools[pool].cluster.is_some() {
            self.pools[pool].cluster_node_failed();
        }
    }
}

/// Add the requests queued on `s` since the last count to the shared
/// counters (requests and request bytes, the in_queue gauges). Counting once
/// per pass and connection, not per request, keeps a pipelined batch from
/// writing the same four shared words once per request; readers see them
/// at most one pass of the loop late.
fn count_queued(stats: &crate::stats::shm::StatsSlot<'_>, s: &mut Server) {
    let Some((n, b)) = s.take_uncounted() else {
        return;
    };
    let (pool, server) = (s.pool(), s.server());
    stats.server_add(pool, server, ServerField::Requests, n);
    stats.server_add(pool, server, ServerField::RequestBytes, b);
    stats.server_add(pool, server, ServerField::InQueue, n);
    stats.server_add(pool, server, ServerField::InQueueBytes, b);
}
