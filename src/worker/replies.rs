//! Replies coming back: filling a client's slot, joining the fragments of
//! split requests, and retrying failed reads on other replicas.

use super::conn::{Client, ConnTable, Multi, MultiMode, ReplySlot, ReplyTo};
use super::key_groups::Resend;
use super::pool::PoolRt;
use super::pull::Hold;
use super::spool::Spool;
use super::Worker;
use crate::stats::{PoolField, WorkerField};
use mio::Token;
use std::time::Instant;

/// A reply as it came back: `is_error`, the reply is an error;
/// `unreachable`, the server could not be reached (the reply is the error
/// to send if no other replica can answer).
struct Answer {
    reply: Vec<u8>,
    is_error: bool,
    unreachable: bool,
}

impl Answer {
    /// A read that found nothing, in `proto`.
    fn miss(proto: crate::proto::Protocol) -> Answer {
        Answer {
            reply: proto.empty_read().to_vec(),
            is_error: false,
            unreachable: false,
        }
    }
}

impl Worker<'_> {
    /// Deliver a reply for one request or fragment. `is_error`: the reply
    /// is an error; `unreachable`: the server could not be reached (the
    /// reply is the error to send if no other replica can answer).
    pub(super) fn fragment_done(
        &mut self,
        to: ReplyTo,
        reply: Vec<u8>,
        is_error: bool,
        unreachable: bool,
    ) {
        let ReplyTo {
            token,
            id,
            seq: Some(seq),
            frag,
        } = to
        else {
            return;
        };
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        if c.id() != id {
            return;
        }
        let pool = c.pool();
        let p = &self.pools[pool];
        let on_miss = p.route.zone_fails_over_on_miss();
        let (moved_read, retry) = c.read_retry(seq, frag, unreachable, on_miss);
        let mut answer = Answer {
            reply,
            is_error,
            unreachable,
        };
        let sent_on = match p.send_on(frag, &answer, retry) {
            SendOn::Read => self.send_again(token, id, seq, pool, Resend::Failed(None)),
            SendOn::Fragment(fi) => {
                let sent = self.send_again(token, id, seq, pool, Resend::Failed(Some(fi)));
                let slot = self.conns.client_mut(token.0).and_then(|c| c.slot_mut(seq));
                if let Some(slot) = slot.filter(|_| sent) {
                    // Replaced by its retries: answered, for the merge.
                    slot.fragment_settled();
                }
                sent
            }
            SendOn::WarmCopy => self.send_again(token, id, seq, pool, Resend::WarmHit),
            SendOn::ZoneFragment(fi) => {
                let reply = &mut answer.reply;
                self.send_again(token, id, seq, pool, Resend::Missed { fi, reply });
                false
            }
            SendOn::Fill => false,
        };
        if sent_on && !moved_read {
            return;
        }
        if moved_read {
            let found = !(answer.is_error || self.pools[pool].proto.is_miss(&answer.reply));
            // Asked again: sent on to its next server, or, a memcached read
            // asked of the new owner alone, a miss there pulls the key and
            // the read is asked again behind its copy.
            let missed = !sent_on && !found && !answer.is_error;
            let c = self.conns.client_mut(token.0).filter(|_| missed);
            let pull = c.and_then(|c| c.pull_after_miss(seq));
            if sent_on
                || pull.is_some_and(|p| self.run_held(token, p, Instant::now()) == Hold::Held)
            {
                self.stats.worker_add(WorkerField::MovedRereads, 1);
                return;
            }
            // The client goes on; where the key was found is counted for
            // the next reads' order.
            if let Some(c) = self.conns.client_mut(token.0) {
                if let Some(settled) = c.read_settled(seq, found) {
                    let m = self.pools[c.pool()].migration.as_deref_mut();
                    settled.carry_out(token, &mut self.resume, m);
                }
            }
        }
        let p = &self.pools[pool];
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        // A failed zone fragment may be the last asked for others' misses.
        let zone_failed = p.route.is_zoned() && (unreachable || is_error);
        let filled = c.fill_reply(seq, frag, answer, p.proto, p.failover_zones(), zone_failed);
        if filled.failover {
            self.stats.pool_add(pool, PoolField::ZoneFailovers, 1);
        }
        if filled.head {
            // The first reply owed: what is ready goes to its output.
            let added = c.drain_ready(&mut self.bufs);
            if c.has_output() {
                self.dirty.client(token);
            }
            self.add_out(added);
        }
    }

    /// Deliver a large reply that was held in chunks (see `stream.rs`): to
    /// its slot, or to its fragment of a split request.
    pub(super) fn held_done(
        &mut self,
        token: Token,
        id: u64,
        seq: u64,
        frag: Option<u32>,
        held: Box<Spool>,
    ) {
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        if c.id() != id {
            return;
        }
        let pool = c.pool();
        if c.fill_held_reply(seq, frag, held, self.pools[pool].proto) {
            // The first reply owed: what is ready goes to its output.
            let added = c.drain_ready(&mut self.bufs);
            if c.has_output() {
                self.dirty.client(token);
            }
            self.add_out(added);
        }
        // Held replies count against the output limit too.
        let Some(c) = self.conns.client(token.0) else {
            return;
        };
        if let Some(kept) = c.kept_over(self.ctl.output_limit(&self.pools[pool])) {
            self.close_all(Some(super::closes::Close::OverLimit {
                token,
                bytes: kept,
                how: super::closes::Kept::Held,
            }));
        }
    }
}

