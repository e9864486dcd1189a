//! A pool made of one pool per zone (`zones:`, the local zone first), as
//! mcrouter's and memcached-proxy's zones or Dynomite's racks: a
//! single-key read goes to the key's owner in the local zone and fails
//! over to its owner in the next zone on an error (and on a miss, with
//! `zone_failover: miss`). A single-key write goes to every zone: with
//! `zone_writes: async` it is answered by the local zone as soon as that
//! answers, or, when the local zone fails it (lost, ejected, an error),
//! by the next zone that succeeds, so that losing a zone loses no write;
//! with `sync`, once every zone has answered, with the first success.
//! A multi-key write goes to the local zone, and to the other zones as
//! copies, fire and forget. A request answered by another zone than the
//! local one is counted (`zone_failovers`).
//!
//! A multi-key read (memcached `get`/`gets`/`gat`/`gats`, Redis MGET) is
//! split per local owner as in any pool (one server too: it stays a
//! split request) and falls over per key, in rounds. When a fragment's
//! reply comes, the keys it has no value for (no `VALUE`; a nil) are
//! taken out of it (a Redis reply loses its nils) and sent, grouped by
//! their owner in the next zone, as new fragments of the same request;
//! the request's count of fragments to wait for grows before they are
//! sent, so the client's reply is merged only once they are in. Each key
//! is then carried by exactly one fragment, so the merge (whole or held)
//! is the usual one and puts values in the client's key order. Only
//! missed keys go on, so a round costs one request per owner of missed
//! keys, and there are as many rounds as zones after the local one (one
//! in warm-up). Such a fallback fragment that fails leaves its keys
//! missed rather than failing the request; a local fragment that fails
//! (its server lost) moves whole to the next zone. A fallback fragment
//! of a warm-up pool copies each value it found to the cold pool.
//! (A fragment reply large enough to be held in chunks is not looked at:
//! its misses stay misses.)

use super::conn::{zone_tag, Fragment, Multi, MultiMode, ReplySlot, Waiter};
use super::key_groups::{Again, Owners, WarmCopies};
use super::pool::PoolRt;
use super::send_plan::{CopyPlan, SendPlan, Write};
use crate::proto::Request;
use crate::route::ZoneStep;
use smallvec::SmallVec;
use std::time::Instant;

impl ReplySlot {
    /// Fragment `fi`, read for another zone's misses, failed with no zone
    /// left to try: its keys are misses (the other zones' values still go
    /// to the client). Returns whether `fi` is such a fragment; its keys
    /// are then dropped, so the reply to store is an empty one
    /// (`Protocol::empty_read`).
    pub(super) fn zone_fallback_failed(&mut self, fi: usize) -> bool {
        let Some(f) = self.multi.as_mut().and_then(|m| m.frags.get_mut(fi)) else {
            return false;
        };
        if f.fallback {
            f.keys.clear();
        }
        f.fallback
    }
}

/// Per server of a later zone, the keys of a multi-key read that move
/// there (indices in client order), with that zone.
pub(super) type ZoneGroups = SmallVec<[(usize, u8, Vec<usize>); 4]>;

/// What the reply of a zone pool's multi-key read fragment leads to
/// (`PoolRt::zone_answer`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ZoneAnswer {
    /// The zone that answered (the fragment's).
    pub zone: u8,
    /// The keys it had no value for (indices into the request's keys), to
    /// read from the next zone (`zone_failover: miss`, warm-up); empty
    /// when misses stay misses.
    pub moves: Vec<usize>,
    /// The values it found in the warm pool, each copied to the cold
    /// pool: the key, its warm owner and its cold owner.
    pub copies: WarmCopies,
}

impl Multi {
    /// Fragment `fi` of a zone pool's multi-key read failed (its server
    /// lost, or an error reply): its keys and its zone, for their owners
    /// in the next zone to take its place. `None` when it is not such a
    /// read.
    pub(super) fn zone_retry(&self, fi: usize) -> Option<(Vec<usize>, u8)> {
        let f = self.frags.get(fi)?;
        if self.mode != MultiMode::Split || !self.req.op.reads_only() {
            return None;
        }
        Some((f.keys.clone(), f.attempt))
    }

    /// Add one fragment per group (`PoolRt::next_zone_groups`), counted
    /// before any is sent; returns the first one's index. `replace`: the
    /// keys were fragment `fi`'s, which failed and now answers nothing
    /// (`empty`, the protocol's empty read); the new fragments are
    /// fallbacks (a failure is a miss) unless `fi` was the local zone's.
    pub(super) fn zone_fragments(
        &mut self,
        fi: usize,
        groups: &ZoneGroups,
        replace: bool,
        empty: &[u8],
    ) -> usize {
        let fallback = !replace || self.frags.get(fi).is_some_and(|f| f.fallback);
        if replace {
            if let Some(f) = self.frags.get_mut(fi) {
                f.keys.clear();
                f.reply = empty.to_vec();
            }
        }
        let base = self.frags.len();
        for (_, zone, keys) in groups {
            self.frags.push(Fragment {
                keys: keys.clone(),
                attempt: *zone,
                fallback,
                ..Fragment::default()
            });
        }
        self.remaining += groups.len();
        base
    }
}

