//! Redis blocking commands (BLPOP, BLMOVE, BZPOPMIN, XREAD ... BLOCK, ...):
//! each on a server connection of its own, so nothing queued behind it
//! waits and no pool `timeout` cuts it; the connection closes with its
//! reply or its client.

use super::conn::Open;
use super::conn::Origin;
use super::conn::{Conn, ConnTable, ReplySlot, ReplyTo, ServerRef};
use super::Worker;
use crate::proto::Request;
use std::time::Instant;

impl Worker<'_> {
    /// A blocking command (BLPOP, BLMOVE, XREAD ... BLOCK, ...) on a server
    /// connection of its own: nothing queued behind it waits, no pool
    /// `timeout` cuts it, and it closes with its reply or its client.
    pub(super) fn forward_blocking(
        &mut self,
        at: Origin,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) {
        let key = req.routing_key(bytes);
        let server = self.pools[at.pool].key_server(key.as_ref(), req.op, at.client_id, now);
        let Some(server) = server else {
            self.reply_no_server(at.token, at.pool, req);
            return;
        };
        let seq = self.push_slot(at.token, req.noreply, ReplySlot::default());
        let to = ReplyTo::new(at.token, at.client_id, seq, None);
        let slot = self.conn_slot(at.token, at.pool, server, at.client_id, req.op);
        let st = match self.server_conn(at.pool, server, slot, now, Open::Dedicated) {
            Ok(st) => st,
            Err(fault) => {
                self.fail_unsent(to, at.pool, req.op, &fault);
                return;
            }
        };
        let Some(s) = self.conns.server_mut(st.0) else {
            return;
        };
        s.set_blocking();
        let sid = s.id();
        // Forget connections of earlier blocking requests already answered.
        let live: Vec<ServerRef> = match self.conns.get(at.token.0) {
            Some(Conn::Client(c)) => c
                .blocked()
                .iter()
                .copied()
                .filter(|&r| self.conns.server_ref(r).is_some())
                .collect(),
            _ => Vec::new(),
        };
        if let Some(c) = self.conns.client_mut(at.token.0) {
            c.block_on(live, ServerRef::new(st, sid));
        }
        let proto = self.pools[at.pool].proto;
        self.enqueue(
            st,
            to.waiter(),
            req.op,
            |out| proto.write_request(req, bytes, out),
            now,
        );
    }
}
