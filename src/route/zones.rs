//! `zones:`: one pool per zone, the local zone first (mcrouter's and
//! memcached-proxy's zones, Dynomite's racks). This type decides what a
//! request of a zone pool does; the worker's `zones.rs` sends it and
//! falls over between zones on the replies.

use crate::config::Zones;
use crate::proto::redis::CmdClass;
use crate::proto::{Op, Request};

/// A zone pool's routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneRoute {
    /// `zone_writes: sync`: a single-key write is answered once every
    /// zone has answered (else as soon as the local one has).
    pub sync_writes: bool,
    /// `zone_failover: miss`: a read that misses asks the next zone too.
    pub on_miss: bool,
    /// `warm_up:`: the second zone is a warm pool: a hit there is copied
    /// to the cold one, and only deletes are copied to it.
    pub warm: bool,
}

/// How a single-key request of a zone pool goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneStep {
    /// To the key's owner in the local zone, the next zone on failure.
    Read,
    /// To every zone, answered once all have answered.
    SyncWrite,
    /// To every zone, answered by the local one (or the next that
    /// succeeds when it fails).
    AsyncWrite,
}

impl ZoneRoute {
    /// The route of `zones:`.
    pub fn new(z: &Zones) -> ZoneRoute {
        ZoneRoute {
            sync_writes: z.sync_writes,
            on_miss: z.failover_on_miss,
            warm: z.warm,
        }
    }

    /// How `req` goes when it goes to several zones itself; `None` when
    /// the pool's ring sends it to the local zone (a multi-key write, a
    /// warm-up pool's write), with [`ZoneRoute::copies`] for the others.
    pub fn single(&self, req: &Request) -> Option<ZoneStep> {
        if req.op.reads_only() {
            Some(ZoneStep::Read)
        } else if self.whole_write(req) {
            Some(if self.sync_writes {
                ZoneStep::SyncWrite
            } else {
                ZoneStep::AsyncWrite
            })
        } else {
            None
        }
    }

    /// Whether `req`, a write, goes whole to every zone (a single-key
    /// one, outside warm-up) rather than to the local zone with copies to
    /// the others. Blocking and SCAN commands take their own path and
    /// are copied.
    pub fn whole_write(&self, req: &Request) -> bool {
        let own_path = matches!(req.op, Op::Redis(r) if matches!(
            r.class,
            CmdClass::Blocking | CmdClass::Scan
        ));
        req.keys.len() == 1 && !self.warm && !own_path
    }

    /// Whether the other zones get fire-and-forget copies of `req`: a
    /// write not sent whole to every zone; in warm-up, deletes only (so
    /// that no older value comes back from the warm pool).
    pub fn copies(&self, req: &Request) -> bool {
        if req.keys.is_empty() || req.op.reads_only() || self.whole_write(req) {
            return false;
        }
        !self.warm || req.op.deletes()
    }
}
