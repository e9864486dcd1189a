//! Sending requests to servers: one server, split per server, every
//! server, and for replicated memcached pools every replica (writes) or
//! one replica with the next tried on failure (reads). Where a request
//! goes beyond one server is planned by the type that decides it, as a
//! [`SendPlan`], and carried out here (`send_plan`) without a decision of
//! its own.

use super::conn::Open;
use super::conn::{ConnTable, Origin, ReplySlot, ReplyTo, Waiter};
use super::fault::ServerFault;
use super::key_groups::{Placed, Resend};
use super::pool::Wire;
use super::send_plan::{CopyPlan, NotSent, SendPlan, Unsent, Write};
use super::Worker;
use crate::proto::{Op, Request};
use crate::route::{Plan, Target};
use crate::stats::{PoolField, WorkerField};
use mio::Token;
use std::time::Instant;

impl Worker<'_> {
    /// Write a client's request as its pool planned it (`Wire`): on its
    /// client's connection slot to the server (opened if it is not), its
    /// keys stripped of their route's prefix if the plan says, its reply
    /// going `to` its client; on failure the error goes to the waiting
    /// slot (`fail_unsent`).
    pub(super) fn send_or_fail(
        &mut self,
        to: ReplyTo,
        pool: usize,
        wire: Wire,
        write: impl FnOnce(&mut Vec<u8>),
        op: Op,
        now: Instant,
    ) {
        let st = match self.server_conn(pool, wire.server, wire.slot, now, Open::Shared) {
            Ok(st) => st,
            Err(fault) => return self.fail_unsent(to, pool, op, &fault),
        };
        if !wire.strip {
            return self.enqueue(st, to.waiter(), op, write, now);
        }
        let routing = self.pools[pool].cfg.routing.clone();
        let write = |out: &mut Vec<u8>| {
            let start = out.len();
            write(out);
            super::routes::strip_keys(&routing, out, start);
        };
        self.enqueue(st, to.waiter(), op, write, now);
    }

    /// A key-routed request, sent where its route's plan says: the
    /// server that owns its key, its slot owner, a replica, its zones; a
    /// multi-key one as its pool splits it (`PoolRt::split_send`), or as
    /// a single-key one when its keys are on one server.
    pub(super) fn forward(
        &mut self,
        at: Origin,
        plan: &Plan,
        req: &Request,
        bytes: &[u8],
        owner: Option<u32>,
        now: Instant,
    ) {
        self.stats.count_mc_request(req);
        let single = req.route == crate::proto::Route::Single;
        if !single {
            if let Some(sends) = self.pools[at.pool].split_send(at.client_id, req, bytes, now) {
                if let Ok(s) = &sends {
                    self.stats
                        .pool_add(at.pool, PoolField::Fragments, s.to.len() as u64);
                }
                return self.send_plan(at.reply_to(), at.pool, req, bytes, sends, now);
            }
        }
        match plan.target {
            Target::Blocking => {
                let d = super::blocking::plan(&mut self.pools[at.pool], at, req, bytes, now);
                return self.send_dedicated(at.token, d, now);
            }
            Target::Scan => {
                let sends = self.pools[at.pool].scan_plan(bytes);
                return self.send_plan(at.reply_to(), at.pool, req, bytes, sends, now);
            }
            _ if plan.replica_first => {
                let p = &mut self.pools[at.pool];
                if let Some(o) = p.replica_read(req, bytes, at.client_id, now) {
                    let sends = p.owners_plan(o, req, bytes, at.client_id);
                    return self.send_plan(at.reply_to(), at.pool, req, bytes, sends, now);
                }
            }
            _ => {}
        }
        let (server, slot) = match (plan.target, owner) {
            (Target::Replicas, _) => {
                let p = &mut self.pools[at.pool];
                let o = p.replicas(req, bytes, now);
                let sends = p.owners_plan(o, req, bytes, at.client_id);
                return self.send_plan(at.reply_to(), at.pool, req, bytes, sends, now);
            }
            (Target::Zones(step), _) => {
                let p = &mut self.pools[at.pool];
                let o = p.zone_owners(step, req, bytes, now);
                let sends = p.owners_plan(o, req, bytes, at.client_id);
                return self.send_plan(at.reply_to(), at.pool, req, bytes, sends, now);
            }
            (Target::Slot, _) => {
                let key = req.routing_key(bytes);
                let server = self.pools[at.pool].cluster_server(key.as_ref(), req.op, at.client_id);
                (server, ReplySlot::redirected(req, bytes))
            }
            // Placed already (a migrating pool's key that did not move).
            (Target::Key, Some(server)) if single => (server as usize, ReplySlot::default()),
            // Key, Keyless (Blocking and Scan went above).
            _ => {
                let keyless = plan.target == Target::Keyless;
                match self.pools[at.pool].place(req, bytes, keyless, at.client_id, now) {
                    Placed::Server(server) => (server, ReplySlot::default()),
                    Placed::Apart(out) => return self.conns.push_ready(at.token, out, false),
                    Placed::NoServer => {
                        let unsent = Unsent::no_server(at.token, req);
                        return self.fail_unsent(unsent, at.pool, req.op, &ServerFault::NoServer);
                    }
                }
            }
        };
        let seq = self.conns.push_slot(at.token, req.noreply, slot);
        let p = &self.pools[at.pool];
        let proto = p.proto;
        let wire = p.wire(server, at.client_id, self.conns.resp3(at.token), req.op);
        let to = ReplyTo::new(at.token, at.client_id, seq, None);
        // Written at once only when it is the client's last request: a
        // pipeline's requests share one write (cheaper than a write each).
        // A large one the server gets as it came is written from the
        // client's input, and with nothing queued before it on the
        // connection only what the socket does not take is copied.
        if self.ends_input && self.pools[at.pool].writes_through(req, bytes.len()) {
            match self.server_conn(at.pool, wire.server, wire.slot, now, Open::Shared) {
                Ok(st) => self.enqueue(st, to.waiter(), req.op, super::queue::Through(bytes), now),
                Err(fault) => self.fail_unsent(to, at.pool, req.op, &fault),
            }
            return;
        }
        self.send_or_fail(
            to,
            at.pool,
            wire,
            |out| proto.write_request(req, bytes, out),
            req.op,
            now,
        );
    }

    /// A request that was not sent (`Unsent`: its slot pushed, or
    /// refused before one was): counted, and its error goes where it says,
    /// a slot's as its server's reply would (which may send it on to
    /// another replica).
    pub(super) fn fail_unsent(
        &mut self,
        unsent: impl Into<Unsent>,
        pool: usize,
        op: Op,
        fault: &ServerFault,
    ) {
        let unsent = unsent.into();
        self.stats.pool_add(pool, PoolField::ForwardError, 1);
        if unsent.tried() {
            // A cluster node that cannot be reached may have failed over.
            self.pools[pool].cluster_node_failed();
        }
        let Some(out) = unsent.reply(fault, self.pools[pool].proto, op) else {
            return;
        };
        match unsent {
            Unsent::Slot(to) => self.fragment_done(to, out, true, true),
            Unsent::Ready { token, .. } => self.conns.push_ready(token, out, false),
        }
    }

    /// Carry out a request's plan (`SendPlan`): its slot pushed, then
    /// each server sent its part; a request the plan does not send is
    /// answered as it says.
    pub(super) fn send_plan(
        &mut self,
        to: ReplyTo,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        plan: Result<SendPlan, NotSent>,
        now: Instant,
    ) {
        let SendPlan {
            slot,
            to: servers,
            frag,
            write,
            bounded,
        } = match plan {
            Ok(plan) => plan,
            Err(NotSent::NoServer) => {
                let unsent = Unsent::no_server(to.token, req);
                return self.fail_unsent(unsent, pool, req.op, &ServerFault::NoServer);
            }
            Err(NotSent::Answered(out)) => {
                if !out.is_empty() {
                    self.conns.push_ready(to.token, out, false);
                }
                return;
            }
        };
        let seq = match slot {
            Some(slot) => self.conns.push_slot(to.token, req.noreply, slot),
            None => to.seq,
        };
        let proto = self.pools[pool].proto;
        for (i, (server, keys)) in servers.iter().enumerate() {
            let (server, frag) = (*server, frag.map(|f| f + i as u32));
            let to = ReplyTo { seq, frag, ..to };
            let resp3 = self.conns.resp3(to.token);
            let wire = self.pools[pool].wire(server, to.id, resp3, req.op);
            if bounded.get(i) == Some(&true) {
                let full = self
                    .server_conn(pool, server, wire.slot, now, Open::Shared)
                    .is_ok_and(|st| {
                        !self
                            .conns
                            .server(st.0)
                            .is_some_and(super::shadow::has_copy_room)
                    });
                if full {
                    self.stats.worker_add(WorkerField::ShadowDropped, 1);
                    let mut out = Vec::new();
                    ServerFault::ZoneQueueFull.write_reply(proto, req.op, &mut out);
                    self.fragment_done(to, out, true, true);
                    continue;
                }
            }
            let write = |out: &mut Vec<u8>| match &write {
                Write::Request => proto.write_request(req, bytes, out),
                Write::Raw => out.extend_from_slice(bytes),
                Write::Bytes(b) => out.extend_from_slice(b),
                Write::Fragment => proto.write_fragment(bytes, req, keys, out),
            };
            self.send_or_fail(to, pool, wire, write, req.op, now);
        }
    }

    /// Carry out the plan of a request the proxy sends for itself
    /// (`CopyPlan`), of `of` (the copied request and its bytes; `None`
    /// when it writes the proxy's own): each part queued on its server's
    /// connection (its client's slot, or the first), its reply going to
    /// the plan's waiter. A part with no server, or a bounded one whose
    /// connection is full, is dropped (a bounded one counted); a warm-up
    /// copy whose request is not queued is over. Returns whether it was
    /// queued whole (false for no plan).
    pub(super) fn send_copy(
        &mut self,
        copy: Option<CopyPlan>,
        of: Option<(&Request, &[u8])>,
        now: Instant,
    ) -> bool {
        let Some(copy) = copy else {
            return false;
        };
        let (pool, proto) = (copy.pool, self.pools[copy.pool].proto);
        let mut whole = true;
        for (server, keys) in &copy.to {
            let slot = |s| match copy.client {
                Some((token, id)) => {
                    let resp3 = self.conns.resp3(token);
                    (s, self.pools[pool].slot_for(s, id, resp3, copy.op))
                }
                None => (s, 0),
            };
            let st = server
                .map(slot)
                .and_then(|(s, cs)| self.server_conn(pool, s, cs, now, Open::Shared).ok());
            let room = |st: &Token| {
                !copy.bounded
                    || self
                        .conns
                        .server(st.0)
                        .is_some_and(super::shadow::has_copy_room)
            };
            let Some(st) = st.filter(room) else {
                if copy.bounded {
                    self.stats.worker_add(WorkerField::ShadowDropped, 1);
                }
                if let Waiter::Warm { idx } = copy.waiter {
                    self.warms.unsent(idx as usize);
                }
                whole = false;
                continue;
            };
            let write = |out: &mut Vec<u8>| match (&copy.write, of) {
                (Write::Bytes(b), _) => out.extend_from_slice(b),
                (Write::Raw, Some((_, bytes))) => out.extend_from_slice(bytes),
                (Write::Request, Some((req, bytes))) => proto.write_request(req, bytes, out),
                (Write::Fragment, Some((req, bytes))) => {
                    proto.write_fragment(bytes, req, keys, out)
                }
                // A plan of the request's bytes with no request: none is built.
                (_, None) => {}
            };
            self.enqueue(st, Some(copy.waiter), copy.op, write, now);
        }
        whole
    }

    /// Send on what a reply of `token`'s slot `seq` leads to, as its
    /// pool plans it (`PoolRt::resend`, `why`): the warm-up copies it
    /// starts, then its read whole to its next server, or keys of it as
    /// new fragments of the same request. False when nothing is sent
    /// again.
    pub(super) fn send_again(
        &mut self,
        token: Token,
        client_id: u64,
        seq: u64,
        pool: usize,
        why: Resend<'_>,
    ) -> bool {
        let slot = self.conns.client_mut(token.0).and_then(|c| c.slot_mut(seq));
        let Some((copies, again)) = slot.map(|slot| self.pools[pool].resend(slot, why)) else {
            return false;
        };
        let (proto, now) = (self.pools[pool].proto, Instant::now());
        for (key, warm, cold) in copies {
            let copy = self.warms.start(pool, proto, &key, (warm, cold));
            self.send_copy(copy, None, now);
        }
        let Some(again) = again else {
            return false;
        };
        if again.fragments > 0 {
            self.stats
                .pool_add(pool, PoolField::Fragments, again.fragments);
        }
        let to = ReplyTo::new(token, client_id, Some(seq), None);
        let (req, bytes) = (&again.req, &again.bytes);
        self.send_plan(to, pool, req, bytes, Ok(again.plan), now);
        true
    }
}
