//! Rules and defaults of the whole loader.

use super::*;
use crate::hash::{Distribution, HashKind};

fn load(text: &str) -> Result<Config, ConfigErrors> {
    Config::from_str(text, Path::new("t.yml"))
}

fn errors(text: &str) -> Vec<ConfigError> {
    match load(text) {
        Ok(c) => panic!("accepted:\n{text}\n{c:?}"),
        Err(e) => e.0,
    }
}

/// The single error of `text`: its line and message.
fn one_error(text: &str) -> (usize, String) {
    let e = errors(text);
    assert_eq!(e.len(), 1, "{text}\n{e:?}");
    (e[0].line, e[0].message.clone())
}

const MIN: &str = "alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n";

/// A minimal pool with `extra` lines (indented by two) after `listen`.
fn pool_with(extra: &str) -> String {
    let mut s = String::from("alpha:\n  listen: 127.0.0.1:22121\n");
    for l in extra.lines() {
        s.push_str("  ");
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("  servers:\n   - 127.0.0.1:11211:1\n");
    s
}

#[test]
fn twemproxy_defaults() {
    let c = load(MIN).unwrap();
    let p = &c.pools[0];
    assert_eq!(p.name, "alpha");
    assert_eq!(p.line, 1);
    assert_eq!(p.hash, HashKind::Fnv1a_64);
    assert_eq!(p.distribution, Distribution::Ketama);
    assert_eq!(p.hash_tag, None);
    assert_eq!(p.timeout_ms, None);
    assert_eq!(p.backlog, 512);
    assert_eq!(p.client_connections, 0);
    assert!(!p.redis && !p.tcpkeepalive && !p.reuseport && !p.preconnect && !p.auto_eject_hosts);
    assert_eq!(p.redis_auth, None);
    assert_eq!(p.redis_db, 0);
    assert_eq!(p.server_connections, 1);
    assert_eq!(p.server_retry_timeout_ms, 30_000);
    assert_eq!(p.server_failure_limit, 2);
    assert_eq!(p.max_value_size, 1 << 20);
    assert!(!p.allow_flush);
    assert!(!p.keyless_random);
    assert_eq!(p.servers.len(), 1);
    assert_eq!(p.servers[0].line, 4);
    assert_eq!(c.process, ProcessConfig::default());
    assert!(c.warnings.is_empty());
}

#[test]
fn every_key_set() {
    let text = pool_with(
        "hash: murmur\nhash_tag: \"{}\"\ndistribution: modula\ntimeout: 400\nbacklog: 1024\n\
         client_connections: 100\nredis: true\ntcpkeepalive: true\nreuseport: true\n\
         redis_auth: secret\nredis_db: 3\npreconnect: true\nauto_eject_hosts: true\n\
         server_connections: 4\nserver_retry_timeout: 2000\nserver_failure_limit: 1\n\
         max_value_size: 2m\nallow_flush: true\nkeyless_server: random",
    );
    let c = load(&text).unwrap();
    let p = &c.pools[0];
    assert_eq!(p.hash, HashKind::Murmur);
    assert_eq!(p.hash_tag, Some(*b"{}"));
    assert_eq!(p.distribution, Distribution::Modula);
    assert_eq!(p.timeout_ms, Some(400));
    assert_eq!(p.backlog, 1024);
    assert_eq!(p.client_connections, 100);
    assert!(p.redis && p.tcpkeepalive && p.reuseport && p.preconnect && p.auto_eject_hosts);
    assert_eq!(p.redis_auth.as_deref(), Some("secret"));
    assert_eq!(p.redis_db, 3);
    assert_eq!(p.server_connections, 4);
    assert_eq!(p.server_retry_timeout_ms, 2000);
    assert_eq!(p.server_failure_limit, 1);
    assert_eq!(p.max_value_size, 2 << 20);
    assert!(p.allow_flush);
    assert!(p.keyless_random);
    // client_connections is accepted with a note that walnut enforces it.
    assert_eq!(c.warnings.len(), 1);
}

#[test]
fn every_hash_and_distribution_name() {
    for h in HashKind::ALL {
        let c = load(&pool_with(&format!("hash: {}", h.name()))).unwrap();
        assert_eq!(c.pools[0].hash, h);
    }
    for d in ["ketama", "modula", "random"] {
        let c = load(&pool_with(&format!("distribution: {d}"))).unwrap();
        assert_eq!(c.pools[0].distribution.name(), d);
    }
}

#[test]
fn redis_default_value_size_and_timeout_zero() {
    let c = load(&pool_with("redis: true\ntimeout: 0")).unwrap();
    assert_eq!(c.pools[0].max_value_size, 512 << 20);
    assert_eq!(c.pools[0].timeout_ms, None);
}

#[test]
fn bad_values_name_key_line_and_pool() {
    let cases = [
        ("hash: xyz", "'hash' has invalid value 'xyz'"),
        (
            "distribution: consistent",
            "'distribution' has invalid value",
        ),
        ("hash_tag: \"{\"", "'hash_tag' has invalid value"),
        ("hash_tag: \"{}}\"", "'hash_tag' has invalid value"),
        (
            "redis: yes",
            "'redis' has invalid value 'yes': expected true or false",
        ),
        ("preconnect: True", "'preconnect' has invalid value"),
        ("tcpkeepalive: 1", "'tcpkeepalive' has invalid value"),
        ("timeout: -1", "'timeout' has invalid value '-1'"),
        ("timeout: 1.5", "'timeout' has invalid value"),
        ("backlog: lots", "'backlog' has invalid value"),
        (
            "server_retry_timeout: 2147483648",
            "'server_retry_timeout' has invalid value",
        ),
        ("server_connections: 0", "'server_connections' cannot be 0"),
        (
            "redis_auth: pw",
            "'redis_auth' is only valid for a redis pool",
        ),
        ("max_value_size: 0", "'max_value_size' has invalid value"),
        ("hashing: md5", "unknown key 'hashing'"),
        (
            "hash: md5\nhash: crc16",
            "'hash' is a duplicate (first set on line 3)",
        ),
        (
            "listen: 127.0.0.1:22122",
            "'listen' is a duplicate (first set on line 2)",
        ),
        (
            "tcpkeepalive:\n - true",
            "'tcpkeepalive' must be a single value, not a list",
        ),
    ];
    for (extra, want) in cases {
        let text = pool_with(extra);
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{extra}: {e:?}");
        assert!(e[0].message.starts_with(want), "{extra}: {}", e[0]);
        assert_eq!(e[0].pool.as_deref(), Some("alpha"));
        let last = if extra.contains('-') {
            3
        } else {
            2 + extra.lines().count()
        };
        assert_eq!(e[0].line, last, "{extra}: {}", e[0]);
    }
}

#[test]
fn huge_numbers_wrap_like_twemproxy_with_a_warning() {
    let c = load(&pool_with("backlog: 4294967297")).unwrap();
    assert_eq!(c.pools[0].backlog, 1);
    assert_eq!(c.warnings.len(), 1);
    assert_eq!(c.warnings[0].line, 3);
}

#[test]
fn redis_auth_on_redis_pool_is_fine() {
    let c = load(&pool_with("redis: true\nredis_auth: pw")).unwrap();
    assert_eq!(c.pools[0].redis_auth.as_deref(), Some("pw"));
}

#[test]
fn missing_listen_and_servers() {
    let (line, msg) = one_error("alpha:\n  hash: md5\n  servers:\n   - 127.0.0.1:11211:1\n");
    assert_eq!((line, msg.as_str()), (1, "'listen' is missing"));
    let (line, msg) = one_error("alpha:\n  listen: 127.0.0.1:22121\n");
    assert_eq!((line, msg.as_str()), (1, "'servers' is missing"));
    let e = errors("alpha:\n  listen: 127.0.0.1:22121\n  servers: 127.0.0.1:11211:1\n");
    assert_eq!(e[0].line, 3);
    assert!(e[0].message.starts_with("'servers' must be a list"));
    let e = errors("alpha:\n  listen: 127.0.0.1:22121\n  servers:\n   -\n");
    assert!(
        e[0].message.contains("'servers' items must be non-empty"),
        "{e:?}"
    );
}

#[test]
fn bad_listen() {
    for bad in [
        "127.0.0.1",
        "127.0.0.1:0",
        "127.0.0.1:70000",
        "/tmp/x.sock 1000",
    ] {
        let text = MIN.replace("127.0.0.1:22121", bad);
        let (line, msg) = one_error(&text);
        assert_eq!(line, 2, "{bad}");
        assert!(msg.starts_with("'listen'"), "{bad}: {msg}");
    }
}

#[test]
fn unix_listen_lenient_permissions_warn() {
    // strtol("999", 8) is 0 for twemproxy: accepted, no chmod, with a warning.
    let c = load(&MIN.replace("127.0.0.1:22121", "/tmp/x.sock 999")).unwrap();
    assert_eq!(
        c.pools[0].listen,
        ListenAddr::Unix {
            path: "/tmp/x.sock".into(),
            perm: None
        }
    );
    assert_eq!(c.warnings.len(), 1);
    assert_eq!(c.warnings[0].line, 2);
}

#[test]
fn unix_listen_with_permissions() {
    let c = load(&MIN.replace("127.0.0.1:22121", "/tmp/walnut.sock 0666")).unwrap();
    assert_eq!(
        c.pools[0].listen,
        ListenAddr::Unix {
            path: "/tmp/walnut.sock".into(),
            perm: Some(0o666)
        }
    );
}

#[test]
fn bad_servers_name_the_server() {
    for bad in [
        "127.0.0.1:11211",
        "127.0.0.1:11211:0",
        "127.0.0.1:11211:-2",
        "127.0.0.1:0:1",
        "127.0.0.1:65536:1",
        "localhost:port:1",
    ] {
        let text = format!("{MIN}   - {bad}\n");
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert_eq!(e[0].line, 5, "{bad}");
        assert_eq!(e[0].server.as_deref(), Some(bad));
        assert_eq!(e[0].pool.as_deref(), Some("alpha"));
    }
}

#[test]
fn duplicate_server_names() {
    let text = format!("{MIN}   - 127.0.0.1:11211:2\n");
    let (line, msg) = one_error(&text);
    assert_eq!(line, 5);
    assert!(msg.contains("same name '127.0.0.1'"), "{msg}");
    let text =
        "a:\n  listen: 127.0.0.1:1\n  servers:\n   - 10.0.0.1:6379:1 s1\n   - 10.0.0.2:6379:1 s1\n";
    assert_eq!(one_error(text).0, 5);
    // Different ports, or one named and one not, are distinct.
    let ok = "a:\n  listen: 127.0.0.1:1\n  servers:\n   - 10.0.0.1:6379:1\n   - 10.0.0.1:6380:1\n   - 10.0.0.2:6379:1 s1\n";
    let c = load(ok).unwrap();
    let names: Vec<_> = c.pools[0]
        .servers
        .iter()
        .map(ServerConfig::ketama_name)
        .collect();
    assert_eq!(names, ["10.0.0.1:6379", "10.0.0.1:6380", "s1"]);
}

#[test]
fn duplicate_pools_and_listen() {
    let text = format!("{MIN}{MIN}");
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].line, e[0].pool.as_deref()), (5, Some("alpha")));
    assert!(e[0].message.contains("defined twice"));
    let text = format!("{MIN}{}", MIN.replace("alpha", "beta"));
    let (line, msg) = one_error(&text);
    assert_eq!(line, 6);
    assert!(
        msg.contains("same address '127.0.0.1:22121' as pool 'alpha'"),
        "{msg}"
    );
}

