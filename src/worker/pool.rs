//! A pool as a worker runs it: placement ring, servers with their
//! connections and ejection state, limits.

use crate::config::{PoolConfig, ServerAddr};
use crate::hash::{Placement, RingServer};
use crate::net::Endpoint;
use crate::proto::{Limits, Protocol};
use mio::Token;
use std::time::{Duration, Instant};

/// One backend server of a pool.
#[derive(Debug)]
pub struct ServerRt {
    /// Where it lives (resolved when the configuration was loaded).
    pub endpoint: Option<Endpoint>,
    /// Display name (stats key).
    pub name: String,
    /// The ketama name and weight, for ring rebuilds.
    pub ring_name: String,
    /// Configured weight.
    pub weight: u32,
    /// Connection slots, each an open connection or none: `server_connections`
    /// slots per connection class of the protocol, class after class.
    pub conns: Vec<Option<Token>>,
    /// Consecutive failures (twemproxy's `failure_count`).
    pub failures: u32,
    /// Ejected until this instant (auto_eject_hosts).
    pub ejected_until: Option<Instant>,
}

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
}

impl PoolRt {
    /// Build the runtime pool from its configuration.
    pub fn new(cfg: &PoolConfig) -> PoolRt {
        let proto = if cfg.redis {
            Protocol::Redis
        } else {
            Protocol::Memcache
        };
        let slots = cfg.server_connections.max(1) as usize * proto.conn_classes();
        let servers: Vec<ServerRt> = cfg
            .servers
            .iter()
            .map(|s| {
                let endpoint = match &s.addr {
                    ServerAddr::Tcp { host, port } => match crate::net::resolve(host, *port) {
                        Ok(a) => Some(Endpoint::Tcp(a)),
                        Err(e) => {
                            crate::log_error!(
                                "pool '{}': server '{}': {}",
                                cfg.name,
                                s.stats_name(),
                                e
                            );
                            None
                        }
                    },
                    ServerAddr::Unix { path } => Some(Endpoint::Unix(path.clone())),
                };
                ServerRt {
                    endpoint,
                    name: s.stats_name(),
                    ring_name: s.ketama_name(),
                    weight: s.weight,
                    conns: vec![None; slots],
                    failures: 0,
                    ejected_until: None,
                }
            })
            .collect();
        let limits = Limits {
            max_value: cfg.max_value_size,
            ..Limits::default()
        };
        let placement = build_placement(cfg, &servers);
        PoolRt {
            cfg: cfg.clone(),
            proto,
            limits,
            placement,
            servers,
            next_rebuild: None,
            clients: 0,
        }
    }

    /// Connection slot of `server` for a client and a request operation:
    /// the client's slot within the operation's connection class.
    pub fn slot_for(&self, server: usize, client_id: u64, op: crate::proto::Op) -> usize {
        let classes = self.proto.conn_classes();
        let per_class = (self.servers[server].conns.len() / classes).max(1);
        (client_id as usize) % per_class + per_class * self.proto.conn_class(op)
    }

    /// Number of connection slots of `server` in the first class (the ones
    /// preconnected).
    pub fn first_class_slots(&self, server: usize) -> usize {
        self.servers[server].conns.len() / self.proto.conn_classes()
    }

    /// Server timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.cfg.timeout_ms.map(Duration::from_millis)
    }

    /// The server that owns `key`, first rebuilding the ring if an ejected
    /// server's retry time has come (twemproxy's `server_pool_update`).
    pub fn server_for(&mut self, key: &[u8], now: Instant) -> Option<usize> {
        if let Some(t) = self.next_rebuild {
            if now >= t {
                self.rebuild(now);
            }
        }
        self.placement.server_for(key)
    }

    /// Rebuild the ring from the servers that are live at `now`.
    pub fn rebuild(&mut self, now: Instant) {
        let mut next = None;
        for s in &mut self.servers {
            if let Some(until) = s.ejected_until {
                if until <= now {
                    s.ejected_until = None;
                } else {
                    next = Some(next.map_or(until, |n: Instant| n.min(until)));
                }
            }
        }
        self.next_rebuild = next;
        self.placement = build_placement(&self.cfg, &self.servers);
    }

    /// Record a failure of server `idx`; returns true if it was ejected.
    pub fn record_failure(&mut self, idx: usize, now: Instant) -> bool {
        let s = &mut self.servers[idx];
        s.failures += 1;
        if !self.cfg.auto_eject_hosts || s.failures < self.cfg.server_failure_limit {
            return false;
        }
        s.failures = 0;
        s.ejected_until = Some(now + Duration::from_millis(self.cfg.server_retry_timeout_ms));
        self.rebuild(now);
        true
    }

    /// Record a successful exchange with server `idx`.
    pub fn record_success(&mut self, idx: usize) {
        self.servers[idx].failures = 0;
    }
}

fn build_placement(cfg: &PoolConfig, servers: &[ServerRt]) -> Placement {
    let ring: Vec<RingServer> = servers
        .iter()
        .map(|s| RingServer {
            name: s.ring_name.as_bytes(),
            weight: s.weight,
            live: s.ejected_until.is_none(),
        })
        .collect();
    Placement::new(cfg.hash, cfg.distribution, cfg.hash_tag, &ring)
}
