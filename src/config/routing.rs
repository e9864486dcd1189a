//! Routing across pools: a pool whose keys go to other pools by key
//! prefix (`routes:`), a pool made of one pool per zone (`zones:`,
//! `zone_writes:`, `zone_failover:`), and a pool whose traffic is copied to
//! a shadow pool (`shadow:`, `shadow_mode:`, `shadow_sample:`). A file
//! without these keys means what it means to twemproxy.
//!
//! A route or zone pool has no `servers:` of its own: after every pool is
//! read, [`resolve`] gives it the servers of the pools it names (each
//! once, in order) and records which slice of them each one owns, so the
//! data path splits, merges and counts its requests like any pool's.

use super::error::ConfigError;
use super::scalar::{parse_num, scalar_of, Report};
use super::yaml::{RawValue, Scalar};
use super::PoolConfig;
use std::path::Path;

/// The keys this file reads.
pub const ROUTING_KEYS: [&str; 8] = [
    "warm_up",
    "routes",
    "zones",
    "zone_writes",
    "zone_failover",
    "shadow",
    "shadow_mode",
    "shadow_sample",
];

/// One `routes:` entry: `PREFIX POOL [strip]` (`*` as the prefix: the
/// default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixRoute {
    /// Key prefix; empty for the default route.
    pub prefix: String,
    /// The pool the keys go to.
    pub pool: String,
    /// `strip` (Envoy's `remove_prefix`): the prefix is removed from the
    /// key before it reaches the server (Redis pools).
    pub strip: bool,
    /// Line of the entry.
    pub line: usize,
}

/// A route target as resolved: which of the route pool's servers are the
/// target pool's, and how that pool places keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget {
    /// The target pool's name.
    pub pool: String,
    /// Its servers are `servers[first..first + count]` of the route pool.
    pub first: usize,
    /// How many.
    pub count: usize,
    /// The target pool's hash, distribution and hash tag.
    pub hash: crate::hash::HashKind,
    /// Distribution.
    pub distribution: crate::hash::Distribution,
    /// Hash tag.
    pub hash_tag: Option<[u8; 2]>,
}

/// `shadow:` and its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadow {
    /// The pool requests are copied to.
    pub pool: String,
    /// `shadow_mode: writes`: only writes are copied (default `all`).
    pub writes_only: bool,
    /// `shadow_sample:` percent of requests copied (1..=100, default 100).
    pub sample_pct: u32,
}

/// `zones:` and how they are written and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zones {
    /// The zone pools, the local one first.
    pub pools: Vec<String>,
    /// The line of each.
    pub lines: Vec<usize>,
    /// `zone_writes: sync`: a single-key write goes to every zone and is
    /// answered with the first success; `async` (default): the local
    /// zone's reply is the client's, the other zones get a copy, fire and
    /// forget.
    pub sync_writes: bool,
    /// `zone_failover: miss` (default): a single-key read tries the next
    /// zone on an error or a miss; `error`: on an error only.
    pub failover_on_miss: bool,
    /// Line of `zones:`.
    pub line: usize,
    /// `warm_up: [COLD, WARM]`: two zones where writes go to the cold one
    /// only (deletes to both) and a value read from the warm one is copied
    /// to the cold one.
    pub warm: bool,
}

/// A pool's routing keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routing {
    /// `routes:` as written, longest prefix first.
    pub routes: Vec<PrefixRoute>,
    /// `zones:`.
    pub zones: Option<Zones>,
    /// The distinct target pools, in first-route order (set by [`resolve`]).
    pub targets: Vec<RouteTarget>,
    /// `shadow:`.
    pub shadow: Option<Shadow>,
}

