//! A pool as a worker runs it: placement ring, servers with their
//! connections and ejection state (`server_rt`), limits; the `Wire` a
//! client's request is written by.

use super::fault::ServerFault;
use super::server_rt::{server_rt, ServerRt};
use crate::config::PoolConfig;
use crate::hash::{Placement, RingServer};
use crate::net::Endpoint;
use crate::proto::{Limits, Protocol};
use std::time::{Duration, Instant};

/// A pool as one worker runs it.
#[derive(Debug)]
pub struct PoolRt {
    /// The pool's configuration.
    pub cfg: PoolConfig,
    /// Wire protocol.
    pub proto: Protocol,
    /// Parser limits.
    pub limits: Limits,
    /// Key placement over the live servers.
    pub placement: Placement,
    /// Servers in config order.
    pub servers: Vec<ServerRt>,
    /// When an ejected server's retry time comes and the ring is rebuilt.
    pub next_rebuild: Option<Instant>,
    /// Client connections open on this pool in this worker.
    pub clients: u32,
    /// A server of this (Redis) pool refused `HELLO 3`: it predates RESP3,
    /// and clients asking for RESP3 get `-NOPROTO` from now on.
    pub resp3_refused: bool,
    /// Redis Cluster pools: the slot map (`redis_cluster: true`).
    pub cluster: Option<Box<super::cluster_map::ClusterRt>>,
    /// TLS on the listener and to the servers.
    pub tls: crate::net::tls::PoolTls,
    /// A route pool (`routes:`): placement per routed pool.
    pub routes: Option<Box<super::routes::RouteRt>>,
    /// How the pool routes (`route/`): which of the run-time state here
    /// a request's placement reads, and what rides along with it.
    pub route: crate::route::PoolRoute,
    /// A reload changed the servers of this pool (`migration: true`):
    /// where keys were before, until the migration is done.
    pub migration: Option<Box<super::migration_rt::MigrationRt>>,
    /// A fleet member's migrating pool before the fleet's barrier passed:
    /// requests for moved keys are refused, not pulled (`migrate.rs`).
    pub fleet_fenced: bool,
    /// Sentinel pools (`read_from` other than master): the replicas of each
    /// configured server that are up, as server indices past the
    /// configured ones (see `worker/sentinel.rs`).
    pub replicas_of: Vec<Vec<usize>>,
}

/// Where a client's request (or one server's part of it) is written and
/// how, as its pool plans it (`PoolRt::wire`): the server, the connection
/// slot its client uses there (`PoolRt::slot_for`), and whether its keys
/// lose their route's prefix on the way. `Worker::send_or_fail` writes it
/// and decides nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wire {
    /// The server, in its pool.
    pub server: usize,
    /// Its connection slot the request takes.
    pub slot: usize,
    /// Its keys lose their route's prefix on the way (`strip` routes).
    pub strip: bool,
}

impl PoolRt {
    /// What a new connection to `server` in `slot` sends before any
    /// client request (Redis: AUTH, SELECT and, on a RESP3 slot,
    /// `HELLO 3`; memcached: nothing).
    pub(super) fn handshake(&self, server: usize, slot: usize) -> Vec<(crate::proto::Op, Vec<u8>)> {
        if !self.cfg.redis {
            return Vec::new();
        }
        crate::proto::redis::handshake::handshake(&crate::proto::redis::handshake::ServerSetup {
            password: self.cfg.redis_auth.as_deref(),
            user: self.cfg.security.redis_auth_user.as_deref(),
            db: self.cfg.redis_db,
            read_replicas: self.cfg.cluster_read_replicas,
            resp3: self.servers[server].slot_is_resp3(slot),
        })
    }

    /// `server` answered the connection setup (AUTH, SELECT, HELLO) with
    /// an error: logged; a refused `HELLO 3` fails the connection.
    #[cold]
    pub(super) fn setup_refused(
        &mut self,
        server: usize,
        op: crate::proto::Op,
        bytes: &[u8],
    ) -> Option<ServerFault> {
        crate::log_error!(
            "pool '{}': server '{}' refused the connection setup: {}",
            self.cfg.name,
            self.servers[server].name,
            String::from_utf8_lossy(bytes).trim_end()
        );
        if matches!(op, crate::proto::Op::Redis(op) if op.cmd.is("HELLO")) {
            // A server before Redis 6: the RESP3 clients queued here must
            // not get RESP2 replies, so their requests fail with the
            // connection, and later `HELLO 3` gets -NOPROTO.
            self.resp3_refused = true;
            return Some(ServerFault::Resp3Refused);
        }
        None
    }