/// A zone pool's owners of a key, zone by zone.
impl PoolRt {
    /// The reply of fragment `fi` of `m` came: with `zone_failover: miss`
    /// (and in warm-up) the keys it has no value for move to the next
    /// zone; in warm-up, the values a fragment of the warm pool found are
    /// copied to the cold pool. `None` when neither applies (not a zone
    /// pool's split read, or a reply not looked into).
    pub(super) fn zone_answer(&self, m: &Multi, fi: usize, reply: &[u8]) -> Option<ZoneAnswer> {
        let (miss, warm) = (self.route.zone_fails_over_on_miss(), self.route.warms());
        let f = m.frags.get(fi)?;
        let copies = warm && f.attempt != 0;
        if m.mode != MultiMode::Split || !m.req.op.reads_only() || !(miss || copies) {
            return None;
        }
        let missed = self.proto.missed_keys(&m.bytes, &m.req, &f.keys, reply)?;
        let zone = f.attempt;
        let mut answer = ZoneAnswer {
            zone,
            moves: Vec::new(),
            copies: Vec::new(),
        };
        if copies {
            let mut is_missed = vec![false; m.req.keys.len()];
            for &k in &missed {
                is_missed[k] = true;
            }
            let key = |i: usize| m.req.keys.get(i).and_then(|r| m.bytes.get(r.clone()));
            for &k in f.keys.iter().filter(|&&k| !is_missed[k]) {
                let Some(key) = key(k) else {
                    continue;
                };
                if let (Some(w), Some(c)) = (self.zone_owner(key, zone), self.zone_owner(key, 0)) {
                    answer.copies.push((key.to_vec(), w, c));
                }
            }
        }
        if miss {
            answer.moves = missed;
        }
        Some(answer)
    }

    /// The reply of fragment `fi` of `m` came (`reply`, not yet stored
    /// in it), as `zone_answer` says: the values it found in the warm
    /// pool to copy to the cold pool, and its misses as new fragments of
    /// the same request (`zone_next`), taken out of `fi` and of `reply`
    /// (`Protocol::drop_misses`) when they move.
    pub(super) fn zone_moves(
        &self,
        m: &mut Multi,
        fi: usize,
        reply: &mut Vec<u8>,
    ) -> (WarmCopies, Option<Again>) {
        let Some(answer) = self.zone_answer(m, fi, reply) else {
            return (Vec::new(), None);
        };
        let next = if answer.moves.is_empty() {
            None
        } else {
            self.zone_next(m, fi, &answer.moves, answer.zone, false)
        };
        let (Some(plan), Some(f)) = (next, m.frags.get_mut(fi)) else {
            return (answer.copies, None);
        };
        // The missed keys are the new fragments' now: each key is answered
        // by one fragment, which both merges (whole and held) expect.
        let mut moved = vec![false; m.req.keys.len()];
        for &k in &answer.moves {
            moved[k] = true;
        }
        f.keys.retain(|&k| !moved[k]);
        *reply = self.proto.drop_misses(std::mem::take(reply));
        let again = Again {
            fragments: plan.to.len() as u64,
            plan,
            req: m.req.clone(),
            bytes: m.bytes.clone(),
        };
        (answer.copies, Some(again))
    }

    /// Where `keys` (indices into `m`'s keys) go after zone `zone`: per
    /// server of the first later zone that owns each, its zone and keys,
    /// in client order. Empty when no key has an owner in a later zone.
    pub(super) fn next_zone_groups(&self, m: &Multi, keys: &[usize], zone: u8) -> ZoneGroups {
        let mut groups = ZoneGroups::new();
        for &i in keys {
            let Some(key) = m.req.keys.get(i).and_then(|r| m.bytes.get(r.clone())) else {
                continue;
            };
            let Some((server, z)) = self.next_zone_owner(key, zone) else {
                continue;
            };
            match groups.iter_mut().find(|(s, _, _)| *s == server) {
                Some((_, _, v)) => v.push(i),
                None => groups.push((server, z, vec![i])),
            }
        }
        groups
    }

