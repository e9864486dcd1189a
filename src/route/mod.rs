//! A pool's routing as one value composed of small route types, built
//! from its configuration (`PoolRoute::build`): the leaf that places a key
//! (the pool's own ring, Redis Cluster's slots, prefix routes, zones,
//! replicas of each key) under the wrappers that add to it (a shadow
//! pool, Sentinel replicas serving reads, an earlier placement to pull
//! moved keys from). Given a parsed request, [`PoolRoute::plan`] says what
//! happens to it: where it goes, what rides along, what comes first. It
//! never touches a socket; the worker carries plans out (`worker/client.rs`
//! `dispatch_routed`, `worker/forward.rs` `Worker::forward`) and keeps the
//! run-time state the leaves read (rings, slot map, replicas that are up).
//!
//! So a shadow of a zone pool, or a migrating pool behind Sentinel reads,
//! is a composition of the types here, not a new flag, and each type is
//! tested below without I/O.

mod shadow;
mod zones;

pub use shadow::ShadowRoute;
pub use zones::{ZoneRoute, ZoneStep};

use crate::config::{PoolConfig, ReadFrom};
use crate::proto::redis::CmdClass;
use crate::proto::{Op, Request};

/// How a pool routes: a leaf, or a wrapper around the route it adds to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolRoute {
    /// The key's server on the pool's ring (twemproxy's `distribution`,
    /// `hash`, `hash_tag`).
    Hash,
    /// The key's slot owner in a Redis Cluster, following MOVED and ASK.
    Cluster,
    /// `routes:`: the key's longest matching prefix names a pool, whose
    /// own ring places it among that pool's servers; `strip`: some routes
    /// remove their prefix from the keys on the way.
    Prefix { strip: bool },
    /// `zones:`: one pool per zone, the local zone first.
    Zones(ZoneRoute),
    /// `replicas: n` (memcached): each key on `n` servers of the ring,
    /// writes to every one, reads from one with the next tried on failure.
    Replicated { copies: u32 },
    /// Sentinel `read_from` other than `master`: a single-key read goes
    /// to a replica of its owner that is up, else to `inner`'s choice.
    ReplicaReads {
        read_from: ReadFrom,
        inner: Box<PoolRoute>,
    },
    /// `shadow:`: requests copied (sampled) to another pool, `inner`
    /// answers.
    Shadow {
        shadow: ShadowRoute,
        inner: Box<PoolRoute>,
    },
    /// `migration: true` after a reload changed the placement: a key an
    /// earlier placement put elsewhere is pulled to its new owner before
    /// `inner` sends the request there.
    Migrating { inner: Box<PoolRoute> },
}

/// Where a key-routed request goes, as the leaf of a route decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A blocking command (BLPOP, ...): a server connection of its own.
    Blocking,
    /// SCAN and friends: over every server in turn, one cursor.
    Scan,
    /// The key's slot owner (Redis Cluster).
    Slot,
    /// Every replica of the key (writes), or one after another (reads).
    Replicas,
    /// A zone pool's single-key request (the step says how).
    Zones(ZoneStep),
    /// The server the placement (ring or prefix route) picks for the key.
    Key,
    /// A Redis command without a key: one server, any.
    Keyless,
}

/// What a route decides for one key-routed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Keys an earlier placement put elsewhere are pulled first.
    pub pull: bool,
    /// The request is copied to the shadow pool, if its sampling takes it.
    pub shadow: Option<ShadowRoute>,
    /// A write whose other zones get fire-and-forget copies.
    pub zone_copies: bool,
    /// Counted per prefix route.
    pub count_routes: bool,
    /// A single-key read tries a replica of the key's owner first.
    pub replica_first: bool,
    /// Where the request (a single-key one, or a split one that found one
    /// server) goes.
    pub target: Target,
}