#[test]
fn errors_are_collected_across_pools() {
    let text = "a:\n  listen: 127.0.0.1:1\n  hash: x\n  servers:\n   - h:1:0\nb:\n  listen: 127.0.0.1:2\n  redis: maybe\n  servers:\n   - h:1:1\n";
    let e = errors(text);
    let got: Vec<_> = e
        .iter()
        .map(|e| (e.line, e.pool.clone().unwrap_or_default()))
        .collect();
    assert_eq!(got, [(3, "a".into()), (5, "a".into()), (8, "b".into())]);
}

#[test]
fn no_pools() {
    let e = errors("_walnut:\n  workers: 2\n");
    assert_eq!(e[0].message, "has no pools");
}

#[test]
fn process_section() {
    let text = format!(
        "_walnut:\n  workers: auto\n  listener: accept_mutex\n  cpu_affinity: 0,1\n  admin: 127.0.0.1:9999\n\
         \x20 tcp_quickack: false\n  accept_mutex_delay: 100\n  graceful_timeout: 5s\n  log_level: 7\n\
         \x20 reply_hold: 1ms\n{MIN}"
    );
    let c = load(&text).unwrap();
    let p = &c.process;
    assert_eq!(p.workers, Workers::Auto);
    assert_eq!(p.listener, ListenerMode::AcceptMutex);
    assert_eq!(p.cpu_affinity, CpuAffinity::List(vec![0, 1]));
    assert_eq!(p.admin.as_deref(), Some("127.0.0.1:9999"));
    assert!(!p.tcp_quickack);
    assert_eq!(
        (p.accept_mutex_delay_ms, p.graceful_timeout_ms),
        (100, 5000)
    );
    assert_eq!(p.log_level, Some(7));
    assert_eq!(p.reply_hold_us, 1000);
    assert_eq!(c.pools.len(), 1);
    assert_eq!(
        load(MIN).unwrap().process.reply_hold_us,
        crate::config::DEFAULT_REPLY_HOLD_US
    );

    let c = load(&format!("_walnut:\n  cpu_affinity:\n   - 2\n   - 3\n{MIN}")).unwrap();
    assert_eq!(c.process.cpu_affinity, CpuAffinity::List(vec![2, 3]));
}

