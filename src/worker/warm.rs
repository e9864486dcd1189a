//! Warm-up of a cold pool from a warm one (`warm_up: [COLD, WARM]`, as
//! mcrouter's WarmUpRoute): a zone pool of two zones whose reads miss on
//! the cold pool fall over to the warm one (zones.rs: a single-key read
//! whole, a multi-get per missed key), and each value found there is
//! returned and copied to the cold pool with its remaining TTL, never
//! over a newer value: memcached `mg <key> v f t` then `ms <key> ... ME`
//! (add), Redis `DUMP` + `PTTL` then `RESTORE` without `REPLACE`. Writes
//! go to the cold pool only; deletes to both.

use super::conn::{ReplySlot, Waiter};
use super::send_plan::CopyPlan;
use crate::migrate::commands::{dump, mc_get, mc_store, pttl, restore};
use crate::proto::memcache::moving::meta_value;
use crate::proto::redis::moving::{bulk_payload, integer};
use crate::proto::Protocol;
use slab::Slab;

/// One key being copied from the warm pool to the cold one.
#[derive(Debug)]
pub struct WarmCopy {
    /// The warm-up pool (servers: the cold pool's, then the warm pool's).
    pool: usize,
    /// The key's owner in the warm pool (a server index of `pool`).
    warm: usize,
    /// Its owner in the cold pool.
    cold: usize,
    /// The key.
    key: Vec<u8>,
    /// The pool's protocol.
    proto: Protocol,
    /// Redis: the `DUMP` payload, once read.
    dump: Option<Vec<u8>>,
}

/// What follows a reply to a copy's read on the warm pool.
#[derive(Debug, PartialEq, Eq)]
pub enum WarmStep {
    /// Ask the warm owner this too (Redis: the TTL after the `DUMP`).
    Ask(Vec<u8>),
    /// Store this on the cold owner (its reply dropped); the copy is done.
    Store(Vec<u8>),
    /// Nothing to copy (a miss, a key gone meanwhile, a reply not
    /// understood, or the warm owner could not be reached): done.
    Done,
}

impl WarmCopy {
    /// A copy of `key` of warm-up pool `pool` (protocol `proto`) from its
    /// warm owner to its cold one, and the read to ask the warm owner.
    pub fn start(
        pool: usize,
        proto: Protocol,
        key: &[u8],
        (warm, cold): (usize, usize),
    ) -> (WarmCopy, Vec<u8>) {
        let first = match proto {
            Protocol::Redis => dump(key),
            Protocol::Memcache => mc_get(key),
        };
        let copy = WarmCopy {
            pool,
            warm,
            cold,
            key: key.to_vec(),
            proto,
            dump: None,
        };
        (copy, first)
    }

    /// The warm owner answered the copy's read (`None`: it could not be
    /// reached): what follows. The store never overwrites: without
    /// `REPLACE`, or in add mode, so a newer value written to the cold
    /// pool meanwhile wins.
    pub fn answer(&mut self, reply: Option<&[u8]>) -> WarmStep {
        let Some(reply) = reply else {
            return WarmStep::Done;
        };
        match self.proto {
            Protocol::Redis if self.dump.is_none() => match bulk_payload(reply) {
                // The DUMP: now its TTL.
                Some(p) => {
                    self.dump = Some(p.to_vec());
                    WarmStep::Ask(pttl(&self.key))
                }
                None => WarmStep::Done,
            },
            Protocol::Redis => {
                let ttl = integer(reply).unwrap_or(-2);
                let payload = self.dump.take().unwrap_or_default();
                if ttl == -2 {
                    WarmStep::Done
                } else {
                    WarmStep::Store(restore(&self.key, ttl, &payload))
                }
            }
            Protocol::Memcache => match meta_value(reply) {
                Some(v) => WarmStep::Store(mc_store(&self.key, v.flags, v.ttl, v.value)),
                None => WarmStep::Done,
            },
        }
    }
}

/// The warm-up copies under way, by index (a copy's reads come back to
/// it as `Waiter::Warm { idx }`): which request of a copy goes where next
/// is theirs, planned as a `CopyPlan` that the worker only carries out
/// (`Worker::send_copy`).
#[derive(Debug, Default)]
pub struct Warms(Slab<WarmCopy>);

impl Warms {
    /// A read of `key` that missed on the cold owner was answered by the
    /// warm owner: a copy starts, with its read of the warm owner.
    pub(super) fn start(
        &mut self,
        pool: usize,
        proto: Protocol,
        key: &[u8],
        owners: (usize, usize),
    ) -> Option<CopyPlan> {
        let (copy, bytes) = WarmCopy::start(pool, proto, key, owners);
        let server = copy.warm;
        let idx = self.0.insert(copy);
        self.send(pool, proto, server, Some(idx), bytes)
    }

    /// A reply to copy `idx`'s read (`None`: it failed): what to queue
    /// next, if anything. A copy that stores, or has nothing to copy, is
    /// over.
    pub(super) fn reply(&mut self, idx: usize, reply: Option<&[u8]>) -> Option<CopyPlan> {
        let w = self.0.get_mut(idx)?;
        let (pool, proto, warm, cold) = (w.pool, w.proto, w.warm, w.cold);
        match w.answer(reply) {
            WarmStep::Ask(bytes) => self.send(pool, proto, warm, Some(idx), bytes),
            WarmStep::Store(bytes) => {
                self.0.remove(idx);
                self.send(pool, proto, cold, None, bytes)
            }
            WarmStep::Done => {
                self.0.remove(idx);
                None
            }
        }
    }

    /// Copy `idx`'s request (`None`: the store, its reply dropped) could
    /// not be queued: the copy, waiting for it, is over.
    pub(super) fn unsent(&mut self, idx: usize) {
        self.0.try_remove(idx);
    }

    /// `bytes` to `server` of warm-up pool `pool`, its reply back to copy
    /// `idx` (`None`: dropped). A request the protocol does not read back
    /// is not sent, and its copy is over.
    fn send(
        &mut self,
        pool: usize,
        proto: Protocol,
        server: usize,
        idx: Option<usize>,
        bytes: Vec<u8>,
    ) -> Option<CopyPlan> {
        let waiter = match idx {
            Some(i) => Waiter::Warm { idx: i as u32 },
            None => Waiter::Internal,
        };
        let plan = CopyPlan::own(proto, pool, server, None, waiter, bytes);
        if let (None, Some(idx)) = (&plan, idx) {
            self.unsent(idx);
        }
        plan
    }
}

impl ReplySlot {
    /// Whether this slot is a warm-up read that the warm pool answered:
    /// (key, warm owner, cold owner).
    pub(super) fn warm_hit(&self) -> Option<(Vec<u8>, usize, usize)> {
        let r = self.retry.as_ref()?;
        if r.next < 2 {
            return None;
        }
        let key = r.req.routing_key(&r.bytes).into_owned();
        Some((key, r.replicas[r.next - 1], r.replicas[0]))
    }
}

#[cfg(test)]
#[path = "warm_tests.rs"]
mod tests;
