//! Route types against parsed requests, without sockets: each test builds
//! a pool's route from configuration text, as the worker does, and checks
//! the plan a request gets.

use super::*;
use crate::config::Config;
use crate::proto::{Limits, Parse, Protocol};
use std::path::Path;

/// The pools of `yaml`, each with its route (a shadow's pool by index, as
/// the worker resolves it), migrating when listed in `migrating`.
fn routes(yaml: &str, migrating: &[&str]) -> Vec<(String, PoolRoute)> {
    let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
    c.pools
        .iter()
        .map(|p| {
            let to = p
                .routing
                .shadow
                .as_ref()
                .and_then(|s| c.pools.iter().position(|q| q.name == s.pool));
            let r = PoolRoute::build(p, to, migrating.contains(&p.name.as_str()));
            (p.name.clone(), r)
        })
        .collect()
}

fn route(yaml: &str, pool: &str) -> PoolRoute {
    route_migrating(yaml, pool, &[])
}

fn route_migrating(yaml: &str, pool: &str, migrating: &[&str]) -> PoolRoute {
    routes(yaml, migrating)
        .into_iter()
        .find(|(n, _)| n == pool)
        .map(|(_, r)| r)
        .expect("pool is configured")
}

fn request(proto: Protocol, bytes: &[u8]) -> Request {
    let limits = Limits {
        max_value: 1 << 20,
        max_keys: 1 << 20,
        pre_auth: false,
    };
    match proto.parse_request(bytes, &limits) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{bytes:?} does not parse: {other:?}"),
    }
}