    /// Count a request of this route pool (index `at` in the stats) once
    /// for every route its keys take (a multi-key request split across
    /// routes counts for each).
    pub(super) fn count_routes(
        &self,
        at: usize,
        req: &crate::proto::Request,
        bytes: &[u8],
        stats: &crate::stats::shm::StatsSlot<'_>,
    ) {
        let mut seen: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        for r in &req.keys {
            if let Some(i) = self.cfg.routing.route_index(&bytes[r.clone()]) {
                if !seen.contains(&i) {
                    seen.push(i);
                    stats.route_add(at, i, 1);
                }
            }
        }
    }

    /// Build the runtime pool from its configuration; `olds`: the same
    /// pool in earlier configurations whose migration has not ended
    /// (newest first; empty when the pool does not migrate).
    pub fn new(cfg: &PoolConfig, olds: &[PoolConfig]) -> PoolRt {
        let mut servers: Vec<ServerRt> = cfg.servers.iter().map(|s| server_rt(cfg, s)).collect();
        let proto = if cfg.redis {
            Protocol::Redis
        } else {
            Protocol::Memcache
        };
        let limits = Limits {
            max_value: cfg.max_value_size,
            max_keys: cfg.max_keys,
            pre_auth: false,
        };
        let placement = build_placement(cfg, &servers);
        let migration = super::migration_rt::MigrationRt::new(cfg, olds, &mut servers);
        let routes = cfg.routing.is_composite().then(|| {
            Box::new(super::routes::RouteRt::build(
                &cfg.routing,
                &servers,
                cfg.eject_fail_fast,
            ))
        });
        PoolRt {
            cfg: cfg.clone(),
            proto,
            limits,
            placement,
            servers,
            next_rebuild: None,
            clients: 0,
            resp3_refused: false,
            cluster: cfg
                .redis_cluster
                .then(|| Box::new(super::cluster_map::ClusterRt::new(cfg.servers.len()))),
            tls: cfg.security.tls(),
            routes,
            route: crate::route::PoolRoute::build(cfg, None, migration.is_some()),
            migration,
            fleet_fenced: false,
            replicas_of: vec![Vec::new(); cfg.servers.len()],
        }
    }

    /// Add a server found at run time (a Redis Cluster node that is not in
    /// the configuration); returns its index.
    pub fn add_server(&mut self, name: String, endpoint: Endpoint) -> usize {
        let mut s = ServerRt::new(
            Some(endpoint),
            name.clone(),
            name.clone(),
            1,
            self.cfg.server_connections,
        );
        // A cluster node's name is `ip:port` (or `[ip6]:port`).
        let host = name.rsplit_once(':').map_or(name.as_str(), |(h, _)| h);
        s.tls_host = host.trim_matches(['[', ']']).to_string();
        self.servers.push(s);
        self.servers.len() - 1
    }

    /// Where a single-key read of a key owned by `server` goes, in the
    /// order tried (the next when one cannot be reached), by `read_from`:
    /// `None` when the master alone serves it.
    pub fn read_order(&self, server: usize, client_id: u64, now: Instant) -> Option<Vec<usize>> {
        let up: Vec<usize> = self
            .replicas_of
            .get(server)?
            .iter()
            .copied()
            .filter(|&r| self.refuse_connect(r, now, false).is_none())
            .collect();
        if up.is_empty() {
            return None;
        }
        let pick = |n: usize| (client_id % n as u64) as usize;
        match self.cfg.failover.read_from {
            crate::config::ReadFrom::Master => None,
            crate::config::ReadFrom::PreferReplica => Some(vec![up[pick(up.len())], server]),
            crate::config::ReadFrom::Any => {
                let i = pick(up.len() + 1);
                (i < up.len()).then(|| vec![up[i], server])
            }
        }
    }

    /// Whether a request of `len` bytes may be written to its server
    /// straight from the client's input (`Server::queue_through`), as it
    /// came: large enough for a write of its own to pay
    /// (`WRITE_THROUGH_MIN`), not rewritten by its protocol, and not a
    /// route pool's whose keys lose a prefix on the way.
    #[inline]
    pub(super) fn writes_through(&self, req: &crate::proto::Request, len: usize) -> bool {
        len >= super::WRITE_THROUGH_MIN && !self.proto.rewrites(req.op) && !self.route.strips()
    }

    /// The connection slot of `server` a client (`client_id`) uses for
    /// `op`: fixed per client and protocol version, so one client's
    /// requests to one server never overtake each other even with
    /// `server_connections` > 1, and a RESP3 client (`resp3`) gets a
    /// connection that said `HELLO 3`; a memcached binary request gets a
    /// binary connection (the same second half).
    #[inline]
    pub(super) fn slot_for(
        &self,
        server: usize,
        client_id: u64,
        resp3: bool,
        op: crate::proto::Op,
    ) -> usize {
        let second = resp3 || self.proto.conn_class(op) == 1;
        self.servers[server].slot_for(client_id, second)
    }

