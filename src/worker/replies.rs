//! Replies coming back: filling a client's slot, joining the fragments of
//! split requests, and retrying failed reads on other replicas.

use super::conn::{Client, ConnTable, Multi, MultiMode, ReplySlot, ReplyTo};
use super::pool::PoolRt;
use super::spool::Spool;
use super::Worker;
use crate::stats::{PoolField, WorkerField};
use mio::Token;

/// Where a reply goes: client `id` at `token`, its slot `seq` (and
/// fragment `frag` of a split request), in `pool`.
#[derive(Clone, Copy)]
struct At {
    token: Token,
    id: u64,
    seq: u64,
    frag: Option<u32>,
    pool: usize,
}

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
        let at = At {
            token,
            id,
            seq,
            frag,
            pool: c.pool(),
        };
        let route = &self.pools[at.pool].route;
        // A migrating pool's read of a moved key, asked where it may be
        // (looked at by its slot: the migration may have ended since).
        let moved_read = frag.is_none()
            && c.slot_mut(seq)
                .and_then(|s| s.retry.as_ref())
                .is_some_and(|r| r.on_miss);
        let zone_miss = moved_read || frag.is_none() && route.zone_fails_over_on_miss();
        let has_retry =
            (unreachable || zone_miss) && c.slot_mut(seq).is_some_and(|s| s.retry.is_some());
        let mut answer = Answer {
            reply,
            is_error,
            unreachable,
        };
        let sent_on = if unreachable {
            self.retry_unreachable(at, has_retry)
        } else {
            self.zone_answer(at, zone_miss && has_retry, &mut answer)
        };
        if sent_on {
            if moved_read {
                self.stats.worker_add(WorkerField::MovedRereads, 1);
            }
            return;
        }
        if moved_read {
            let found = !(answer.is_error || self.pools[at.pool].proto.is_miss(&answer.reply));
            // A memcached read asked of the new owner alone: a miss there
            // pulls the key, and the read is asked again behind its copy.
            if !found && !answer.is_error && self.pull_missed(token, seq, std::time::Instant::now())
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
        if let Some(fi) =
            frag.filter(|_| self.pools[at.pool].route.is_zoned() && (unreachable || is_error))
        {
            let fell_back = self
                .conns
                .client_mut(token.0)
                .and_then(|c| c.slot_mut(seq))
                .is_some_and(|slot| slot.zone_fallback_failed(fi as usize));
            if fell_back {
                // Keys another zone missed, not found here either.
                answer = Answer::miss(self.pools[at.pool].proto);
            }
        }
        let p = &self.pools[at.pool];
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        let filled = c.fill_reply(seq, frag, answer, p.proto, p.failover_zones());
        if filled.failover {
            self.stats.pool_add(at.pool, PoolField::ZoneFailovers, 1);
        }
        if filled.head {
            self.drain_head(token);
        }
    }

    /// A server that could not be reached: the read, or the fragment, sent
    /// to the next replica when there is one (true: sent on).
    #[inline]
    fn retry_unreachable(&mut self, at: At, has_retry: bool) -> bool {
        let At {
            token,
            id,
            seq,
            frag,
            pool,
        } = at;
        if frag.is_none() && has_retry && self.retry_read(token, id, seq, pool) {
            return true;
        }
        if let Some(fi) = frag {
            if self.retry_fragment(token, id, seq, fi as usize, pool) {
                if let Some(slot) = self.conns.client_mut(token.0).and_then(|c| c.slot_mut(seq)) {
                    slot.fragment_settled();
                }
                return true;
            }
        }
        false
    }

    /// A zone pool's answer: a read that missed (`missed_retry`: it has a
    /// next zone) is sent on to the next zone (true), a warm-up pool's hit
    /// is copied to the cold pool, and a multi-key read's fragment keeps
    /// what it found, its misses going elsewhere.
    #[inline]
    fn zone_answer(&mut self, at: At, missed_retry: bool, answer: &mut Answer) -> bool {
        let pool = at.pool;
        if missed_retry {
            let miss = self.pools[pool].proto.is_miss(&answer.reply);
            if miss && self.retry_read(at.token, at.id, at.seq, pool) {
                return true;
            }
            if !miss && !answer.is_error && self.pools[pool].route.warms() {
                let hit = self
                    .conns
                    .client(at.token.0)
                    .and_then(|c| c.slot(at.seq))
                    .and_then(ReplySlot::warm_hit);
                if let Some((key, warm, cold)) = hit {
                    self.warm_copy(pool, &key, warm, cold);
                }
            }
        }
        let zoned = self.pools[pool].route.is_zoned();
        if let Some(fi) = at.frag.filter(|_| zoned && !answer.is_error) {
            let frag = super::handle::FragOf {
                token: at.token,
                id: at.id,
                seq: at.seq,
                fi: fi as usize,
            };
            if let Some(kept) = self.zone_fragment(frag, pool, &answer.reply) {
                answer.reply = kept;
            }
        }
        false
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
        let proto = self.pools[c.pool()].proto;
        if c.fill_held_reply(seq, frag, held, proto) {
            self.drain_head(token);
        }
        // Held replies count against the output limit too.
        let Some(c) = self.conns.client(token.0) else {
            return;
        };
        let pool = c.pool();
        if let Some(kept) = c.kept_over(self.ctl.output_limit(&self.pools[pool])) {
            self.close_over_limit(token, pool, kept, "held");
        }
    }

    /// The client's head slot may be ready: move what is ready to its output.
    fn drain_head(&mut self, token: Token) {
        let Some(c) = self.conns.client_mut(token.0) else {
            return;
        };
        let added = c.drain_ready(&mut self.bufs);
        if c.has_output() {
            self.dirty.client(token);
        }
        self.add_out(added);
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
    /// request (`ReplySlot::fill`; `zones` as there). Nothing when the
    /// slot is gone.
    #[inline]
    fn fill_reply(
        &mut self,
        seq: u64,
        frag: Option<u32>,
        answer: Answer,
        proto: crate::proto::Protocol,
        zones: Option<&crate::config::Routing>,
    ) -> Filled {
        let head = seq == self.head_seq();
        let Some(slot) = self.slot_mut(seq) else {
            return Filled::default();
        };
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
mod tests {
    use super::super::conn::{Fragment, Retry};
    use super::*;
    use crate::proto::{Limits, Parse, Protocol};

    fn split(text: &[u8], frags: Vec<Vec<usize>>, mode: MultiMode) -> ReplySlot {
        let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(text, &Limits::default()) else {
            panic!("parses");
        };
        let n = frags.len();
        ReplySlot {
            multi: Some(Box::new(Multi {
                req,
                bytes: text.to_vec(),
                frags: frags
                    .into_iter()
                    .map(|keys| Fragment {
                        keys,
                        ..Fragment::default()
                    })
                    .collect(),
                remaining: n,
                error: None,
                mode,
            })),
            ..ReplySlot::default()
        }
    }

    fn answer(reply: &[u8], is_error: bool) -> Answer {
        Answer {
            reply: reply.to_vec(),
            is_error,
            unreachable: false,
        }
    }

    const MGET: &[u8] = b"*4\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";

    #[test]
    fn a_split_read_is_merged_in_key_order_once_every_fragment_answered() {
        let mut slot = split(MGET, vec![vec![0, 2], vec![1]], MultiMode::Split);
        let r = Protocol::Redis;
        assert!(!slot.fill(Some(1), answer(b"*1\r\n$2\r\nvb\r\n", false), r, None));
        assert!(!slot.ready, "one fragment still to answer");
        assert!(!slot.fill(
            Some(0),
            answer(b"*2\r\n$2\r\nva\r\n$-1\r\n", false),
            r,
            None
        ));
        assert!(slot.ready && slot.multi.is_none());
        assert_eq!(slot.out, b"*3\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n");
    }

    #[test]
    fn a_split_requests_first_error_is_its_reply() {
        let mut slot = split(MGET, vec![vec![0], vec![1], vec![2]], MultiMode::Split);
        let r = Protocol::Redis;
        slot.fill(Some(2), answer(b"-ERR first\r\n", true), r, None);
        slot.fill(Some(0), answer(b"-ERR second\r\n", true), r, None);
        assert!(!slot.ready);
        slot.fill(Some(1), answer(b"*1\r\n$1\r\nx\r\n", false), r, None);
        assert!(slot.ready);
        assert_eq!(slot.out, b"-ERR first\r\n");
    }

    #[test]
    fn a_fragment_replaced_by_retries_and_a_late_zone_answer_are_settled() {
        let mut slot = split(MGET, vec![vec![0], vec![1, 2]], MultiMode::Split);
        slot.fragment_settled();
        assert_eq!(slot.multi.as_ref().map(|m| m.remaining), Some(1));
        // A reply for a slot whose split request was already answered.
        let mut plain = ReplySlot::default();
        assert!(!plain.fill(Some(0), answer(b"+OK\r\n", false), Protocol::Redis, None));
        assert!(!plain.ready);
    }

    #[test]
    fn a_zone_read_answered_by_another_zone_is_a_failover() {
        let yaml = "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n\
                    b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n\
                    z:\n  listen: 127.0.0.1:22123\n  zones:\n   - a\n   - b\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let routing = &c.pools[2].routing;
        let Ok(Parse::Done(req)) =
            Protocol::Memcache.parse_request(b"get k\r\n", &Limits::default())
        else {
            panic!("parses");
        };
        let read = |next: usize| ReplySlot {
            retry: Some(Box::new(Retry {
                req: req.clone(),
                bytes: b"get k\r\n"[..].into(),
                replicas: [0, 1].into_iter().collect(),
                next,
                on_miss: false,
                learns: false,
                pull_on_miss: false,
            })),
            ..ReplySlot::default()
        };
        let hit = b"VALUE k 0 1\r\nv\r\nEND\r\n";
        let mut local = read(1);
        assert!(!local.fill(None, answer(hit, false), Protocol::Memcache, Some(routing)));
        assert!(local.ready && local.retry.is_none() && local.out == hit);
        let mut other = read(2);
        assert!(other.fill(None, answer(hit, false), Protocol::Memcache, Some(routing)));
        // Not a zone pool: never counted as a zone's failover.
        let mut plain = read(2);
        assert!(!plain.fill(None, answer(hit, false), Protocol::Memcache, None));
    }

    #[test]
    fn a_reply_for_the_first_slot_owed_goes_out_a_later_one_waits() {
        let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(
            crate::net::Stream::Unix(sock),
            1,
            0,
            session,
            std::time::Instant::now(),
        );
        let (first, second) = (c.next_seq(), c.next_seq() + 1);
        c.push_reply(ReplySlot::default());
        c.push_reply(ReplySlot::default());
        let filled = c.fill_reply(
            second,
            None,
            answer(b"+OK\r\n", false),
            Protocol::Redis,
            None,
        );
        assert_eq!(
            filled,
            Filled {
                head: false,
                failover: false
            },
            "waits for the first"
        );
        assert!(c.slot(second).is_some_and(|s| s.ready));
        let filled = c.fill_reply(
            first,
            None,
            answer(b"$1\r\nv\r\n", false),
            Protocol::Redis,
            None,
        );
        assert_eq!(
            filled,
            Filled {
                head: true,
                failover: false
            }
        );
        let gone = c.fill_reply(
            second + 1,
            None,
            answer(b"+OK\r\n", false),
            Protocol::Redis,
            None,
        );
        assert_eq!(gone, Filled::default(), "no such slot");
        // A large reply held in chunks, likewise.
        let third = second + 1;
        c.push_reply(ReplySlot::default());
        assert!(!c.fill_held_reply(third, None, Box::default(), Protocol::Redis));
        assert!(c.slot(third).is_some_and(|s| s.ready && s.held.is_some()));
        c.pop_head();
        c.pop_head();
        assert!(
            c.fill_held_reply(third, None, Box::default(), Protocol::Redis),
            "first now"
        );
        assert!(!c.fill_held_reply(third + 1, None, Box::default(), Protocol::Redis));
    }
}
