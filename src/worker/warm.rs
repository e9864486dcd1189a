//! Warm-up of a cold pool from a warm one (`warm_up: [COLD, WARM]`, as
//! mcrouter's WarmUpRoute): a zone pool of two zones whose reads miss on
//! the cold pool fall over to the warm one (zones.rs: a single-key read
//! whole, a multi-get per missed key), and each value found there is
//! returned and copied to the cold pool with its remaining TTL, never
//! over a newer value: memcached `mg <key> v f t` then `ms <key> ... ME`
//! (add), Redis `DUMP` + `PTTL` then `RESTORE` without `REPLACE`. Writes
//! go to the cold pool only; deletes to both.

use super::conn::Open;
use super::conn::{ReplySlot, Waiter};
use super::Worker;
use crate::migrate::commands::{dump, mc_get, mc_store, pttl, restore};
use crate::proto::memcache::moving::meta_value;
use crate::proto::redis::moving::{bulk_payload, integer};
use crate::proto::{Parse, Protocol};
use std::time::Instant;

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
    /// Redis: the `DUMP` payload, once read.
    dump: Option<Vec<u8>>,
}

impl Worker<'_> {
    /// A read of `key` that missed on the cold owner `cold` was answered
    /// by the warm owner `warm`: copy the key over (fire and forget).
    pub(super) fn warm_copy(&mut self, pool: usize, key: &[u8], warm: usize, cold: usize) {
        let idx = self.warms.insert(WarmCopy {
            pool,
            warm,
            cold,
            key: key.to_vec(),
            dump: None,
        });
        let first = match self.pools[pool].proto {
            Protocol::Redis => dump(key),
            Protocol::Memcache => mc_get(key),
        };
        if !self.warm_send(pool, warm, Some(idx), &first) {
            self.warms.remove(idx);
        }
    }

    /// Queue one of the copy's requests; `idx`: its reply comes back to
    /// [`Self::warm_reply`] (else it is dropped).
    fn warm_send(&mut self, pool: usize, server: usize, idx: Option<usize>, bytes: &[u8]) -> bool {
        let limits = crate::proto::Limits {
            max_value: usize::MAX,
            max_keys: usize::MAX,
            pre_auth: false,
        };
        let proto = self.pools[pool].proto;
        let Ok(Parse::Done(r)) = proto.parse_request(bytes, &limits) else {
            return false;
        };
        let now = Instant::now();
        let Ok(st) = self.server_conn(pool, server, 0, now, Open::Shared) else {
            return false;
        };
        let waiter = match idx {
            Some(i) => Waiter::Warm { idx: i as u32 },
            None => Waiter::Internal,
        };
        self.enqueue(
            st,
            Some(waiter),
            r.op,
            |out| out.extend_from_slice(bytes),
            now,
        );
        true
    }

    /// A reply to a copy's read on the warm pool (`None`: it failed).
    pub(super) fn warm_reply(&mut self, idx: u32, reply: Option<&[u8]>) {
        let idx = idx as usize;
        let Some(w) = self.warms.get_mut(idx) else {
            return;
        };
        let (pool, warm, cold) = (w.pool, w.warm, w.cold);
        let Some(reply) = reply else {
            self.warms.remove(idx);
            return;
        };
        let key = w.key.clone();
        let store = match self.pools[pool].proto {
            Protocol::Redis if w.dump.is_none() => {
                // The DUMP: now its TTL.
                match bulk_payload(reply) {
                    Some(p) => w.dump = Some(p.to_vec()),
                    None => {
                        self.warms.remove(idx);
                        return;
                    }
                }
                if !self.warm_send(pool, warm, Some(idx), &pttl(&key)) {
                    self.warms.remove(idx);
                }
                return;
            }
            Protocol::Redis => {
                let ttl = integer(reply).unwrap_or(-2);
                let payload = w.dump.take().unwrap_or_default();
                if ttl == -2 {
                    None
                } else {
                    Some(restore(&key, ttl, &payload))
                }
            }
            Protocol::Memcache => {
                meta_value(reply).map(|v| mc_store(&key, v.flags, v.ttl, v.value))
            }
        };
        self.warms.remove(idx);
        if let Some(store) = store {
            // Without REPLACE / in add mode: a newer value written to the
            // cold pool meanwhile wins. The reply is dropped.
            self.warm_send(pool, cold, None, &store);
        }
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