impl Routing {
    /// Whether this pool routes by prefix (it has `routes:`).
    pub fn is_route_pool(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Whether its servers are other pools' (`routes:` or `zones:`).
    pub fn is_composite(&self) -> bool {
        self.is_route_pool() || self.zones.is_some()
    }

    /// Index into `targets` of the route `key` takes: the longest prefix
    /// that matches, else the default; `None` when neither.
    pub fn target_for(&self, key: &[u8]) -> Option<usize> {
        let route = self.route_for(key)?;
        self.targets.iter().position(|t| t.pool == route.pool)
    }

    /// The route `key` takes.
    pub fn route_for(&self, key: &[u8]) -> Option<&PrefixRoute> {
        self.routes
            .iter()
            .find(|r| key.starts_with(r.prefix.as_bytes()))
    }

    /// Index into `routes` of the route `key` takes.
    pub fn route_index(&self, key: &[u8]) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| key.starts_with(r.prefix.as_bytes()))
    }

    /// How many bytes of `key` its route strips (0: none).
    pub fn strip_len(&self, key: &[u8]) -> usize {
        self.route_for(key)
            .filter(|r| r.strip)
            .map_or(0, |r| r.prefix.len())
    }

    /// Whether any route strips its prefix.
    pub fn strips(&self) -> bool {
        self.routes.iter().any(|r| r.strip)
    }

    /// Zone pools: the zone (0: the local one) the pool's server `server`
    /// is in.
    pub fn zone_of(&self, server: usize) -> usize {
        self.targets
            .iter()
            .position(|t| (t.first..t.first + t.count).contains(&server))
            .unwrap_or(0)
    }
}

/// Parse a pool's routing keys (their syntax; references are checked by
/// [`resolve`] once every pool is read).
pub(crate) fn validate_routing<'a>(
    r: &mut Report,
    get: impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
) -> Option<Routing> {
    let before = r.errors.len();
    let mut routing = Routing::default();
    if let Some((key, value)) = get("routes") {
        routing.routes = routes(r, key, value);
    }
    routing.zones = zones(r, &get, !routing.routes.is_empty());
    routing.shadow = shadow(r, &get);
    (r.errors.len() == before).then_some(routing)
}

/// `routes:` lines, longest prefix first.
fn routes(r: &mut Report, key: &Scalar, value: &RawValue) -> Vec<PrefixRoute> {
    let mut out: Vec<PrefixRoute> = Vec::new();
    let items: &[Scalar] = match value {
        RawValue::Seq(items) => items,
        RawValue::Scalar(_) => &[],
    };
    if items.is_empty() {
        r.error(key.line, "'routes' is empty: list \"- PREFIX POOL\" lines");
    }
    for item in items {
        let mut words = item.text.split_whitespace();
        let (prefix, pool, mut rest) = (words.next(), words.next(), words.next());
        let strip = rest == Some("strip");
        if strip {
            rest = words.next();
        }
        let (Some(prefix), Some(pool), None) = (prefix, pool, rest) else {
            r.error(
                item.line,
                format!(
                    "route '{}': expected \"PREFIX POOL [strip]\" (PREFIX * for the default)",
                    item.text
                ),
            );
            continue;
        };
        let prefix = if prefix == "*" { "" } else { prefix };
        if let Some(first) = out.iter().find(|x| x.prefix == prefix) {
            r.error(
                item.line,
                format!(
                    "route prefix '{}' is listed twice (first on line {})",
                    prefix, first.line
                ),
            );
            continue;
        }
        out.push(PrefixRoute {
            prefix: prefix.to_string(),
            pool: pool.to_string(),
            strip: strip && !prefix.is_empty(),
            line: item.line,
        });
    }
    // Longest prefix first: the first match is the longest.
    out.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
    out
}

/// `zones:` or `warm_up:` with `zone_writes` and `zone_failover`.
fn zones<'a>(
    r: &mut Report,
    get: &impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
    has_routes: bool,
) -> Option<Zones> {
    let scalar = |k: &str| scalar_of(get, k);
    let warm = get("warm_up");
    if let Some((key, _)) = warm {
        if get("zones").is_some() {
            r.error(key.line, "a pool has 'zones' or 'warm_up', not both");
        }
    }
    if let Some((key, value)) = get("zones").or(warm) {
        let (pools, lines): (Vec<String>, Vec<usize>) = match value {
            RawValue::Seq(items) => items.iter().map(|i| (i.text.clone(), i.line)).unzip(),
            RawValue::Scalar(_) => Default::default(),
        };
        if warm.is_some() && pools.len() != 2 {
            r.error(
                key.line,
                "'warm_up' names two pools: the cold one, then the warm one",
            );
        } else if pools.len() < 2 {
            r.error(
                key.line,
                "'zones' needs at least two pools (the local zone first)",
            );
        }
        if has_routes {
            r.error(key.line, "a pool has 'routes' or 'zones', not both");
        }
        let mut choice = |k: &str, a: &str, b: &str| match scalar(k) {
            None => false,
            Some(v) if v.text == a => false,
            Some(v) if v.text == b => true,
            Some(v) => {
                r.error(
                    v.line,
                    format!("'{k}' has invalid value '{}': expected {a} or {b}", v.text),
                );
                false
            }
        };
        let sync_writes = choice("zone_writes", "async", "sync");
        let error_only = choice("zone_failover", "miss", "error");
        return Some(Zones {
            pools,
            lines,
            sync_writes: sync_writes && warm.is_none(),
            failover_on_miss: !error_only || warm.is_some(),
            line: key.line,
            warm: warm.is_some(),
        });
    } else {
        for k in ["zone_writes", "zone_failover"] {
            if let Some(v) = scalar(k) {
                r.error(v.line, format!("'{k}' needs 'zones'"));
            }
        }
    }
    None
}

