//! Shadow traffic (`shadow:`): requests of a pool copied to another pool,
//! fire and forget. The copy is routed by the shadow pool's own placement
//! (a multi-key request split per its servers), its replies are read and
//! dropped, and nothing about it reaches the client: not its errors, not
//! its slowness, not its death. Its queue is bounded per server
//! connection; a copy that finds it full, or its server down, is dropped
//! and counted (`shadow_dropped`).

use super::conn::Waiter;
use super::pool::PoolRt;
use super::send_plan::{CopyPlan, Write};
use crate::proto::{Request, Route};
use crate::route::ShadowRoute;
use smallvec::SmallVec;
use std::time::Instant;

/// Most copies waiting for their reply on one shadow connection.
const SHADOW_MAX_INFLIGHT: usize = 1024;
/// Most copy bytes waiting to be written on one shadow connection.
const SHADOW_MAX_BYTES: usize = 4 << 20;

/// Whether server connection `s` may take one more copy (a shadow's, or
/// a remote zone's write): a stalled server costs no memory beyond this.
pub(super) fn has_copy_room(s: &super::conn::Server) -> bool {
    s.inflight().len() < SHADOW_MAX_INFLIGHT && s.wbuf().len() < SHADOW_MAX_BYTES
}

/// Where a request's copy goes in the shadow pool
/// (`PoolRt::shadow_copy`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ShadowCopy {
    /// Whole, to its key's server (`None`: the shadow pool has no live
    /// one, and the copy is dropped).
    Whole(Option<usize>),
    /// Split: per server of the shadow pool, the keys it gets (indices in
    /// client order), in the order the servers first appear.
    Split(SmallVec<[(Option<usize>, Vec<usize>); 4]>),
}

/// A shadow pool's placement of the copies it gets.
impl PoolRt {
    /// Where the copy of `req` goes in this pool, by its own placement: a
    /// single-key request (or a split one naming one key) whole, any other
    /// split per this pool's servers.
    pub(super) fn shadow_copy(&mut self, req: &Request, bytes: &[u8], now: Instant) -> ShadowCopy {
        if req.route == Route::Single || req.keys.len() == 1 {
            let key = req.routing_key(bytes);
            return ShadowCopy::Whole(self.server_for(key.as_ref(), now));
        }
        let mut groups: SmallVec<[(Option<usize>, Vec<usize>); 4]> = SmallVec::new();
        for (i, r) in req.keys.iter().enumerate() {
            let s = self.server_for(&bytes[r.clone()], now);
            match groups.iter_mut().find(|(gs, _)| *gs == s) {
                Some((_, v)) => v.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        ShadowCopy::Split(groups)
    }
}

/// The worker's shadow copies: which requests a sampled shadow takes,
/// and where each copy goes.
#[derive(Debug, Default)]
pub(super) struct Shadows {
    /// The worker's requests with a sampled shadow (`sample_pct` below
    /// 100) so far: the sample takes `sample_pct` of each 100 of them.
    tick: u64,
}

impl Shadows {
    /// The copy of `req` to the shadow pool its plan names (`shadow`), if
    /// the sample takes it, where that pool places it
    /// (`PoolRt::shadow_copy`): fire and forget, bounded, and dropped
    /// where the pool has no live server.
    pub(super) fn copy(
        &mut self,
        shadow: ShadowRoute,
        pools: &mut [PoolRt],
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Option<CopyPlan> {
        if shadow.sample_pct < 100 {
            self.tick = self.tick.wrapping_add(1);
            if !shadow.sampled(self.tick) {
                return None;
            }
        }
        let sp = shadow.to;
        let (to, write) = match pools.get_mut(sp)?.shadow_copy(req, bytes, now) {
            ShadowCopy::Whole(server) => {
                let mut to = SmallVec::new();
                to.push((server, Vec::new()));
                (to, Write::Request)
            }
            ShadowCopy::Split(groups) => (groups, Write::Fragment),
        };
        Some(CopyPlan {
            pool: sp,
            to,
            write,
            op: req.op,
            waiter: Waiter::Internal,
            client: None,
            bounded: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proto::{Limits, Parse, Protocol};
    use std::path::Path;

    /// A shadow pool of three memcached servers.
    fn pool() -> PoolRt {
        let yaml = "s:\n  listen: 127.0.0.1:22999\n  servers:\n    - 127.0.0.1:11211:1\n    - 127.0.0.1:11212:1\n    - 127.0.0.1:11213:1\n";
        let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    fn mc(bytes: &[u8]) -> Request {
        match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_copy_goes_whole_to_its_keys_server_or_split_by_the_shadow_pools_placement() {
        let mut p = pool();
        let now = Instant::now();
        let set = b"set a 0 0 1\r\nv\r\n";
        let a = p.server_for(b"a", now);
        assert!(a.is_some());
        assert_eq!(p.shadow_copy(&mc(set), set, now), ShadowCopy::Whole(a));
        let get = b"get a\r\n";
        assert_eq!(
            p.shadow_copy(&mc(get), get, now),
            ShadowCopy::Whole(a),
            "one key"
        );
        let keys = ["a", "b", "c", "d", "e", "f"];
        let get = format!("get {}\r\n", keys.join(" ")).into_bytes();
        let ShadowCopy::Split(groups) = p.shadow_copy(&mc(&get), &get, now) else {
            panic!("split");
        };
        let mut seen = Vec::new();
        for (server, idx) in &groups {
            for &i in idx {
                assert_eq!(p.server_for(keys[i].as_bytes(), now), *server);
                seen.push(i);
            }
            assert!(idx.windows(2).all(|w| w[0] < w[1]), "client order");
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..keys.len()).collect::<Vec<_>>(), "every key once");
        // Every server ejected: nowhere to copy to.
        for s in &mut p.servers {
            s.ejected_until = Some(now + std::time::Duration::from_secs(30));
        }
        p.rebuild(now);
        assert_eq!(p.shadow_copy(&mc(set), set, now), ShadowCopy::Whole(None));
    }

    #[test]
    fn a_shadows_copy_is_its_sampled_share_bounded_to_the_shadow_pools_servers() {
        let mut pools = vec![pool(), pool()];
        let now = Instant::now();
        let set = b"set a 0 0 1\r\nv\r\n";
        let route = |sample_pct| ShadowRoute {
            to: 1,
            writes_only: false,
            sample_pct,
        };
        let mut shadows = Shadows::default();
        let copy = (shadows.copy(route(100), &mut pools, &mc(set), set, now)).expect("every one");
        let a = pools[1].server_for(b"a", now);
        assert_eq!((copy.pool, copy.servers()), (1, vec![a]));
        assert_eq!((copy.write, copy.op), (Write::Request, mc(set).op));
        assert!(matches!(copy.waiter, Waiter::Internal), "its reply dropped");
        assert!(copy.bounded, "dropped and counted when its queue is full");
        let get = b"get a b c d e f\r\n";
        let split = shadows.copy(route(100), &mut pools, &mc(get), get, now);
        assert!(
            split.is_some_and(|c| c.write == Write::Fragment),
            "split per server"
        );
        // A quarter sampled: 25 of each 100, counted over the sampled
        // shadow's requests only.
        let taken = (0..200)
            .filter(|_| (shadows.copy(route(25), &mut pools, &mc(set), set, now)).is_some())
            .count();
        assert_eq!(taken, 50);
    }
}
