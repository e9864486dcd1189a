//! One pool's configuration: [`PoolConfig`], its defaults (twemproxy's
//! where it has one) and the names of the keys it may set. Reading a
//! pool section into it is `pool_section.rs`.

use super::addr::{ListenAddr, ServerConfig};
use super::failover::Failover;
use super::routing::Routing;
use super::security::Security;
use crate::hash::{Distribution, HashKind};

/// twemproxy's default server retry timeout (ms).
pub const DEFAULT_SERVER_RETRY_TIMEOUT_MS: u64 = 30_000;
/// twemproxy's default listen backlog.
pub const DEFAULT_BACKLOG: u32 = 512;
/// twemproxy's default server failure limit.
pub const DEFAULT_SERVER_FAILURE_LIMIT: u32 = 2;
/// Default largest value a memcached pool passes (memcached's item size).
pub const DEFAULT_MC_MAX_VALUE_SIZE: usize = 1 << 20;
/// Default largest value a Redis pool passes (Redis' bulk string limit).
pub const DEFAULT_REDIS_MAX_VALUE_SIZE: usize = 512 << 20;

/// Every key a pool may set: twemproxy's, then walnut's extensions.
pub const POOL_KEYS: [&str; 35] = [
    "listen",
    "hash",
    "hash_tag",
    "distribution",
    "timeout",
    "backlog",
    "client_connections",
    "redis",
    "tcpkeepalive",
    "reuseport",
    "redis_auth",
    "redis_db",
    "preconnect",
    "auto_eject_hosts",
    "server_connections",
    "server_retry_timeout",
    "server_failure_limit",
    "servers",
    "max_value_size",
    "allow_flush",
    "allow_keys",
    "replicas",
    "replica_read",
    "max_keys",
    "client_output_limit",
    "client_max_inflight",
    "client_idle_timeout",
    "eject_mode",
    "server_health_check",
    "slowlog_threshold",
    "redis_cluster",
    "cluster_read_replicas",
    "migration",
    "migration_rate",
    "keyless_server",
];

/// The pool keys whose value is a list (the rest are single values).
pub const LIST_KEYS: [&str; 6] = [
    "servers",
    "users",
    "routes",
    "zones",
    "warm_up",
    "sentinels",
];