/// `shadow:` with `shadow_mode` and `shadow_sample`.
fn shadow<'a>(
    r: &mut Report,
    get: &impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
) -> Option<Shadow> {
    let scalar = |k: &str| scalar_of(get, k);
    if let Some(pool) = scalar("shadow") {
        let writes_only = match scalar("shadow_mode").map(|s| s.text.as_str()) {
            None | Some("all") => false,
            Some("writes") => true,
            Some(other) => {
                r.error(
                    scalar("shadow_mode").map_or(pool.line, |s| s.line),
                    format!("'shadow_mode' has invalid value '{other}': expected all or writes"),
                );
                false
            }
        };
        let sample_pct = match scalar("shadow_sample") {
            None => 100,
            Some(v) => match parse_num(r, "shadow_sample", v) {
                Some(n @ 1..=100) => n,
                Some(_) => {
                    r.error(v.line, "'shadow_sample' must be a percentage from 1 to 100");
                    100
                }
                None => 100,
            },
        };
        return Some(Shadow {
            pool: pool.text.clone(),
            writes_only,
            sample_pct,
        });
    } else {
        for k in ["shadow_mode", "shadow_sample"] {
            if let Some(v) = scalar(k) {
                r.error(v.line, format!("'{k}' needs 'shadow'"));
            }
        }
    }
    None
}

/// The first key of how a pool speaks to its servers (TLS, password,
/// database) that differs between a routing pool and a pool it names.
fn server_side_difference(pool: &PoolConfig, target: &PoolConfig) -> Option<&'static str> {
    let (a, b) = (&pool.security, &target.security);
    if a.server_tls.is_some() != b.server_tls.is_some() {
        return Some("server_tls");
    }
    if let (Some(x), Some(y)) = (&a.server_tls, &b.server_tls) {
        if x.ca != y.ca {
            return Some("server_tls_ca");
        }
        if x.name != y.name {
            return Some("server_tls_name");
        }
        if x.cert != y.cert || x.key != y.key {
            return Some("server_tls_cert");
        }
    }
    if pool.redis_auth != target.redis_auth {
        return Some("redis_auth");
    }
    if a.redis_auth_user != b.redis_auth_user {
        return Some("redis_auth_user");
    }
    if pool.redis_db != target.redis_db {
        return Some("redis_db");
    }
    None
}

/// Check every pool's routes and shadow against the other pools, and give
/// each route pool the servers of the pools it routes to.
pub(crate) fn resolve(path: &Path, pools: &mut [PoolConfig], errors: &mut Vec<ConfigError>) {
    let snapshot: Vec<PoolConfig> = pools.to_vec();
    for pool in pools.iter_mut() {
        let mut out = PoolErrors {
            path,
            pool: pool.name.clone(),
            errors: &mut *errors,
        };
        check_shadow(pool, &snapshot, &mut out);
        if pool.routing.is_composite() {
            resolve_composite(pool, &snapshot, &mut out);
        }
    }
}

/// Where the errors found in one pool go, with its file and name.
struct PoolErrors<'a> {
    path: &'a Path,
    pool: String,
    errors: &'a mut Vec<ConfigError>,
}

impl PoolErrors<'_> {
    fn push(&mut self, line: usize, msg: String) {
        let e = ConfigError::new(self.path, line, msg).in_pool(&self.pool);
        self.errors.push(e);
    }
}