    /// Read `keys` (indices into `m`'s keys) of a multi-key read from
    /// their owners in the zone after `zone`, one new fragment per server
    /// (`next_zone_groups`), counted in `m` before any is sent
    /// (`Multi::zone_fragments`), so that none completes it early.
    /// `replace`: they were fragment `fi`'s, which failed and now answers
    /// nothing; else they are its misses. `None` when no key has an owner
    /// in a later zone.
    pub(super) fn zone_next(
        &self,
        m: &mut Multi,
        fi: usize,
        keys: &[usize],
        zone: u8,
        replace: bool,
    ) -> Option<SendPlan> {
        let groups = self.next_zone_groups(m, keys, zone);
        if groups.is_empty() {
            return None;
        }
        let base = m.zone_fragments(fi, &groups, replace, self.proto.empty_read());
        Some(SendPlan {
            slot: None,
            to: groups.into_iter().map(|(s, _, keys)| (s, keys)).collect(),
            frag: Some(base as u32),
            write: Write::Fragment,
            bounded: SmallVec::new(),
        })
    }

    /// The other zones' copies of `req`, a write of pool `pool` (this
    /// one) whose plan says so (`ZoneRoute::copies`), fire and forget: per
    /// owner of its keys in a zone other than the local one, the keys it
    /// owns (indices in client order), the request whole when it has one
    /// key; bounded as a shadow's copies are (the local zone's reply is
    /// the client's).
    pub(super) fn zone_copy(&self, pool: usize, req: &Request, bytes: &[u8]) -> CopyPlan {
        let mut owners = Vec::with_capacity(4);
        let mut to: SmallVec<[(Option<usize>, Vec<usize>); 4]> = SmallVec::new();
        for (i, r) in req.keys.iter().enumerate() {
            if let Some(rt) = &self.routes {
                rt.owners(&bytes[r.clone()], &mut owners);
            }
            for &server in owners.iter().skip(1) {
                match to.iter_mut().find(|(s, _)| *s == Some(server)) {
                    Some((_, v)) => v.push(i),
                    None => to.push((Some(server), vec![i])),
                }
            }
        }
        let whole = req.keys.len() == 1;
        CopyPlan {
            pool,
            to,
            write: if whole {
                Write::Request
            } else {
                Write::Fragment
            },
            op: req.op,
            waiter: Waiter::Internal,
            client: None,
            bounded: true,
        }
    }

    /// An async single-key write (`Owners::ZoneWrite`): one fragment per
    /// zone that has a live owner of the key, `owners` (see
    /// [`MultiMode::Zones`]), a remote zone's bounded as a copy is (so a
    /// stalled remote zone costs no memory). `None`: no owner.
    pub(super) fn zone_write(&self, req: &Request, owners: Vec<usize>) -> Option<SendPlan> {
        let mut plan = self.owners_write(req, owners, MultiMode::Zones)?;
        let routing = &self.cfg.routing;
        plan.bounded = plan
            .to
            .iter()
            .map(|&(s, _)| zone_tag(routing, s) != 0)
            .collect();
        Some(plan)
    }

    /// A single-key request of a zone pool that goes to several zones
    /// itself (`ZoneRoute::single`): the owners of its key, the local
    /// zone's first (the ring rebuilt first if an ejection's time is up),
    /// read one after another or written to all as `step` says.
    pub(super) fn zone_owners(
        &mut self,
        step: ZoneStep,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Owners {
        let key = req.routing_key(bytes);
        let _ = self.server_for(key.as_ref(), now);
        let mut owners = Vec::with_capacity(4);
        if let Some(r) = &self.routes {
            r.owners(key.as_ref(), &mut owners);
        }
        match step {
            ZoneStep::Read => Owners::Read(owners),
            ZoneStep::SyncWrite => Owners::Write(owners),
            ZoneStep::AsyncWrite => Owners::ZoneWrite(owners),
        }
    }

    /// The owner of `key` in the first zone after `zone` that has one, with
    /// that zone.
    fn next_zone_owner(&self, key: &[u8], zone: u8) -> Option<(usize, u8)> {
        let mut owners = Vec::with_capacity(4);
        self.routes.as_ref()?.owners(key, &mut owners);
        owners
            .into_iter()
            .map(|s| (s, zone_tag(&self.cfg.routing, s)))
            .filter(|&(_, z)| z > zone)
            .min_by_key(|&(_, z)| z)
    }

    /// The owner of `key` in zone `zone`.
    fn zone_owner(&self, key: &[u8], zone: u8) -> Option<usize> {
        let mut owners = Vec::with_capacity(4);
        self.routes.as_ref()?.owners(key, &mut owners);
        owners
            .into_iter()
            .find(|&s| self.cfg.routing.zone_of(s) == zone as usize)
    }
}

#[cfg(test)]
#[path = "zones_tests.rs"]
mod tests;