    /// Where a client's request (`op`) to `server` is written and how: its
    /// client's slot there (`slot_for`), and whether its keys lose a
    /// route's prefix on the way.
    #[inline]
    pub(super) fn wire(
        &self,
        server: usize,
        client_id: u64,
        resp3: bool,
        op: crate::proto::Op,
    ) -> Wire {
        Wire {
            server,
            slot: self.slot_for(server, client_id, resp3, op),
            strip: self.route.strips(),
        }
    }

    /// Server timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.cfg.timeout_ms.map(Duration::from_millis)
    }

    /// The server that owns `key`, first rebuilding the ring if an ejected
    /// server's retry time has come (twemproxy's `server_pool_update`).
    pub fn server_for(&mut self, key: &[u8], now: Instant) -> Option<usize> {
        self.rebuild_when_due(now);
        match &self.routes {
            Some(r) => r.server_for(&self.cfg.routing, key),
            None => self.placement.server_for(key),
        }
    }

    /// [`Self::server_for`], and the key's hash when the pool's own ring
    /// placed it by one (no prefix routes): a migrating pool places the
    /// key on its earlier rings too, by the same hash.
    pub fn server_and_hash(&mut self, key: &[u8], now: Instant) -> (Option<usize>, Option<u32>) {
        self.rebuild_when_due(now);
        if self.routes.is_none() && self.placement.hashes() {
            let h = self.placement.key_hash(key);
            return (self.placement.server_for_hash(h), Some(h));
        }
        (self.server_for(key, now), None)
    }

    #[inline]
    fn rebuild_when_due(&mut self, now: Instant) {
        if self.next_rebuild.is_some_and(|t| now >= t) {
            self.rebuild(now);
        }
    }

    /// Rebuild the ring from the servers that are live at `now`. With
    /// `server_health_check`, a server whose retry time came is probed
    /// first (`probing`) and comes back only when the probe answers.
    pub fn rebuild(&mut self, now: Instant) {
        let mut next = None;
        let check = self.cfg.server_health_check;
        for s in &mut self.servers {
            if let Some(until) = s.ejected_until {
                if until <= now {
                    if check {
                        if !s.probing {
                            crate::log_notice!(
                                "pool '{}': server '{}' ejection over: probing it before it takes keys again",
                                self.cfg.name,
                                s.name
                            );
                        }
                        s.probing = true;
                    } else {
                        s.ejected_until = None;
                        crate::log_notice!(
                            "pool '{}': server '{}' ejection over: back in the ring",
                            self.cfg.name,
                            s.name
                        );
                    }
                } else {
                    next = Some(next.map_or(until, |n: Instant| n.min(until)));
                }
            }
        }
        self.next_rebuild = next;
        self.placement = build_placement(&self.cfg, &self.servers);
        if self.routes.is_some() {
            self.routes = Some(Box::new(super::routes::RouteRt::build(
                &self.cfg.routing,
                &self.servers,
                self.cfg.eject_fail_fast,
            )));
        }
    }

    /// Before a new connection to a server written by host name: look
    /// the name up again (not more than once per [`RESOLVE_EVERY`]). The
    /// lookup blocks this worker for as long as the resolver takes: only
    /// a new connection pays it, never a request on an open one.
    pub fn look_up_again(&mut self, idx: usize, now: Instant) {
        self.servers[idx].look_up_again(&self.cfg.name, now);
    }

    /// Why a new connection to `idx` must not be tried now, if so.
    pub fn refuse_connect(&self, idx: usize, now: Instant, probe: bool) -> Option<ServerFault> {
        let s = &self.servers[idx];
        // Clients are told the failure that put the server to rest.
        let resting = || Some(ServerFault::Resting(s.last_fault.clone().map(Box::new)));
        if s.probing {
            // Only the health probe may connect until it has answered.
            return if probe { None } else { resting() };
        }
        if s.ejected_until.is_some_and(|until| until > now) {
            return resting();
        }
        match s.retry_at {
            Some(t) if t > now => resting(),
            _ => None,
        }
    }
}