fn redis(cmd: &str) -> Request {
    let words: Vec<&str> = cmd.split(' ').collect();
    let mut b = format!("*{}\r\n", words.len());
    for w in words {
        b.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    request(Protocol::Redis, b.as_bytes())
}

fn mc(line: &str) -> Request {
    request(Protocol::Memcache, line.as_bytes())
}

const REDIS: &str = "r:\n  listen: 127.0.0.1:22121\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n   - 127.0.0.1:6380:1\n";
const CLUSTER: &str = "c:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_cluster: true\n  servers:\n   - 127.0.0.1:7000:1\n";
const REPLICATED: &str = "m:\n  listen: 127.0.0.1:22121\n  replicas: 2\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n";
const SENTINEL: &str = "rd:\n  listen: 127.0.0.1:22121\n  redis: true\n  sentinels:\n   - 127.0.0.1:26379\n  read_from: prefer-replica\n  servers:\n   - 127.0.0.1:6379:1 shard1\n";

/// Two zone pools and a pool made of them (`extra` adds keys to it).
fn zones(extra: &str) -> String {
    format!(
        "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n\
         b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n\
         z:\n  listen: 127.0.0.1:22123\n{extra}"
    )
}

fn prefix(strip: &str) -> String {
    let pool = |name: &str, port: u16| {
        format!(
            "{name}:\n  listen: 127.0.0.1:{port}\n  redis: true\n  servers:\n   - 127.0.0.1:{}:1\n",
            port + 1000
        )
    };
    format!(
        "{}{}front:\n  listen: 127.0.0.1:22123\n  redis: true\n  routes:\n   - \"user: users{strip}\"\n   - \"* rest\"\n",
        pool("users", 22121),
        pool("rest", 22122)
    )
}

#[test]
fn a_plain_pool_places_each_key_on_its_ring() {
    let r = route(REDIS, "r");
    assert_eq!(r, PoolRoute::Hash);
    let p = r.plan(&redis("GET k"));
    assert_eq!(p.target, Target::Key);
    assert!(!p.pull && p.shadow.is_none() && !p.zone_copies && !p.count_routes);
    assert!(!p.replica_first);
    // No key: any one server.
    assert_eq!(r.plan(&redis("TIME")).target, Target::Keyless);
    // Blocking and SCAN commands take their own paths.
    assert_eq!(r.plan(&redis("BLPOP k 0")).target, Target::Blocking);
    assert_eq!(r.plan(&redis("SCAN 0")).target, Target::Scan);
    assert!(!r.keeps_split(redis("MGET a b").op));
    assert_eq!(r.copies(), 1);
}

#[test]
fn a_cluster_pool_sends_keys_to_their_slot_owner() {
    let r = route(CLUSTER, "c");
    assert_eq!(r, PoolRoute::Cluster);
    assert!(r.is_cluster());
    assert_eq!(r.plan(&redis("SET k v")).target, Target::Slot);
    assert_eq!(r.plan(&redis("BRPOP k 1")).target, Target::Blocking);
}

#[test]
fn a_replicated_pool_sends_to_every_replica_and_keeps_splits() {
    let r = route(REPLICATED, "m");
    assert_eq!(r, PoolRoute::Replicated { copies: 2 });
    assert_eq!(r.copies(), 2);
    assert_eq!(r.plan(&mc("get k\r\n")).target, Target::Replicas);
    assert_eq!(r.plan(&mc("set k 0 0 1\r\nv\r\n")).target, Target::Replicas);
    // A get of keys all on one server still falls over per key.
    assert!(r.keeps_split(mc("get a b\r\n").op));
}

#[test]
fn sentinel_reads_try_a_replica_first() {
    let r = route(SENTINEL, "rd");
    assert_eq!(
        r,
        PoolRoute::ReplicaReads {
            read_from: ReadFrom::PreferReplica,
            inner: Box::new(PoolRoute::Hash),
        }
    );
    let p = r.plan(&redis("GET k"));
    assert!(p.replica_first);
    assert_eq!(p.target, Target::Key);
}

#[test]
fn a_zone_pool_reads_and_writes_single_keys_across_zones() {
    let r = route(&zones("  zones:\n   - a\n   - b\n"), "z");
    assert!(r.is_zoned() && !r.warms());
    assert!(
        r.zone_fails_over_on_miss(),
        "zone_failover defaults to miss"
    );
    assert_eq!(
        r.plan(&mc("get k\r\n")).target,
        Target::Zones(ZoneStep::Read)
    );
    let set = r.plan(&mc("set k 0 0 1\r\nv\r\n"));
    assert_eq!(set.target, Target::Zones(ZoneStep::AsyncWrite));
    assert!(!set.zone_copies, "a whole write is not copied as well");
    // A multi-key read stays split on one server: misses fall over per key.
    assert!(r.keeps_split(mc("get a b\r\n").op));
    assert!(!r.keeps_split(mc("delete a\r\n").op));

    let sync = route(
        &zones("  zones:\n   - a\n   - b\n  zone_writes: sync\n  zone_failover: error\n"),
        "z",
    );
    assert!(!sync.zone_fails_over_on_miss());
    assert_eq!(
        sync.plan(&mc("set k 0 0 1\r\nv\r\n")).target,
        Target::Zones(ZoneStep::SyncWrite)
    );
}

#[test]
fn a_warm_up_pool_copies_deletes_only() {
    let r = route(&zones("  warm_up:\n   - a\n   - b\n"), "z");
    assert!(r.warms() && r.zone_fails_over_on_miss());
    let set = r.plan(&mc("set k 0 0 1\r\nv\r\n"));
    assert_eq!(
        set.target,
        Target::Key,
        "a warm-up write goes to the cold pool"
    );
    assert!(!set.zone_copies);
    let del = r.plan(&mc("delete k\r\n"));
    assert_eq!(del.target, Target::Key);
    assert!(del.zone_copies, "a delete reaches the warm pool too");
    assert_eq!(
        r.plan(&mc("get k\r\n")).target,
        Target::Zones(ZoneStep::Read)
    );
}

#[test]
fn prefix_routes_are_counted_and_may_strip() {
    let r = route(&prefix(""), "front");
    assert_eq!(r, PoolRoute::Prefix { strip: false });
    assert!(!r.strips());
    let p = r.plan(&redis("GET user:1"));
    assert!(p.count_routes);
    assert_eq!(p.target, Target::Key);
    assert!(route(&prefix(" strip"), "front").strips());
}

#[test]
fn a_shadow_wraps_the_route_it_copies() {
    let yaml = format!(
        "{}  shadow: a\n  shadow_mode: writes\n  shadow_sample: 25\n",
        zones("  zones:\n   - a\n   - b\n")
    );
    let r = route(&yaml, "z");
    // A shadow of a zone pool: a composition, the zones still decide.
    let PoolRoute::Shadow { shadow, inner } = &r else {
        panic!("not a shadow: {r:?}");
    };
    assert!(matches!(**inner, PoolRoute::Zones(_)));
    assert_eq!(
        (shadow.to, shadow.writes_only, shadow.sample_pct),
        (0, true, 25)
    );
    assert!(r.is_zoned());
    let set = r.plan(&mc("set k 0 0 1\r\nv\r\n"));
    assert_eq!(set.shadow, Some(*shadow));
    assert_eq!(set.target, Target::Zones(ZoneStep::AsyncWrite));
    // Writes only: a read is not copied.
    assert_eq!(r.plan(&mc("get k\r\n")).shadow, None);
    // 25 of every 100 taken.
    assert_eq!((0..100).filter(|&t| shadow.sampled(t)).count(), 25);
}

#[test]
fn a_plain_migrating_pools_inline_plan_is_the_composed_one() {
    let r = route_migrating(REDIS, "r", &["r"]);
    assert!(matches!(&r, PoolRoute::Migrating { inner } if **inner == PoolRoute::Hash));
    for cmd in [
        "GET k",
        "SET k v",
        "MGET a b",
        "PING",
        "BLPOP q 0",
        "SCAN 0",
    ] {
        let req = redis(cmd);
        assert_eq!(r.plan(&req), r.composed_plan(&req), "{cmd}");
        assert!(r.plan(&req).pull, "{cmd}");
    }
    assert_eq!(r.plan(&redis("PING")).target, Target::Keyless);
    assert_eq!(r.plan(&redis("BLPOP q 0")).target, Target::Blocking);
}

#[test]
fn a_migrating_pool_pulls_first_until_its_migration_ends() {
    let r = route_migrating(SENTINEL, "rd", &["rd"]);
    assert!(r.is_migrating());
    let p = r.plan(&redis("INCR k"));
    assert!(p.pull && p.replica_first);
    assert_eq!(p.target, Target::Key);
    let done = r.without_migration();
    assert!(!done.is_migrating());
    assert_eq!(done, route(SENTINEL, "rd"));

    // Under a shadow, the migration ends and the shadow stays.
    let yaml = format!("{REDIS}  shadow: s\ns:\n  listen: 127.0.0.1:22124\n  redis: true\n  servers:\n   - 127.0.0.1:6390:1\n");
    let r = route_migrating(&yaml, "r", &["r"]);
    assert!(r.plan(&redis("SET k v")).pull);
    let done = r.without_migration();
    assert!(!done.plan(&redis("SET k v")).pull);
    assert_eq!(done.shadow().map(|s| s.to), Some(1));
}