fn find<'a>(pools: &'a [PoolConfig], name: &str) -> Option<&'a PoolConfig> {
    pools.iter().find(|p| p.name == name)
}

/// `shadow:` names another plain sharded pool of the same protocol.
fn check_shadow(pool: &PoolConfig, pools: &[PoolConfig], out: &mut PoolErrors) {
    let Some(sh) = &pool.routing.shadow else {
        return;
    };
    let why = match find(pools, &sh.pool) {
        None => format!("'shadow' names no pool '{}'", sh.pool),
        Some(t) if t.name == pool.name => "'shadow' cannot name the pool itself".into(),
        Some(t) if t.redis != pool.redis => {
            format!("'shadow' pool '{}' speaks another protocol", t.name)
        }
        Some(t) if t.routing.is_composite() || t.redis_cluster => {
            format!("'shadow' pool '{}' must be a plain sharded pool", t.name)
        }
        Some(_) => return,
    };
    out.push(pool.line, why);
}

/// A route, zone or warm-up pool: checked, then given the servers of the
/// pools it names and the slice each one owns (nothing when an error was
/// found).
fn resolve_composite(pool: &mut PoolConfig, pools: &[PoolConfig], out: &mut PoolErrors) {
    let what = if pool.routing.is_route_pool() {
        "routes"
    } else {
        "zones"
    };
    if !pool.servers.is_empty() {
        out.push(
            pool.line,
            format!("a pool with '{what}' has no 'servers' of its own"),
        );
        return;
    }
    if pool.replicas > 1 {
        out.push(
            pool.line,
            format!("'replicas' cannot be set on a pool with '{what}'"),
        );
        return;
    }
    let mut found = Targets::default();
    let mut ok = true;
    for route in &named_pools(pool) {
        ok &= add_target(pool, route, pools, &mut found, out);
    }
    if !pool.redis {
        if let Some(r) = pool.routing.routes.iter().find(|r| r.strip) {
            let msg = "route 'strip' is for Redis pools (memcached replies carry the key)";
            out.push(r.line, msg.into());
            ok = false;
        }
    }
    if pool.migration {
        out.push(
            pool.line,
            format!("'migration' cannot be on for a pool with '{what}'"),
        );
        ok = false;
    }
    if ok {
        pool.servers = found.servers;
        pool.routing.targets = found.targets;
    }
}

/// The pools a composite pool names, in order (zones: the local one
/// first), as routes.
fn named_pools(pool: &PoolConfig) -> Vec<PrefixRoute> {
    match &pool.routing.zones {
        Some(z) => z
            .pools
            .iter()
            .zip(&z.lines)
            .map(|(p, &line)| PrefixRoute {
                prefix: String::new(),
                pool: p.clone(),
                strip: false,
                line,
            })
            .collect(),
        None => pool.routing.routes.clone(),
    }
}

/// What a composite pool gathers from the pools it names.
#[derive(Default)]
struct Targets {
    servers: Vec<super::ServerConfig>,
    targets: Vec<RouteTarget>,
}

