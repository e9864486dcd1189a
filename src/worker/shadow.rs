//! Shadow traffic (`shadow:`): requests of a pool copied to another pool,
//! fire and forget. The copy is routed by the shadow pool's own placement
//! (a multi-key request split per its servers), its replies are read and
//! dropped, and nothing about it reaches the client: not its errors, not
//! its slowness, not its death. Its queue is bounded per server
//! connection; a copy that finds it full, or its server down, is dropped
//! and counted (`shadow_dropped`).

use super::conn::Open;
use super::conn::{ConnTable, Waiter};
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

impl Worker<'_> {
    /// Copy a request to the shadow pool its plan names, if the sample
    /// takes it.
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
        if req.route == Route::Single || req.keys.len() == 1 {
            let key = req.routing_key(bytes);
            let server = self.pools[sp].server_for(key.as_ref(), now);
            self.shadow_send(sp, server, req.op, now, |out| {
                proto.write_request(req, bytes, out)
            });
            return;
        }
        let mut groups: SmallVec<[(Option<usize>, Vec<usize>); 4]> = SmallVec::new();
        for (i, r) in req.keys.iter().enumerate() {
            let s = self.pools[sp].server_for(&bytes[r.clone()], now);
            match groups.iter_mut().find(|(gs, _)| *gs == s) {
                Some((_, v)) => v.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        for (server, keys) in groups {
            self.shadow_send(sp, server, req.op, now, |out| {
                proto.write_fragment(bytes, req, &keys, out)
            });
        }
    }

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