/// What a reply does before it fills its slot ([`PoolRt::send_on`]).
#[derive(Debug, PartialEq, Eq)]
enum SendOn {
    /// The read goes on to its next replica (its server unreachable) or
    /// its next zone (it missed); filled as it came when none is left.
    Read,
    /// The fragment's keys go on to their next replicas or zone, its
    /// server unreachable; filled as it came when they have none.
    Fragment(usize),
    /// A warm-up pool's read found its key in the warm pool: the value is
    /// copied to the cold one, and the reply fills the slot.
    WarmCopy,
    /// A zone pool's multi-key read fragment: what it found is kept, its
    /// misses move on (`PoolRt::zone_moves`).
    ZoneFragment(usize),
    /// Filled as it came.
    Fill,
}

impl PoolRt {
    /// What `answer`, to a request or its fragment `frag`, does before it
    /// fills the client's slot. `retry`: the request has a next server to
    /// go to for this answer (`Client::read_retry`).
    #[inline]
    fn send_on(&self, frag: Option<u32>, answer: &Answer, retry: bool) -> SendOn {
        if answer.unreachable {
            return match frag {
                Some(fi) => SendOn::Fragment(fi as usize),
                None if retry => SendOn::Read,
                None => SendOn::Fill,
            };
        }
        if retry {
            // A read that fails over on a miss (a zone pool's, or a
            // moved key's asked where it may be).
            if self.proto.is_miss(&answer.reply) {
                return SendOn::Read;
            }
            if !answer.is_error && self.route.warms() {
                return SendOn::WarmCopy;
            }
            return SendOn::Fill;
        }
        match frag {
            Some(fi) if self.route.is_zoned() && !answer.is_error => {
                SendOn::ZoneFragment(fi as usize)
            }
            _ => SendOn::Fill,
        }
    }
}

/// A client's reads that may go on to another server.
impl Client {
    /// For an answer to slot `seq` (or its fragment `frag`): whether the
    /// slot is a migrating pool's read of a moved key, asked where it may
    /// be (looked at by its slot: the migration may have ended since), and
    /// whether it has a next server to go to for this answer: the server
    /// was `unreachable`, or the read fails over on a miss (a moved key's,
    /// or `on_miss`: a zone pool's that does).
    #[inline]
    fn read_retry(
        &mut self,
        seq: u64,
        frag: Option<u32>,
        unreachable: bool,
        on_miss: bool,
    ) -> (bool, bool) {
        let Some(r) = self.slot_mut(seq).and_then(|s| s.retry.as_ref()) else {
            return (false, false);
        };
        let moved_read = frag.is_none() && r.on_miss;
        let zone_miss = moved_read || frag.is_none() && on_miss;
        (moved_read, unreachable || zone_miss)
    }
}

/// What filling one of a client's slots leads to
/// ([`Client::fill_reply`]).
#[derive(Debug, Default, PartialEq, Eq)]
struct Filled {
    /// The slot is the first reply the client is owed: what is ready goes
    /// to its output now (a later slot waits for the ones before it).
    head: bool,
    /// A zone pool's request was answered by another zone than the local
    /// one (counted as a failover).
    failover: bool,
}