/// One pool named by `route` added to `found`, once: false when it cannot
/// be (errors in `out`).
fn add_target(
    pool: &PoolConfig,
    route: &PrefixRoute,
    pools: &[PoolConfig],
    found: &mut Targets,
    out: &mut PoolErrors,
) -> bool {
    let kind = match &pool.routing.zones {
        Some(z) if z.warm => "warm_up pool",
        Some(_) => "zone",
        None => "route",
    };
    if found.targets.iter().any(|t| t.pool == route.pool) {
        if pool.routing.zones.is_some() {
            out.push(
                route.line,
                format!("{kind} '{}' is listed twice", route.pool),
            );
            return false;
        }
        return true;
    }
    let t = match find(pools, &route.pool) {
        None => Err(format!("names no pool '{}'", route.pool)),
        Some(t) if t.name == pool.name => Err("cannot name the pool itself".into()),
        Some(t) if t.redis != pool.redis => {
            Err(format!("pool '{}' speaks another protocol", t.name))
        }
        Some(t) if t.routing.is_composite() || t.redis_cluster || t.replicas > 1 => Err(format!(
            "pool '{}' must be a plain sharded pool (no routes, zones, cluster or replicas)",
            t.name
        )),
        Some(t) => Ok(t),
    };
    let t = match t {
        Ok(t) => t,
        Err(why) => {
            out.push(route.line, format!("{kind} '{}': {why}", route.pool));
            return false;
        }
    };
    let mut ok = true;
    // The routing pool opens the connections to its targets'
    // servers with its own server-side keys: a target spoken to
    // with other ones would silently lose its TLS or its password.
    if let Some(key) = server_side_difference(pool, t) {
        let msg = format!(
            "{kind} '{}': '{key}' differs from that pool's (this pool connects to its servers, so the server-side keys must be the same in both)",
            t.name
        );
        out.push(route.line, msg);
        ok = false;
    }
    for s in &t.servers {
        if found.servers.iter().any(|x| x.addr == s.addr) {
            let msg = format!(
                "{kind} '{}': server '{}' is in another of its pools too",
                t.name,
                s.stats_name()
            );
            out.push(route.line, msg);
            ok = false;
        }
    }
    found.targets.push(RouteTarget {
        pool: t.name.clone(),
        first: found.servers.len(),
        count: t.servers.len(),
        hash: t.hash,
        distribution: t.distribution,
        hash_tag: t.hash_tag,
    });
    found.servers.extend(t.servers.iter().cloned());
    ok
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    const BASE: &str = "\
users:
  listen: 127.0.0.1:7001
  servers:
   - 127.0.0.1:11211:1
   - 127.0.0.1:11212:1
sessions:
  listen: 127.0.0.1:7002
  hash: murmur
  servers:
   - 127.0.0.1:11213:1
";

    #[test]
    fn a_route_pool_gets_its_targets_servers() {
        let text = format!(
            "{BASE}front:\n  listen: 127.0.0.1:7000\n  routes:\n   - \"u: users\"\n   - \"user:vip: sessions\"\n   - \"* sessions\"\n"
        );
        let cfg = Config::from_str(&text, Path::new("r.yml")).unwrap();
        let front = cfg.pool("front").unwrap();
        assert_eq!(front.servers.len(), 3);
        let r = &front.routing;
        assert_eq!(r.targets.len(), 2);
        let target = |k: &[u8]| r.target_for(k).map(|i| r.targets[i].pool.as_str());
        assert_eq!(target(b"u:1"), Some("users"));
        assert_eq!(
            target(b"user:vip:9"),
            Some("sessions"),
            "longest prefix wins"
        );
        assert_eq!(target(b"other"), Some("sessions"), "the default");
        let users = r.targets.iter().find(|t| t.pool == "users").unwrap();
        assert_eq!((users.first, users.count), (1, 2));
    }

    #[test]
    fn bad_routes_are_refused_with_their_lines() {
        let err = |tail: &str| {
            let text = format!("{BASE}front:\n  listen: 127.0.0.1:7000\n{tail}");
            format!(
                "{:?}",
                Config::from_str(&text, Path::new("r.yml")).unwrap_err()
            )
        };
        let e = err("  routes:\n   - \"u: nowhere\"\n  shadow: front\n");
        assert!(
            e.contains("line: 14") && e.contains("names no pool 'nowhere'"),
            "{e}"
        );
        assert!(e.contains("'shadow' cannot name the pool itself"), "{e}");
        let e = err("  routes:\n   - \"v:\"\n");
        assert!(
            e.contains("line: 14") && e.contains("expected \\\"PREFIX POOL [strip]\\\""),
            "{e}"
        );
        let e = err("  routes:\n   - \"* users\"\n  servers:\n   - 127.0.0.1:1:1\n");
        assert!(e.contains("has no 'servers' of its own"), "{e}");
        let e = err("  shadow_mode: writes\n  servers:\n   - 127.0.0.1:1:1\n");
        assert!(e.contains("'shadow_mode' needs 'shadow'"), "{e}");
    }

    #[test]
    fn a_route_to_a_pool_spoken_to_otherwise_is_refused() {
        // A route pool connects to its targets' servers with its own
        // server-side keys: a target with a password (or TLS) of its own
        // would be reached without it.
        let text = "\
a:
  listen: 127.0.0.1:7001
  redis: true
  redis_auth: secret
  servers:
   - 127.0.0.1:6379:1
front:
  listen: 127.0.0.1:7000
  redis: true
  routes:
   - \"* a\"
";
        let e = format!(
            "{:?}",
            Config::from_str(text, Path::new("r.yml")).unwrap_err()
        );
        assert!(
            e.contains("line: 11") && e.contains("route 'a': 'redis_auth' differs"),
            "{e}"
        );
        let same = text.replace("  routes:", "  redis_auth: secret\n  routes:");
        assert!(Config::from_str(&same, Path::new("r.yml")).is_ok());
    }

    #[test]
    fn bad_zones_and_warm_up_are_refused_with_their_lines() {
        // `front:` is line 11 and its `listen:` line 12: the tail starts at 13.
        let err = |tail: &str| {
            let text = format!("{BASE}front:\n  listen: 127.0.0.1:7000\n{tail}");
            Config::from_str(&text, Path::new("r.yml"))
                .unwrap_err()
                .to_string()
        };
        const REDIS: &str =
            "cache:\n  listen: 127.0.0.1:7003\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n";
        let has = |e: &str, want: &str| assert!(e.contains(want), "{want:?} not in:\n{e}");
        // A pool that is not there, at the line of its entry.
        let e = err("  zones:\n   - users\n   - nowhere\n");
        has(
            &e,
            "r.yml:15: pool 'front': zone 'nowhere': names no pool 'nowhere'",
        );
        let e = err("  warm_up:\n   - gone\n   - users\n");
        has(
            &e,
            "r.yml:14: pool 'front': warm_up pool 'gone': names no pool 'gone'",
        );
        // Another protocol.
        let e = err(&format!("  zones:\n   - users\n   - cache\n{REDIS}"));
        has(
            &e,
            "r.yml:15: pool 'front': zone 'cache': pool 'cache' speaks another protocol",
        );
        let e = err(&format!("  warm_up:\n   - cache\n   - users\n{REDIS}"));
        has(
            &e,
            "r.yml:14: pool 'front': warm_up pool 'cache': pool 'cache' speaks another protocol",
        );
        // Cycles: the pool itself, and two zone pools naming each other.
        let e = err("  zones:\n   - users\n   - front\n");
        has(
            &e,
            "r.yml:15: pool 'front': zone 'front': cannot name the pool itself",
        );
        let e = err("  warm_up:\n   - front\n   - users\n");
        has(
            &e,
            "r.yml:14: pool 'front': warm_up pool 'front': cannot name the pool itself",
        );
        let e = err("  zones:\n   - users\n   - back\nback:\n  listen: 127.0.0.1:7004\n  warm_up:\n   - sessions\n   - front\n");
        has(
            &e,
            "r.yml:15: pool 'front': zone 'back': pool 'back' must be a plain sharded pool",
        );
        has(&e, "r.yml:20: pool 'back': warm_up pool 'front': pool 'front' must be a plain sharded pool");
        // Shape: counts, duplicates, both keys, values, keys without zones.
        let e = err("  warm_up:\n   - users\n   - sessions\n   - users\n");
        has(&e, "r.yml:13: pool 'front': 'warm_up' names two pools");
        let e = err("  zones:\n   - users\n");
        has(
            &e,
            "r.yml:13: pool 'front': 'zones' needs at least two pools",
        );
        let e = err("  zones:\n   - users\n   - users\n");
        has(&e, "r.yml:15: pool 'front': zone 'users' is listed twice");
        let e = err("  zones:\n   - users\n   - sessions\n  warm_up:\n   - users\n   - sessions\n");
        has(
            &e,
            "r.yml:16: pool 'front': a pool has 'zones' or 'warm_up', not both",
        );
        let e = err("  zones:\n   - users\n   - sessions\n  zone_writes: maybe\n");
        has(&e, "r.yml:16: pool 'front': 'zone_writes' has invalid value 'maybe': expected async or sync");
        let e = err("  zone_failover: error\n  servers:\n   - 127.0.0.1:1:1\n");
        has(&e, "r.yml:13: pool 'front': 'zone_failover' needs 'zones'");
        let e = err("  zones:\n   - users\n   - sessions\n  routes:\n   - \"* users\"\n");
        has(&e, "pool 'front': a pool has 'routes' or 'zones', not both");
    }
}
