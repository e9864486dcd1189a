//! Redis pub/sub through the proxy. A channel lives on the server its name
//! hashes to, as a key would: PUBLISH goes there, and so does a SUBSCRIBE
//! to it. Sharded channels (SSUBSCRIBE, SPUBLISH) too. In a Redis Cluster
//! pool a channel's slot names its node; a classic message reaches every
//! node (the cluster bus carries it), so a client's classic channels and
//! patterns are all subscribed on one node, and its sharded channels on
//! their slots' nodes. A subscribed client gets server connections of its own, one per
//! server it listens on (a pattern listens on every server, since any
//! channel may match), in push mode: whatever those servers send is passed
//! to the client as it arrives, not matched to requests.
//!
//! The client sees one connection's worth: the count in each (un)subscribe
//! confirmation is its own total, kept here (each server counts only what
//! it holds), and a pattern is confirmed once, by the first server's
//! connection (the others' confirmations are dropped). When the count
//! reaches 0 the client leaves subscribed mode and its connections close.
//! A RESP2 client in subscribed mode may send only (P)SUBSCRIBE,
//! (P)UNSUBSCRIBE, PING and QUIT, as redis-server enforces; a RESP3 client
//! may send anything (its messages are push frames). A subscriber that
//! does not read is bounded by `client_output_limit`; a server lost under
//! a subscriber closes the subscriber (its subscriptions there are gone,
//! as with a Redis of its own that went away).
//!
//! The subscriber's state and what its commands and pushes do to it are
//! `Subs` (`subscriber.rs`), tested without sockets; here the worker
//! opens its connections and moves the bytes.

use super::conn::Open;
use super::conn::{ClientRef, Conn, ConnTable};
use super::handle::ServerRef;
use super::subscriber::{self, subscribe_op, Subs, SubsStep};
use super::Worker;
use crate::proto::redis::pubsub;
use crate::proto::{Op, Parse, Request};
use mio::Token;
use std::time::Instant;

impl Worker<'_> {
    /// Pub/sub commands, and what a subscribed client sends: true when
    /// handled here.
    pub(super) fn pubsub_dispatch(
        &mut self,
        token: Token,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> bool {
        let Op::Redis(op) = req.op else {
            return false;
        };
        let Some(c) = self.conns.client(token.0) else {
            return false;
        };
        let name = op.cmd.name();
        let (pool, resp3) = (c.pool(), c.session().resp3);
        let quit = matches!(
            req.route,
            crate::proto::Route::Local(crate::proto::Local::Quit(_))
        );
        let is_pubsub = op.class == crate::proto::redis::CmdClass::PubSub;
        match subscriber::offer(name, is_pubsub, bytes, c.subs().is_some(), resp3, quit) {
            SubsStep::Pass => false,
            SubsStep::Answer(out) => {
                self.conns.push_ready(token, out, false);
                true
            }
            SubsStep::Command => {
                self.pubsub_command(token, pool, resp3, name, bytes, now);
                true
            }
        }
    }

    /// (P|S)SUBSCRIBE and (P|S)UNSUBSCRIBE: the client's subscriptions
    /// change (`Subs::command`), and the commands it says go out on the
    /// client's connections to those servers.
    fn pubsub_command(
        &mut self,
        token: Token,
        pool: usize,
        resp3: bool,
        name: &str,
        bytes: &[u8],
        now: Instant,
    ) {
        let args = pubsub::arguments(bytes);
        let (mut subs, client_id) = match self.conns.get_mut(token.0) {
            Some(Conn::Client(c)) => (c.take_subs().map(|b| *b).unwrap_or_default(), c.id()),
            _ => return,
        };
        let sends = subs.command(name, args, resp3, &mut self.pools[pool], client_id, now);
        if !sends.reply.is_empty() {
            self.conns.push_ready(token, sends.reply, false);
        }
        if let Some(op) = subscribe_op() {
            for (server, cmd) in sends.to {
                if let Some(st) = self.pubsub_conn(token, pool, &mut subs, server, now) {
                    // No waiter: what the server sends back is pushed
                    // (`pubsub_frames`).
                    self.enqueue(st, None, op, |o| o.extend_from_slice(&cmd), now);
                }
            }
        }
        let keep = subs.keep();
        if let Some(c) = self.conns.client_mut(token.0) {
            c.set_subs(keep.then(|| Box::new(subs)));
        }
    }

    /// The client's push connection to `server`, opened if needed.
    fn pubsub_conn(
        &mut self,
        token: Token,
        pool: usize,
        subs: &mut Subs,
        server: usize,
        now: Instant,
    ) -> Option<Token> {
        if let Some(r) = subs.conn(server) {
            if self.conns.server_ref(r).is_some() {
                return Some(r.token);
            }
        }
        let client_id = self.conns.client(token.0)?.id();
        let slot = self.conn_slot(token, pool, server, client_id, subscribe_op()?);
        let st = self
            .server_conn(pool, server, slot, now, Open::Dedicated)
            .ok()?;
        let s = self.conns.server_mut(st.0)?;
        s.subscribe_for(token, client_id);
        subs.opened(server, ServerRef::new(st, s.id()));
        Some(st)
    }

    /// Bytes from a push connection: every whole frame goes to its client
    /// (confirmations with the client's own count, `Subs::pushed`).
    /// Returns the bytes used.
    pub(super) fn pubsub_frames(&mut self, st: Token, input: &[u8]) -> usize {
        let Some(s) = self.conns.server(st.0) else {
            return 0;
        };
        let Some(ClientRef { token: ct, id: cid }) = s.push_to() else {
            return 0;
        };
        let (pool, server) = (s.pool(), s.server());
        let proto = self.pools[pool].proto;
        let Some(op) = subscribe_op() else {
            return 0;
        };
        let cluster = self.pools[pool].cluster.is_some();
        let mut off = 0;
        while off < input.len() {
            let Ok(Parse::Done(rsp)) = proto.parse_response(&input[off..], op) else {
                break;
            };
            let frame = &input[off..off + rsp.len];
            off += rsp.len;
            // The connection's own handshake (AUTH, SELECT, HELLO 3) is
            // answered first: those replies are not the client's.
            if let Some(s) = self.conns.server_mut(st.0) {
                if s.pop_answered().is_some() {
                    continue;
                }
            }
            let Some(c) = self.conns.client_mut(ct.0) else {
                continue;
            };
            if c.id() != cid {
                continue;
            }
            let Some(subs) = c.subs_mut() else {
                continue;
            };
            let Some(out) = subs.pushed(frame, server, cluster) else {
                continue;
            };
            let done = subs.is_idle();
            self.conns.push_ready(ct, out, false);
            if let Some(c) = self.conns.client_mut(ct.0) {
                let added = c.drain_ready(&mut self.bufs);
                self.dirty.client(ct);
                self.add_out(added);
            }
            self.check_output_limit(ct);
            if done {
                // It subscribes to nothing any more: its connections close.
                let subs = self.conns.client_mut(ct.0).and_then(|c| c.take_subs());
                self.retire_all(subs.into_iter().flat_map(|s| s.conns).map(|(_, r)| r));
            }
        }
        off
    }
}
