//! A request on a server connection of its own (`Open::Dedicated`): a
//! blocking command, the head of a large request streamed as it arrives,
//! an EVAL routed once its held key is read, one pair of an MSET sent
//! pair by pair, a transaction's command on its pinned connection, a
//! subscriber's command on its push connection. The feature that owns
//! the request decides where it goes and what its connection is for
//! (`blocking::plan`, `stream.rs`'s `single_plan`, `spool_plan` and
//! `pair_plan`, `txn::pulled`, `pubsub::push_plan`), as a `Dedicated`
//! (`send_plan.rs`, beside the other plans, so that planners and this
//! executor do not import each other);
//! `Worker::send_dedicated` carries it out without a decision of its own:
//! the connection opened and named for its use, the reply slot, the
//! bytes queued, a failure answered as its use says (`Failed`).

use super::conn::{Conn, ConnTable, Open, ReplySlot, ReplyTo, ServerRef, Waiter};
use super::fault::ServerFault;
use super::send_plan::{Dedicated, Failed, Reply, Sent, Unsent, Usage};
use super::Worker;
use crate::proto::Op;
use mio::Token;
use slab::Slab;
use std::time::Instant;

/// What is sent on a connection just opened before the request: these
/// bytes, their answer dropped.
pub(super) type First = Option<(&'static [u8], Op)>;

/// Connection `st`, just opened to `server` for client `ct`'s request,
/// is named for its use: a blocking command's connection blocks its
/// client; an MSET's is the one its next pairs for that server take; a
/// transaction's is pinned to its client (and the MULTI answered here
/// goes first); a subscriber's carries its pushes. A connection gone is
/// `ServerFault::NoServer`.
pub(super) fn opened(
    conns: &mut Slab<Conn>,
    ct: Token,
    st: Token,
    usage: Usage,
) -> Result<(Token, First), ServerFault> {
    let s = conns.server_mut(st.0).ok_or(ServerFault::NoServer)?;
    let r = ServerRef::new(st, s.id());
    let server = s.server();
    match usage {
        Usage::Blocking => {
            s.set_blocking();
            super::blocking::block_on(conns, ct, r);
        }
        Usage::Stream => {}
        Usage::Pair { server, .. } => {
            if let Some(rs) = conns.client_mut(ct.0).and_then(|c| c.stream_mut()) {
                rs.set_pair_conn(server, r);
            }
        }
        Usage::Pin { name } => {
            s.pin(Some(ct));
            let t = conns.client_mut(ct.0).and_then(|c| c.txn_mut());
            let multi = t.and_then(|t| t.pinned(r, server, name));
            return Ok((st, multi.zip(crate::proto::redis::txn::internal_op())));
        }
        Usage::Push => {
            let c = conns.client_mut(ct.0).ok_or(ServerFault::NoServer)?;
            let id = c.id();
            if c.subs().is_none() {
                c.set_subs(Some(Box::default()));
            }
            if let Some(subs) = c.subs_mut() {
                subs.opened(server, r);
            }
            if let Some(s) = conns.server_mut(st.0) {
                s.subscribe_for(ct, id);
            }
        }
    }
    Ok((st, None))
}

/// Client `ct`'s request could not go out on a connection of its own:
/// what its use kept for it that is not worth keeping goes (a
/// transaction with nothing in it, `txn::tidy`).
fn unsent(conns: &mut Slab<Conn>, ct: Token, usage: Usage) {
    if let Usage::Pin { .. } = usage {
        super::txn::tidy(conns, ct);
    }
}

impl Worker<'_> {
    /// Carry out client `token`'s `Dedicated` request: the connection
    /// opened (or the one it names) and named for its use, the reply slot
    /// pushed, the bytes queued; a failure answered in the slot. When the
    /// rest of the request streams, its client's `ReqStream` is told where
    /// to (`ReqStream::routed`; nowhere when it failed).
    pub(super) fn send_dedicated(&mut self, token: Token, d: Dedicated<'_>, now: Instant) {
        let Some(cid) = self.conns.client(token.0).map(|c| c.id()) else {
            return;
        };
        let (pool, op, usage) = (d.pool, d.op, d.usage);
        let target = 'sent: {
            let Some(server) = d.server else {
                match d.reply {
                    Reply::Pushed => {}
                    Reply::New { noreply, .. } => {
                        let unsent = Unsent::Ready { token, noreply };
                        self.fail_unsent(unsent, pool, op, &ServerFault::NoServer)
                    }
                    Reply::At(to) => self.fail_unsent(to, pool, op, &ServerFault::NoServer),
                }
                break 'sent None;
            };
            let st = match d.conn {
                Some(st) => Ok((st, None)),
                None => {
                    let slot = self.pools[pool].slot_for(server, cid, self.conns.resp3(token), op);
                    self.server_conn(pool, server, slot, now, Open::Dedicated)
                        .and_then(|st| opened(&mut self.conns, token, st, usage))
                }
            };
            let st = match st {
                Ok((st, first)) => {
                    if let Some((bytes, op)) = first {
                        let first = |o: &mut Vec<u8>| o.extend_from_slice(bytes);
                        self.enqueue(st, Some(Waiter::Internal), op, first, now);
                    }
                    st
                }
                Err(fault) => {
                    match (usage.failed(), d.reply) {
                        (Failed::Counted, reply) => {
                            let to = match reply {
                                Reply::New { noreply, .. } => {
                                    let seq =
                                        self.conns.push_slot(token, noreply, ReplySlot::default());
                                    ReplyTo::new(token, cid, seq, None)
                                }
                                Reply::At(to) => to,
                                Reply::Pushed => ReplyTo::client(token, cid),
                            };
                            self.fail_unsent(to, pool, op, &fault);
                        }
                        (Failed::Told, _) => {
                            let mut out = Vec::new();
                            fault.write_reply(self.pools[pool].proto, op, &mut out);
                            self.conns.push_ready(token, out, false);
                        }
                        (Failed::Silent, _) => {}
                    }
                    unsent(&mut self.conns, token, usage);
                    break 'sent None;
                }
            };
            if let Some(key) = d.note {
                self.recorder.note_key(pool, key);
            }
            let to = match d.reply {
                Reply::New { slot, noreply } => {
                    ReplyTo::new(token, cid, self.conns.push_slot(token, noreply, slot), None)
                }
                Reply::At(to) => to,
                Reply::Pushed => ReplyTo::client(token, cid),
            };
            match d.write {
                Sent::Bytes(b) => self.enqueue(
                    st,
                    to.waiter(),
                    op,
                    |o: &mut Vec<u8>| o.extend_from_slice(b),
                    now,
                ),
                Sent::Request(req, bytes) => {
                    let proto = self.pools[pool].proto;
                    let write = |o: &mut Vec<u8>| proto.write_request(req, bytes, o);
                    self.enqueue(st, to.waiter(), op, write, now);
                }
            }
            if !usage.streams() {
                break 'sent None;
            }
            super::stream::stream_to(&mut self.conns, st, token, cid)
        };
        if usage.streams() {
            if let Some(rs) = self.conns.client_mut(token.0).and_then(|c| c.stream_mut()) {
                rs.routed(target);
            }
        }
    }
}

#[cfg(test)]
#[path = "dedicated_tests.rs"]
mod tests;