impl PoolRoute {
    /// The route of `cfg`; `shadow_to` is the index of the pool its
    /// `shadow:` names, `migrating` whether an earlier placement is still
    /// being left.
    pub fn build(cfg: &PoolConfig, shadow_to: Option<usize>, migrating: bool) -> PoolRoute {
        let routing = &cfg.routing;
        let mut route = if cfg.redis_cluster {
            PoolRoute::Cluster
        } else if let Some(z) = &routing.zones {
            PoolRoute::Zones(ZoneRoute::new(z))
        } else if routing.is_route_pool() {
            PoolRoute::Prefix {
                strip: routing.strips(),
            }
        } else if cfg.replicas > 1 {
            PoolRoute::Replicated {
                copies: cfg.replicas,
            }
        } else {
            PoolRoute::Hash
        };
        if cfg.failover.read_from != ReadFrom::Master {
            route = PoolRoute::ReplicaReads {
                read_from: cfg.failover.read_from,
                inner: Box::new(route),
            };
        }
        if migrating {
            route = PoolRoute::Migrating {
                inner: Box::new(route),
            };
        }
        if let (Some(sh), Some(to)) = (&routing.shadow, shadow_to) {
            route = PoolRoute::Shadow {
                shadow: ShadowRoute::new(sh, to),
                inner: Box::new(route),
            };
        }
        route
    }

    /// The route a wrapper adds to; `None` for a leaf.
    #[inline]
    fn inner(&self) -> Option<&PoolRoute> {
        match self {
            PoolRoute::ReplicaReads { inner, .. }
            | PoolRoute::Shadow { inner, .. }
            | PoolRoute::Migrating { inner } => Some(inner),
            _ => None,
        }
    }

    /// The leaf: the route that places keys.
    #[inline]
    pub fn leaf(&self) -> &PoolRoute {
        let mut r = self;
        while let Some(inner) = r.inner() {
            r = inner;
        }
        r
    }

    /// The zone route, when the pool is made of zones.
    #[inline]
    pub fn zones(&self) -> Option<&ZoneRoute> {
        match self.leaf() {
            PoolRoute::Zones(z) => Some(z),
            _ => None,
        }
    }

    /// Whether the pool is made of zones.
    pub fn is_zoned(&self) -> bool {
        self.zones().is_some()
    }

    /// A zone pool whose single-key reads ask the next zone on a miss.
    pub fn zone_fails_over_on_miss(&self) -> bool {
        self.zones().is_some_and(|z| z.on_miss)
    }

    /// A warm-up pool (a zone pool whose second zone is the warm one).
    pub fn warms(&self) -> bool {
        self.zones().is_some_and(|z| z.warm)
    }

    /// The shadow route, when requests are copied to another pool.
    pub fn shadow(&self) -> Option<&ShadowRoute> {
        let mut r = Some(self);
        while let Some(node) = r {
            if let PoolRoute::Shadow { shadow, .. } = node {
                return Some(shadow);
            }
            r = node.inner();
        }
        None
    }

    /// Whether keys lose a route's prefix on the way to their server.
    pub fn strips(&self) -> bool {
        matches!(self.leaf(), PoolRoute::Prefix { strip: true })
    }

    /// Whether keys are placed by a Redis Cluster's slots.
    pub fn is_cluster(&self) -> bool {
        matches!(self.leaf(), PoolRoute::Cluster)
    }

    /// How many servers each key is on (1 unless `replicas:`).
    pub fn copies(&self) -> u32 {
        match self.leaf() {
            PoolRoute::Replicated { copies } => *copies,
            _ => 1,
        }
    }

    /// Whether moved keys are pulled before requests for them are sent.
    #[inline]
    pub fn is_migrating(&self) -> bool {
        match self {
            PoolRoute::Migrating { .. } => true,
            PoolRoute::Shadow { inner, .. } | PoolRoute::ReplicaReads { inner, .. } => {
                inner.is_migrating()
            }
            _ => false,
        }
    }