/// A client's replies filled as they come back.
impl Client {
    /// `answer` into slot `seq`, or into its fragment `frag` of a split
    /// request (`ReplySlot::fill`; `zones` as there). `zone_failed`: a
    /// zone pool's fragment failed; when its keys were ones another zone
    /// missed, they are not found here either: answered as a miss.
    /// Nothing when the slot is gone.
    #[inline]
    fn fill_reply(
        &mut self,
        seq: u64,
        frag: Option<u32>,
        mut answer: Answer,
        proto: crate::proto::Protocol,
        zones: Option<&crate::config::Routing>,
        zone_failed: bool,
    ) -> Filled {
        let head = seq == self.head_seq();
        let Some(slot) = self.slot_mut(seq) else {
            return Filled::default();
        };
        if let Some(fi) = frag.filter(|_| zone_failed) {
            if slot.zone_fallback_failed(fi as usize) {
                answer = Answer::miss(proto);
            }
        }
        let failover = slot.fill(frag, answer, proto, zones);
        Filled { head, failover }
    }

    /// A large reply held in chunks into slot `seq`, or into its fragment
    /// `frag`. Whether the slot is the first reply owed (what is ready
    /// then goes to the output); false when the slot is gone.
    fn fill_held_reply(
        &mut self,
        seq: u64,
        frag: Option<u32>,
        held: Box<Spool>,
        proto: crate::proto::Protocol,
    ) -> bool {
        let head = seq == self.head_seq();
        let Some(slot) = self.slot_mut(seq) else {
            return false;
        };
        slot.fill_held(frag, held, proto);
        head
    }
}

impl PoolRt {
    /// A zone pool's routing, by which a reply tells whether another zone
    /// than the local one answered; none for a warm-up pool and a pool
    /// without zones: their replies count no failover.
    #[inline]
    fn failover_zones(&self) -> Option<&crate::config::Routing> {
        (self.route.is_zoned() && !self.route.warms()).then_some(&self.cfg.routing)
    }
}

/// A client's slot filled as its replies come back.
impl ReplySlot {
    /// `answer` into this slot, or into its fragment `frag` of a split
    /// request (merged once the last fragment is in). `zones`: a zone
    /// pool's routing (not a warm-up pool's). True when a zone pool's
    /// request was answered by another zone than the local one.
    #[inline]
    fn fill(
        &mut self,
        frag: Option<u32>,
        answer: Answer,
        proto: crate::proto::Protocol,
        zones: Option<&crate::config::Routing>,
    ) -> bool {
        let Answer {
            reply,
            is_error,
            unreachable,
        } = answer;
        match (frag, self.multi.as_mut()) {
            (Some(fi), Some(m)) => {
                if let Some(f) = m.frags.get_mut(fi as usize) {
                    f.answered = true;
                    // A zone's error sends the write on to the next zone.
                    f.failed = unreachable || (is_error && m.mode == MultiMode::Zones);
                    if is_error && m.mode == MultiMode::Split && m.error.is_none() {
                        m.error = Some(reply);
                    } else {
                        f.reply = reply;
                    }
                }
                m.remaining = m.remaining.saturating_sub(1);
                if m.mode == MultiMode::Zones {
                    finish_zones(self)
                } else if m.remaining == 0 {
                    finish_multi(proto, self) && zones.is_some()
                } else {
                    false
                }
            }
            // A zone of a write already answered: nothing waits for it.
            (Some(_), None) => false,
            (None, _) => {
                // A zone pool's read: answered by the zone it was last
                // sent to.
                let other = zones.is_some_and(|z| {
                    self.retry.as_ref().is_some_and(|r| {
                        let server = r.replicas.get(r.next.wrapping_sub(1));
                        server.is_some_and(|&s| z.zone_of(s) != 0)
                    })
                });
                self.out = reply;
                self.ready = true;
                self.retry = None;
                other
            }
        }
    }

    /// A large reply held in chunks, into this slot or its fragment `frag`.
    fn fill_held(&mut self, frag: Option<u32>, held: Box<Spool>, proto: crate::proto::Protocol) {
        match (frag, self.multi.as_mut()) {
            (Some(fi), Some(m)) => {
                if let Some(f) = m.frags.get_mut(fi as usize) {
                    f.held = Some(held);
                    f.answered = true;
                }
                m.remaining = m.remaining.saturating_sub(1);
                if m.remaining == 0 {
                    finish_multi(proto, self);
                }
            }
            (Some(_), None) => {}
            (None, _) => {
                self.held = Some(held);
                self.ready = true;
                self.retry = None;
            }
        }
    }

    /// A fragment was replaced by retries: count it as answered.
    fn fragment_settled(&mut self) {
        if let Some(m) = self.multi.as_mut() {
            m.remaining = m.remaining.saturating_sub(1);
        }
    }
}