#[test]
fn process_section_errors() {
    for (line, want) in [
        ("workers: 0", "'workers': invalid workers"),
        ("listener: epoll", "'listener': invalid listener"),
        ("cpu_affinity: x", "'cpu_affinity'"),
        ("admin: nowhere", "'admin'"),
        ("tcp_quickack: on", "'tcp_quickack' has invalid value"),
        ("graceful_timeout: soon", "'graceful_timeout'"),
        ("log_level: 12", "'log_level'"),
        ("reply_hold: soon", "'reply_hold': invalid value 'soon'"),
        ("threads: 4", "unknown key 'threads'"),
    ] {
        let text = format!("_walnut:\n  {line}\n{MIN}");
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{line}: {e:?}");
        assert_eq!((e[0].line, e[0].pool.as_deref()), (2, Some("_walnut")));
        assert!(e[0].message.starts_with(want), "{line}: {}", e[0]);
    }
}

#[test]
fn yaml_errors_have_lines() {
    let e = errors("alpha:\n  listen: 127.0.0.1:22121\n  servers: [127.0.0.1:11211:1]\n");
    assert_eq!(e[0].line, 3);
    let e = errors("alpha:\n  listen: \"unterminated\n  servers:\n");
    assert!(e[0].message.starts_with("YAML syntax error"), "{e:?}");
    assert!(e[0].line >= 2);
}

