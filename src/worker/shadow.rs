//! Shadow traffic (`shadow:`): requests of a pool copied to another pool,
//! fire and forget. The copy is routed by the shadow pool's own placement
//! (a multi-key request split per its servers), its replies are read and
//! dropped, and nothing about it reaches the client: not its errors, not
//! its slowness, not its death. Its queue is bounded per server
//! connection; a copy that finds it full, or its server down, is dropped
//! and counted (`shadow_dropped`).

use super::conn::Open;
use super::conn::{ConnTable, Waiter};
use super::pool::PoolRt;
use super::Worker;
use crate::proto::{Op, Request, Route};
use crate::route::ShadowRoute;
use crate::stats::WorkerField;
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

impl Worker<'_> {
    /// Copy a request to the shadow pool its plan names, if the sample
    /// takes it, where that pool places it (`PoolRt::shadow_copy`).
    pub(super) fn shadow_copy(
        &mut self,
        shadow: ShadowRoute,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) {
        if shadow.sample_pct < 100 {
            self.shadow_tick = self.shadow_tick.wrapping_add(1);
            if !shadow.sampled(self.shadow_tick) {
                return;
            }
        }
        let sp = shadow.to;
        let proto = self.pools[sp].proto;
        match self.pools[sp].shadow_copy(req, bytes, now) {
            ShadowCopy::Whole(server) => self.shadow_send(sp, server, req.op, now, |out| {
                proto.write_request(req, bytes, out)
            }),
            ShadowCopy::Split(groups) => {
                for (server, keys) in groups {
                    self.shadow_send(sp, server, req.op, now, |out| {
                        proto.write_fragment(bytes, req, &keys, out)
                    });
                }
            }
        }
    }

    /// Queue a copy on `server` of shadow pool `sp` (`None`: it has no
    /// live one), unless its connection is full: then it is dropped, and
    /// counted.
    pub(super) fn shadow_send(
        &mut self,
        sp: usize,
        server: Option<usize>,
        op: Op,
        now: Instant,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        let st = server.and_then(|s| self.server_conn(sp, s, 0, now, Open::Shared).ok());
        let room = st.is_some_and(|st| self.conns.server(st.0).is_some_and(has_copy_room));
        match st {
            Some(st) if room => self.enqueue(st, Some(Waiter::Internal), op, write, now),
            _ => self.stats.worker_add(WorkerField::ShadowDropped, 1),
        }
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
}