fn build_placement(cfg: &PoolConfig, servers: &[ServerRt]) -> Placement {
    // Only the configured servers are on the ring (not Redis Cluster nodes
    // found at run time, nor the old servers of a migration); fail_fast
    // ejection keeps ejected servers on it.
    let ring: Vec<RingServer> = servers[..cfg.servers.len().min(servers.len())]
        .iter()
        .map(|s| RingServer {
            name: s.ring_name.as_bytes(),
            weight: s.weight,
            live: s.ejected_until.is_none() || cfg.eject_fail_fast,
        })
        .collect();
    Placement::new(cfg.hash, cfg.distribution, cfg.hash_tag, &ring)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proto::{Parse, Request};

    /// The last pool of this configuration text, at run time.
    pub(in crate::worker) fn pool(yaml: &str) -> PoolRt {
        let c = Config::from_str(yaml, std::path::Path::new("t.yml")).expect("config parses");
        PoolRt::new(c.pools.last().expect("a pool"), &[])
    }

    /// One request of `p`'s protocol.
    pub(in crate::worker) fn parse(p: &PoolRt, bytes: &[u8]) -> Request {
        match p.proto.parse_request(bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_large_request_is_written_through_unless_rewritten_or_stripped() {
        let rd = pool(
            "r:\n  listen: 127.0.0.1:22990\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n",
        );
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        let req = parse(&rd, set);
        assert!(rd.writes_through(&req, super::super::WRITE_THROUGH_MIN));
        assert!(
            !rd.writes_through(&req, super::super::WRITE_THROUGH_MIN - 1),
            "small"
        );
        // memcached `get` is rewritten on its way (as `gets` may be).
        let mc = pool("m:\n  listen: 127.0.0.1:22991\n  servers:\n   - 127.0.0.1:11211:1\n");
        let set = b"set k 0 0 1\r\nv\r\n";
        let len = super::super::WRITE_THROUGH_MIN;
        assert_eq!(
            mc.writes_through(&parse(&mc, set), len),
            !Protocol::Memcache.rewrites(parse(&mc, set).op)
        );
        // A route pool whose keys lose their prefix: rewritten on the way.
        let routes = |strip: &str| {
            format!(
                "users:\n  listen: 127.0.0.1:22992\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n\
                 front:\n  listen: 127.0.0.1:22993\n  redis: true\n  routes:\n   - \"user: users{strip}\"\n"
            )
        };
        let (kept, stripped) = (pool(&routes("")), pool(&routes(" strip")));
        let set = b"*3\r\n$3\r\nSET\r\n$6\r\nuser:k\r\n$1\r\nv\r\n";
        assert!(kept.writes_through(&parse(&kept, set), len));
        assert!(!stripped.writes_through(&parse(&stripped, set), len));
    }

    #[test]
    fn a_client_keeps_its_slot_by_id_and_resp3_or_binary_take_the_second_half() {
        let rd = pool(
            "r:\n  listen: 127.0.0.1:22994\n  redis: true\n  server_connections: 2\n  servers:\n   - 127.0.0.1:6379:1\n",
        );
        let get = parse(&rd, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").op;
        let slots = |resp3| [0, 1, 2, 3].map(|id| rd.slot_for(0, id, resp3, get));
        assert_eq!(slots(false), [0, 1, 0, 1], "spread by client id");
        assert_eq!(slots(true), [2, 3, 2, 3], "the RESP3 half");
        // memcached: a binary request on a binary connection, whatever
        // the client's session says.
        let mc = pool("m:\n  listen: 127.0.0.1:22995\n  servers:\n   - 127.0.0.1:11211:1\n");
        let text = parse(&mc, b"get k\r\n").op;
        let mut bin = vec![0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
        bin.extend_from_slice(&[0; 12]);
        bin.push(b'k');
        let bin = parse(&mc, &bin).op;
        assert_eq!(mc.slot_for(0, 7, false, text), 0);
        assert_eq!(mc.slot_for(0, 7, false, bin), 1);
    }

    #[test]
    fn a_request_is_stripped_on_its_wire_only_by_a_stripping_route() {
        let routes = |strip: &str| {
            format!(
                "users:\n  listen: 127.0.0.1:22996\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n\
                 front:\n  listen: 127.0.0.1:22997\n  redis: true\n  routes:\n   - \"user: users{strip}\"\n"
            )
        };
        let (kept, stripped) = (pool(&routes("")), pool(&routes(" strip")));
        let get = parse(&kept, b"*2\r\n$3\r\nGET\r\n$6\r\nuser:k\r\n").op;
        let wire = |p: &PoolRt, resp3| p.wire(0, 5, resp3, get);
        assert_eq!(
            wire(&kept, false),
            Wire {
                server: 0,
                slot: 0,
                strip: false
            }
        );
        assert_eq!(
            wire(&stripped, true),
            Wire {
                server: 0,
                slot: 1,
                strip: true
            }
        );
    }
}