#[test]
fn no_panic_on_odd_input() {
    for text in [
        "\u{0}",
        ":",
        "- a\n- b\n",
        "a:\n  - b\n",
        "a:\n  b:\n   - c:\n      d: e\n",
        "{}",
        "[]",
        "a: [",
        "a:\n  listen: ':'\n  servers:\n   - ' '\n",
        "a:\n  servers:\n   - ::::\n   - /:\n   - / :1 x\n",
    ] {
        let _ = load(text);
    }
}

#[test]
fn redis_cluster_needs_a_redis_pool() {
    let c = load(&pool_with(
        "redis: true\nredis_cluster: true\ncluster_read_replicas: true",
    ))
    .unwrap();
    assert!(c.pools[0].redis_cluster && c.pools[0].cluster_read_replicas);
    assert!(!load(MIN).unwrap().pools[0].redis_cluster);
    let (line, msg) = one_error(&pool_with("redis_cluster: true"));
    assert_eq!(line, 3);
    assert!(
        msg.contains("'redis_cluster' is only valid for a redis pool"),
        "{msg}"
    );
    let (_, msg) = one_error(&pool_with("redis: true\ncluster_read_replicas: true"));
    assert!(
        msg.contains("only valid with 'redis_cluster: true'"),
        "{msg}"
    );
    let (line, msg) = one_error(&pool_with("redis: true\nredis_cluster: true\nredis_db: 2"));
    assert_eq!(line, 5);
    assert!(msg.contains("'redis_db' must be 0"), "{msg}");
}

#[test]
fn sentinels_need_named_servers_of_a_plain_redis_pool() {
    let named = "rd:\n  listen: 127.0.0.1:22121\n  redis: true\n  sentinels:\n   - 127.0.0.1:26379\n  servers:\n   - 127.0.0.1:6379:1 shard1\n";
    let c = load(named).unwrap();
    assert_eq!(
        c.pools[0].failover.sentinels,
        vec![("127.0.0.1".to_string(), 26379)]
    );
    let (line, msg) = one_error(&named.replace(" shard1", ""));
    assert_eq!(line, 7);
    assert!(msg.contains("needs a name"), "{msg}");
    let (line, msg) =
        one_error(&named.replace("redis: true", "redis: true\n  redis_cluster: true"));
    assert_eq!(line, 5);
    assert!(msg.contains("a cluster fails over by itself"), "{msg}");
    let (_, msg) = one_error(&pool_with("redis: true\nsentinel_auth: x"));
    assert_eq!(msg, "'sentinel_auth' needs 'sentinels'");
    let (_, msg) = one_error(&named.replace("- 127.0.0.1:26379", "- 127.0.0.1"));
    assert_eq!(msg, "sentinel '127.0.0.1' is not host:port");
}

#[test]
fn server_tls_handshake_timeout() {
    let ca = format!("{}/tests/vectors/tls/ca.crt", env!("CARGO_MANIFEST_DIR"));
    let timeout_of = |extra: &str| {
        let c = load(&pool_with(&format!(
            "server_tls: true\nserver_tls_ca: {ca}\n{extra}"
        )))
        .unwrap();
        c.pools[0]
            .security
            .server_tls
            .as_ref()
            .map(|t| t.handshake_timeout_ms)
    };
    assert_eq!(timeout_of(""), Some(10_000));
    assert_eq!(timeout_of("server_tls_handshake_timeout: 750"), Some(750));
    let (line, msg) = one_error(&pool_with("server_tls_handshake_timeout: 750"));
    assert_eq!(line, 3);
    assert!(msg.contains("needs 'server_tls: true'"), "{msg}");
}
