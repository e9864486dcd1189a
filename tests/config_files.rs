//! Configuration files under tests/configs: good ones load, bad ones are
//! rejected with the file, the line and the pool named.

use std::path::{Path, PathBuf};
use walnut::config::{Config, ListenAddr, ServerAddr, Workers};
use walnut::hash::{Distribution, HashKind};

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs")
}

#[test]
fn twemproxy_example_loads_unchanged() {
    let path = configs().join("nutcracker.yml");
    let c = Config::from_str(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    let names: Vec<_> = c.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma", "delta", "omega"]);

    let beta = c.pool("beta").unwrap();
    assert!(beta.redis);
    assert_eq!(beta.hash_tag, Some(*b"{}"));
    assert_eq!(beta.timeout_ms, Some(400));
    assert_eq!(beta.redis_auth.as_deref(), Some("s3cret"));
    assert_eq!(beta.redis_db, 2);
    let stats: Vec<_> = beta.servers.iter().map(|s| s.stats_name()).collect();
    assert_eq!(stats, ["cache-a", "cache-b", "cache-c", "cache-d"]);

    let gamma = c.pool("gamma").unwrap();
    assert_eq!(
        (gamma.hash, gamma.distribution),
        (HashKind::Murmur, Distribution::Modula)
    );
    assert_eq!((gamma.backlog, gamma.server_connections), (1024, 2));
    assert!(gamma.preconnect && gamma.tcpkeepalive && gamma.auto_eject_hosts);
    assert_eq!(gamma.servers[0].ketama_name(), "127.0.0.1:11212");

    let delta = c.pool("delta").unwrap();
    assert_eq!(delta.distribution, Distribution::Random);
    assert_eq!(delta.servers[2].weight, 2);
    assert_eq!(delta.servers[0].ketama_name(), "mc1.internal");

    let omega = c.pool("omega").unwrap();
    assert_eq!(
        omega.listen,
        ListenAddr::Unix {
            path: "/tmp/walnut-omega.sock".into(),
            perm: Some(0o660)
        }
    );
    assert_eq!(omega.servers[0].weight, 100_000);
    assert_eq!(
        omega.servers[2].addr,
        ServerAddr::Unix {
            path: "/var/run/memcached/memcached.sock".into()
        }
    );
    assert_eq!(omega.servers[2].ketama_name(), "local");
    assert_eq!(omega.servers[2].line, 68);
}

#[test]
fn walnut_example_loads() {
    let c = Config::load(&configs().join("walnut.yml")).unwrap();
    assert_eq!(c.process.workers, Workers::Auto);
    assert_eq!(c.process.graceful_timeout_ms, 30_000);
    assert_eq!(c.pools.len(), 2);
    let s = c.pool("sessions").unwrap();
    assert_eq!(s.max_value_size, 16 << 20);
    assert!(!s.allow_flush);
}

/// (file, line, pool, words the message must contain)
const BAD: &[(&str, usize, &str, &str)] = &[
    (
        "bad_bool.yml",
        3,
        "alpha",
        "'redis' has invalid value 'yes'",
    ),
    (
        "bad_bool_case.yml",
        3,
        "alpha",
        "'preconnect' has invalid value 'True'",
    ),
    (
        "bad_distribution.yml",
        3,
        "alpha",
        "'distribution' has invalid value",
    ),
    ("bad_hash.yml", 3, "alpha", "'hash' has invalid value 'xyz'"),
    (
        "bad_hash_tag.yml",
        3,
        "alpha",
        "'hash_tag' has invalid value",
    ),
    ("bad_listen.yml", 2, "alpha", "'listen' has an invalid port"),
    ("bad_listen_perm.yml", 2, "alpha", "invalid file permission"),
    (
        "bad_number.yml",
        3,
        "alpha",
        "'timeout' has invalid value '-1'",
    ),
    ("bad_server_format.yml", 5, "alpha", "has an invalid format"),
    (
        "bad_server_port.yml",
        5,
        "alpha",
        "has an invalid port '70000'",
    ),
    ("bad_server_weight.yml", 5, "alpha", "has a zero weight"),
    ("bad_unix_server.yml", 5, "alpha", "has an invalid format"),
    (
        "duplicate_key.yml",
        4,
        "alpha",
        "'hash' is a duplicate (first set on line 3)",
    ),
    ("duplicate_pool.yml", 5, "alpha", "is defined twice"),
    ("duplicate_server.yml", 5, "alpha", "same name '127.0.0.1'"),
    ("duplicate_server_name.yml", 5, "alpha", "same name 'shard'"),
    ("flow_sequence.yml", 3, "", "flow collection"),
    ("missing_listen.yml", 1, "alpha", "'listen' is missing"),
    ("missing_servers.yml", 1, "alpha", "'servers' is missing"),
    (
        "redis_auth_memcache.yml",
        3,
        "alpha",
        "'redis_auth' is only valid for a redis pool",
    ),
    (
        "same_listen.yml",
        6,
        "beta",
        "same address '127.0.0.1:22121' as pool 'alpha'",
    ),
    (
        "server_connections_zero.yml",
        3,
        "alpha",
        "'server_connections' cannot be 0",
    ),
    ("unknown_key.yml", 3, "alpha", "unknown key 'hashing'"),
    ("yaml_syntax.yml", 0, "", "YAML syntax error"),
];

#[test]
fn every_bad_config_names_file_line_and_pool() {
    let dir = configs().join("bad");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let listed: Vec<_> = BAD.iter().map(|b| b.0.to_string()).collect();
    assert_eq!(files, listed, "every file in tests/configs/bad is checked");

    for &(file, line, pool, words) in BAD {
        let path = dir.join(file);
        let errors = match Config::load(&path) {
            Ok(_) => panic!("{file} was accepted"),
            Err(e) => e,
        };
        let first = &errors.0[0];
        let shown = errors.to_string();
        assert_eq!(first.file, path, "{file}");
        assert!(shown.starts_with(&path.display().to_string()), "{shown}");
        assert!(first.message.contains(words), "{file}: {shown}");
        if line > 0 {
            assert_eq!(first.line, line, "{file}: {shown}");
            assert!(shown.contains(&format!(":{line}: ")), "{shown}");
        } else {
            assert!(
                first.line > 0,
                "{file}: syntax errors carry a line: {shown}"
            );
        }
        if !pool.is_empty() {
            assert_eq!(first.pool.as_deref(), Some(pool), "{file}");
            assert!(shown.contains(&format!("pool '{pool}': ")), "{shown}");
        }
    }
}