/// One pool: a listen address in front of a set of servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Pool name (the top-level key).
    pub name: String,
    /// Line of the pool name.
    pub line: usize,
    /// `listen:` address.
    pub listen: ListenAddr,
    /// `hash:` key hash (default fnv1a_64).
    pub hash: HashKind,
    /// `hash_tag:` two delimiters, e.g. `{}`.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution:` (default ketama).
    pub distribution: Distribution,
    /// `timeout:` per request in ms; `None` waits forever (unset or 0).
    pub timeout_ms: Option<u64>,
    /// `backlog:` listen backlog (default 512).
    pub backlog: u32,
    /// `client_connections:` limit, 0 = none. twemproxy 0.5 parses this key
    /// but never enforces it; walnut does.
    pub client_connections: u32,
    /// `tcpkeepalive:` on client connections (default false).
    pub tcpkeepalive: bool,
    /// `reuseport:` SO_REUSEPORT on the listener (default false).
    pub reuseport: bool,
    /// `preconnect:` connect to all servers at start (default false).
    pub preconnect: bool,
    /// `redis:` speak Redis instead of memcached (default false).
    pub redis: bool,
    /// `redis_auth:` password clients and servers must use.
    pub redis_auth: Option<String>,
    /// `redis_db:` database selected on server connections (default 0).
    pub redis_db: u32,
    /// `server_connections:` connections per server (default 1, never 0).
    pub server_connections: u32,
    /// `auto_eject_hosts:` eject failing servers (default false).
    pub auto_eject_hosts: bool,
    /// `server_retry_timeout:` ms before an ejected server is retried (30000).
    pub server_retry_timeout_ms: u64,
    /// `server_failure_limit:` failures before ejection (default 2).
    pub server_failure_limit: u32,
    /// `servers:` in configuration order.
    pub servers: Vec<ServerConfig>,
    /// walnut `max_value_size:` largest value passed, in bytes (suffixes
    /// k, m, g allowed). Default 1 MiB for memcached, 512 MiB for Redis.
    pub max_value_size: usize,
    /// walnut `replicas:` servers each key is stored on (memcached pools;
    /// default 1 = plain sharding).
    pub replicas: u32,
    /// walnut `replica_read:` which replica serves reads: first or random.
    pub replica_read_random: bool,
    /// walnut `max_keys:` most keys in one multi-key request (default 1048576).
    pub max_keys: usize,
    /// walnut `client_output_limit:` replies buffered for a client that does
    /// not read before it is disconnected, bytes (default 256m; 0 = none).
    pub client_output_limit: usize,
    /// walnut `client_max_inflight:` requests of one client in flight before
    /// walnut stops reading from it until replies drain (default 10000).
    pub client_max_inflight: usize,
    /// walnut `client_idle_timeout:` close clients idle this long, ms (0 = never).
    pub client_idle_timeout_ms: u64,
    /// walnut `eject_mode:` `rehash` (twemproxy: an ejected server's keys
    /// move to the others) or `fail_fast` (its keys get errors at once and
    /// never move, so no other server sees them while it is out).
    pub eject_fail_fast: bool,
    /// walnut `migration:` when a reload changes this pool's servers, keep
    /// serving keys whose owner changed (from the old owner until they are
    /// moved) and move them in the background (default false: twemproxy's
    /// plain rehash).
    pub migration: bool,
    /// walnut `migration_rate:` most keys moved per second by the
    /// background migrator, the ceiling of a pace that follows the
    /// servers' headroom (`migrate/pace.rs`; default 100000).
    pub migration_rate: u32,
    /// walnut `server_health_check:` probe an ejected server (memcached
    /// `version`, Redis `PING`) before taking it back (default false:
    /// twemproxy takes it back when its retry time comes).
    pub server_health_check: bool,
    /// walnut `slowlog_threshold:` this pool's slow-log threshold in µs,
    /// overriding `_walnut: slowlog_threshold` (0 = off for this pool).
    pub slowlog_threshold_us: Option<u64>,
    /// walnut `allow_flush:` let memcached `flush_all` (text and binary)
    /// through to every server (default false: one stray command from any
    /// client would wipe the whole tier; twemproxy never forwarded it), and
    /// Redis FLUSHALL/FLUSHDB likewise. Refused with memcached's own `-F`
    /// reply, `CLIENT_ERROR flush_all not allowed`, and a Redis error.
    pub allow_flush: bool,
    /// walnut `allow_keys:` let Redis `KEYS` reach every server (it walks
    /// every key of each, blocking it meanwhile; `SCAN` does not).
    pub allow_keys: bool,
    /// walnut `keyless_server:` where a Redis command with no key goes
    /// (EVAL/EVALSHA/FCALL with numkeys 0, TIME): `first` (the first live
    /// server of the list, default) or `random` (any live server, chosen
    /// per request), as predixy routes them. SCRIPT LOAD reaches every
    /// server, so EVALSHA works wherever it lands.
    pub keyless_random: bool,
    /// walnut `redis_cluster:` the servers are seed nodes of a Redis
    /// Cluster: keys are routed by hash slot from the cluster's own slot
    /// map, MOVED and ASK are followed (default false; needs `redis: true`).
    pub redis_cluster: bool,
    /// walnut `cluster_read_replicas:` read-only commands of a cluster pool
    /// go to a replica of the slot's master (after `READONLY`), falling
    /// back to the master when the slot has none (default false).
    pub cluster_read_replicas: bool,
    /// TLS (listener and servers) and ACL users (config/security.rs).
    pub security: Security,
    /// Prefix routes to other pools and a shadow pool (config/routing.rs).
    pub routing: Routing,
    /// Sentinels that say where each shard's master is (config/failover.rs).
    pub failover: Failover,
}

impl PoolConfig {
    /// A pool with every key at its default (twemproxy's where it has
    /// one), before its keys are read.
    pub(super) fn new(name: &str, line: usize) -> PoolConfig {
        PoolConfig {
            name: name.to_string(),
            line,
            listen: ListenAddr::Tcp {
                host: String::new(),
                port: 0,
            },
            hash: HashKind::Fnv1a_64,
            hash_tag: None,
            distribution: Distribution::Ketama,
            timeout_ms: None,
            backlog: DEFAULT_BACKLOG,
            client_connections: 0,
            tcpkeepalive: false,
            reuseport: false,
            preconnect: false,
            redis: false,
            redis_auth: None,
            redis_db: 0,
            server_connections: 1,
            auto_eject_hosts: false,
            server_retry_timeout_ms: DEFAULT_SERVER_RETRY_TIMEOUT_MS,
            server_failure_limit: DEFAULT_SERVER_FAILURE_LIMIT,
            servers: Vec::new(),
            max_value_size: DEFAULT_MC_MAX_VALUE_SIZE,
            allow_flush: false,
            allow_keys: false,
            keyless_random: false,
            replicas: 1,
            replica_read_random: false,
            max_keys: 1 << 20,
            client_output_limit: 256 << 20,
            client_max_inflight: 10_000,
            client_idle_timeout_ms: 0,
            eject_fail_fast: false,
            migration: false,
            migration_rate: 100_000,
            server_health_check: false,
            slowlog_threshold_us: None,
            redis_cluster: false,
            cluster_read_replicas: false,
            security: Security::default(),
            routing: Routing::default(),
            failover: Failover::default(),
        }
    }
}