    /// The same route without its migration (once it has ended).
    pub fn without_migration(self) -> PoolRoute {
        match self {
            PoolRoute::Migrating { inner } => inner.without_migration(),
            PoolRoute::Shadow { shadow, inner } => PoolRoute::Shadow {
                shadow,
                inner: Box::new(inner.without_migration()),
            },
            PoolRoute::ReplicaReads { read_from, inner } => PoolRoute::ReplicaReads {
                read_from,
                inner: Box::new(inner.without_migration()),
            },
            leaf => leaf,
        }
    }

    /// Whether a split request that found one server still goes split
    /// (its fragments fall over per key: replicas, a zone pool's reads).
    pub fn keeps_split(&self, op: Op) -> bool {
        match self.leaf() {
            PoolRoute::Replicated { .. } => true,
            PoolRoute::Zones(_) => op.reads_only(),
            _ => false,
        }
    }

    /// What happens to `req`, a key-routed request (`proto::Route::Single`
    /// or `Multi`). A plain pool's plan is made inline: it is every
    /// request's cost there.
    #[inline]
    pub fn plan(&self, req: &Request) -> Plan {
        match self {
            PoolRoute::Hash => Plan::to(key_target(req)),
            _ => self.composed_plan(req),
        }
    }

    /// The plan of any other route: each wrapper adds its part on the way
    /// down to the leaf.
    fn composed_plan(&self, req: &Request) -> Plan {
        // A plain pool while it migrates: every request's cost there (not
        // inline in `plan`, where it would cost every plain pool's).
        if let PoolRoute::Migrating { inner } = self {
            if matches!(**inner, PoolRoute::Hash) {
                return Plan {
                    pull: true,
                    ..Plan::to(key_target(req))
                };
            }
        }
        let mut plan = Plan::to(Target::Key);
        let mut node = self;
        loop {
            match node {
                PoolRoute::Shadow { shadow, inner } => {
                    plan.shadow = shadow.takes(req).then_some(*shadow);
                    node = inner;
                }
                PoolRoute::Migrating { inner } => {
                    plan.pull = true;
                    node = inner;
                }
                PoolRoute::ReplicaReads { inner, .. } => {
                    plan.replica_first = true;
                    node = inner;
                }
                leaf => {
                    plan.target = leaf.target(req, &mut plan);
                    return plan;
                }
            }
        }
    }

    /// A leaf's target for `req` (and what it adds to `plan`).
    fn target(&self, req: &Request, plan: &mut Plan) -> Target {
        match self {
            PoolRoute::Zones(z) => plan.zone_copies = z.copies(req),
            PoolRoute::Prefix { .. } => plan.count_routes = true,
            _ => {}
        }
        match (self, key_target(req)) {
            // Blocking and SCAN commands take their own paths whatever
            // the placement (they hold a connection, or walk every server).
            (_, t @ (Target::Blocking | Target::Scan)) => t,
            (PoolRoute::Cluster, _) => Target::Slot,
            (PoolRoute::Replicated { .. }, _) => Target::Replicas,
            (PoolRoute::Zones(z), t) => z.single(req).map_or(t, Target::Zones),
            (_, t) => t,
        }
    }
}

impl Plan {
    /// A plan that sends the request to `target` and nothing more.
    #[inline]
    const fn to(target: Target) -> Plan {
        Plan {
            pull: false,
            shadow: None,
            zone_copies: false,
            count_routes: false,
            replica_first: false,
            target,
        }
    }
}

/// Where a request goes on a ring: its key's server; a Redis command
/// without a key to any one; blocking and SCAN commands their own ways.
#[inline]
fn key_target(req: &Request) -> Target {
    if let Op::Redis(r) = req.op {
        match r.class {
            CmdClass::Blocking => return Target::Blocking,
            CmdClass::Scan => return Target::Scan,
            _ if req.keys.is_empty() => return Target::Keyless,
            _ => {}
        }
    }
    Target::Key
}

#[cfg(test)]
pub(crate) mod tests;