/// Every fragment of a split request answered: its reply, merged. True
/// when a replicated write was answered by another replica (zone) than
/// its first one.
fn finish_multi(proto: crate::proto::Protocol, slot: &mut ReplySlot) -> bool {
    let mut other = false;
    if let Some(mut m) = slot.multi.take() {
        match m.error.take() {
            Some(e) => slot.out = e,
            None if m.frags.iter().any(|f| f.held.is_some()) => {
                slot.held = Some(merge_held(&mut m));
            }
            None => {
                slot.out = merge(proto, &m);
                other = match m.mode {
                    MultiMode::Replicate => m
                        .frags
                        .iter()
                        .find(|f| !f.failed)
                        .is_some_and(|f| f.attempt != 0),
                    // A zone pool's multi-key read that another zone
                    // helped answer.
                    MultiMode::Split => m
                        .frags
                        .iter()
                        .any(|f| f.attempt != 0 && !f.failed && !f.keys.is_empty()),
                    _ => false,
                };
            }
        }
    }
    slot.ready = true;
    other
}

/// An async zone write: answered once the first zone (in zone order) that
/// has not failed has answered, or, every zone failed, with the first
/// zone's error. True when it was answered by another zone than the local
/// one.
fn finish_zones(slot: &mut ReplySlot) -> bool {
    let Some(m) = slot.multi.as_mut() else {
        return false;
    };
    let pick = match m.frags.iter().position(|f| !(f.answered && f.failed)) {
        Some(i) if m.frags[i].answered => i,
        // A zone before any success is still to answer.
        Some(_) => return false,
        None => 0,
    };
    let f = &mut m.frags[pick];
    let other = !f.failed && f.attempt != 0;
    slot.out = std::mem::take(&mut f.reply);
    slot.multi = None;
    slot.ready = true;
    other
}

/// The merge of a split Redis MGET one of whose fragment replies was large
/// and held in chunks: built in chunks too.
fn merge_held(m: &mut Multi) -> Box<Spool> {
    let mut frags: Vec<(&[usize], Spool)> = m
        .frags
        .iter_mut()
        .map(|f| {
            let spool = match f.held.take() {
                Some(h) => *h,
                None => {
                    let mut s = Spool::default();
                    s.push(&f.reply);
                    s
                }
            };
            (f.keys.as_slice(), spool)
        })
        .collect();
    let mut out = Box::<Spool>::default();
    let is_mget = matches!(m.req.op, crate::proto::Op::Redis(op) if op.class == crate::proto::redis::CmdClass::MGet);
    if !is_mget
        || crate::proto::redis::merge_held::merge_mget(m.req.keys.len(), &mut frags, &mut out)
            .is_err()
    {
        // Only MGET replies carry values; anything else large is not a
        // reply a split command can have.
        out = Box::default();
        let mut err = Vec::new();
        crate::proto::redis::merge_held::unexpected_reply(&mut err);
        out.push(&err);
    }
    out
}

fn merge(proto: crate::proto::Protocol, m: &Multi) -> Vec<u8> {
    // Room for the fragments' replies together: a split read's merge is
    // their values with one header or terminator (a little more only for
    // keys the client repeated), so it is written with no regrowth.
    let room: usize = m.frags.iter().map(|f| f.reply.len()).sum();
    let mut out = Vec::with_capacity(room + 16);
    match m.mode {
        MultiMode::Broadcast => {
            let replies: Vec<&[u8]> = m.frags.iter().map(|f| f.reply.as_slice()).collect();
            proto.merge_broadcast(m.req.op, &replies, &mut out);
        }
        MultiMode::Info(figures) => {
            let replies: Vec<&[u8]> = m.frags.iter().map(|f| f.reply.as_slice()).collect();
            crate::proto::redis::info::merge_replies(&replies, figures, &mut out);
        }
        // (Zones: answered by `finish_zones`; this is its fallback.)
        MultiMode::Replicate | MultiMode::Zones => {
            let pick = m
                .frags
                .iter()
                .find(|f| !f.failed)
                .or_else(|| m.frags.first());
            if let Some(f) = pick {
                out.extend_from_slice(&f.reply);
            }
        }
        MultiMode::Split => {
            let frags: Vec<(&[usize], &[u8])> = m
                .frags
                .iter()
                .map(|f| (f.keys.as_slice(), f.reply.as_slice()))
                .collect();
            proto.merge_responses(&m.bytes, &m.req, &frags, &mut out);
        }
    }
    out
}

#[cfg(test)]
#[path = "replies_tests.rs"]
mod tests;
