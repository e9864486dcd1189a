//! A pool's single-value keys as one table: each key's name, how its text
//! sets the pool and how the pool writes it back (`config show`). A pool
//! starts from twemproxy's defaults ([`PoolConfig::new`]); each key present
//! overwrites its field, and a bad value is reported at its line (the pool
//! is then refused). The rules between keys (`redis_auth` needs
//! `redis: true`, ...) are [`check_combinations`]. List keys (`servers`,
//! `users`, `routes`, ...) and the security, routing and failover keys
//! have validators of their own.

use super::addr::parse_listen;
use super::pool::{PoolConfig, DEFAULT_MC_MAX_VALUE_SIZE, DEFAULT_REDIS_MAX_VALUE_SIZE};
use super::scalar::{parse_bool, parse_micros, parse_num, parse_size, Report};
use super::yaml::Scalar;
use crate::hash::{Distribution, HashKind};

/// How a key's text sets the pool; `None` when the value was refused
/// (already reported).
type Set = fn(&mut Report, &Scalar, &mut PoolConfig) -> Option<()>;
/// The key's value as `config show` writes it; `None`: not written.
type Show = fn(&PoolConfig) -> Option<String>;

/// One single-value pool key.
pub(super) struct PoolKey {
    pub name: &'static str,
    pub set: Set,
    pub show: Show,
}

const fn key(name: &'static str, set: Set, show: Show) -> PoolKey {
    PoolKey { name, set, show }
}

/// The single-value keys, in the order `config show` writes them.
pub(super) const SCALAR_KEYS: &[PoolKey] = &[
    key("listen", set_listen, |p| {
        Some(super::addr::listen_text(&p.listen))
    }),
    key("hash", set_hash, |p| Some(p.hash.to_string())),
    key("hash_tag", set_hash_tag, |p| {
        p.hash_tag.map(|t| String::from_utf8_lossy(&t).into_owned())
    }),
    key("distribution", set_distribution, |p| {
        Some(p.distribution.to_string())
    }),
    key(
        "timeout",
        |r, v, p| {
            p.timeout_ms = Some(num(r, "timeout", v)?)
                .filter(|t| *t > 0)
                .map(u64::from);
            Some(())
        },
        |p| Some(p.timeout_ms.unwrap_or(0).to_string()),
    ),
    key(
        "backlog",
        |r, v, p| put(&mut p.backlog, num(r, "backlog", v)),
        |p| Some(p.backlog.to_string()),
    ),
    // Written only when set: 0 is the default and the key draws a warning.
    key(
        "client_connections",
        |r, v, p| {
            p.client_connections = num(r, "client_connections", v)?;
            r.warn(
                v.line,
                "'client_connections' is enforced by walnut; twemproxy 0.5 ignored it",
            );
            Some(())
        },
        |p| Some(p.client_connections.to_string()).filter(|_| p.client_connections != 0),
    ),
    key(
        "tcpkeepalive",
        |r, v, p| put(&mut p.tcpkeepalive, flag(r, "tcpkeepalive", v)),
        |p| Some(p.tcpkeepalive.to_string()),
    ),
    key(
        "reuseport",
        |r, v, p| put(&mut p.reuseport, flag(r, "reuseport", v)),
        |p| Some(p.reuseport.to_string()),
    ),
    key(
        "preconnect",
        |r, v, p| put(&mut p.preconnect, flag(r, "preconnect", v)),
        |p| Some(p.preconnect.to_string()),
    ),
    key(
        "redis",
        |r, v, p| put(&mut p.redis, flag(r, "redis", v)),
        |p| Some(p.redis.to_string()),
    ),
    key(
        "redis_auth",
        |_, v, p| {
            p.redis_auth = Some(v.text.clone());
            Some(())
        },
        |p| p.redis_auth.clone().filter(|_| p.redis),
    ),
    key(
        "redis_db",
        |r, v, p| put(&mut p.redis_db, num(r, "redis_db", v)),
        |p| Some(p.redis_db.to_string()).filter(|_| p.redis),
    ),
    key(
        "server_connections",
        |r, v, p| {
            p.server_connections = num(r, "server_connections", v)?;
            if p.server_connections == 0 {
                r.error(v.line, "'server_connections' cannot be 0");
            }
            Some(())
        },
        |p| Some(p.server_connections.to_string()),
    ),
    key(
        "auto_eject_hosts",
        |r, v, p| put(&mut p.auto_eject_hosts, flag(r, "auto_eject_hosts", v)),
        |p| Some(p.auto_eject_hosts.to_string()),
    ),
    key(
        "server_retry_timeout",
        |r, v, p| {
            put(
                &mut p.server_retry_timeout_ms,
                num(r, "server_retry_timeout", v).map(Into::into),
            )
        },
        |p| Some(p.server_retry_timeout_ms.to_string()),
    ),
    key(
        "server_failure_limit",
        |r, v, p| {
            put(
                &mut p.server_failure_limit,
                num(r, "server_failure_limit", v),
            )
        },
        |p| Some(p.server_failure_limit.to_string()),
    ),
    key(
        "max_value_size",
        |r, v, p| {
            let n = parse_size(&v.text).filter(|n| *n > 0);
            if n.is_none() {
                let want = "bytes > 0, optionally with k, m or g";
                r.error(v.line, invalid("max_value_size", v, want));
            }
            put(&mut p.max_value_size, n)
        },
        |p| Some(p.max_value_size.to_string()),
    ),
    key(
        "replicas",
        |r, v, p| {
            p.replicas = num(r, "replicas", v)?;
            if p.replicas == 0 {
                r.error(v.line, "'replicas' must be at least 1");
            }
            Some(())
        },
        |p| Some(p.replicas.to_string()).filter(|_| !p.redis),
    ),
    key(
        "replica_read",
        |r, v, p| {
            put(
                &mut p.replica_read_random,
                pick(r, "replica_read", v, ["first", "random"]),
            )
        },
        |p| Some(["first", "random"][p.replica_read_random as usize].into()),
    ),
    key(
        "max_keys",
        |r, v, p| {
            put(
                &mut p.max_keys,
                num(r, "max_keys", v).map(|n| n.max(1) as usize),
            )
        },
        |p| Some(p.max_keys.to_string()),
    ),
    key(
        "client_output_limit",
        |r, v, p| {
            put(
                &mut p.client_output_limit,
                size(r, "client_output_limit", v, "bytes"),
            )
        },
        |p| Some(p.client_output_limit.to_string()),
    ),
    key(
        "client_max_inflight",
        |r, v, p| {
            put(
                &mut p.client_max_inflight,
                num(r, "client_max_inflight", v).map(|n| n.max(1) as usize),
            )
        },
        |p| Some(p.client_max_inflight.to_string()),
    ),
    key(
        "client_idle_timeout",
        |r, v, p| {
            put(
                &mut p.client_idle_timeout_ms,
                num(r, "client_idle_timeout", v).map(Into::into),
            )
        },
        |p| Some(p.client_idle_timeout_ms.to_string()),
    ),
    key(
        "eject_mode",
        |r, v, p| {
            put(
                &mut p.eject_fail_fast,
                pick(r, "eject_mode", v, ["rehash", "fail_fast"]),
            )
        },
        |p| Some(["rehash", "fail_fast"][p.eject_fail_fast as usize].into()),
    ),
    key(
        "server_health_check",
        |r, v, p| {
            put(
                &mut p.server_health_check,
                flag(r, "server_health_check", v),
            )
        },
        |p| Some(p.server_health_check.to_string()),
    ),
    key(
        "slowlog_threshold",
        |r, v, p| {
            let us = parse_micros(&v.text);
            if us.is_none() {
                let want = "microseconds, e.g. 10000, 10ms or 0";
                r.error(v.line, invalid("slowlog_threshold", v, want));
            }
            put(&mut p.slowlog_threshold_us, us.map(Some))
        },
        |p| p.slowlog_threshold_us.map(|us| format!("{us}us")),
    ),
    key(
        "allow_flush",
        |r, v, p| put(&mut p.allow_flush, flag(r, "allow_flush", v)),
        |p| Some(p.allow_flush.to_string()),
    ),
    key(
        "allow_keys",
        |r, v, p| put(&mut p.allow_keys, flag(r, "allow_keys", v)),
        |p| Some(p.allow_keys.to_string()),
    ),
    key(
        "migration",
        |r, v, p| put(&mut p.migration, flag(r, "migration", v)),
        |p| Some("true".into()).filter(|_| p.migration),
    ),
    key(
        "migration_rate",
        |r, v, p| {
            put(
                &mut p.migration_rate,
                num(r, "migration_rate", v).map(|n| n.max(1)),
            )
        },
        |p| Some(p.migration_rate.to_string()).filter(|_| p.migration),
    ),
    key(
        "keyless_server",
        |r, v, p| {
            put(
                &mut p.keyless_random,
                pick(r, "keyless_server", v, ["first", "random"]),
            )
        },
        |p| Some(["first", "random"][p.keyless_random as usize].to_string()).filter(|_| p.redis),
    ),
    key(
        "redis_cluster",
        |r, v, p| put(&mut p.redis_cluster, flag(r, "redis_cluster", v)),
        |p| Some(p.redis_cluster.to_string()).filter(|_| p.redis),
    ),
    key(
        "cluster_read_replicas",
        |r, v, p| {
            put(
                &mut p.cluster_read_replicas,
                flag(r, "cluster_read_replicas", v),
            )
        },
        |p| Some(p.cluster_read_replicas.to_string()).filter(|_| p.redis_cluster),
    ),
];

/// Set `field` to a value read well.
fn put<T>(field: &mut T, value: Option<T>) -> Option<()> {
    *field = value?;
    Some(())
}

fn invalid(key: &str, v: &Scalar, want: &str) -> String {
    format!("'{key}' has invalid value '{}': expected {want}", v.text)
}

fn num(r: &mut Report, key: &str, v: &Scalar) -> Option<u32> {
    parse_num(r, key, v)
}

fn flag(r: &mut Report, key: &str, v: &Scalar) -> Option<bool> {
    parse_bool(r, key, v)
}

/// A byte size with an optional k, m or g suffix.
fn size(r: &mut Report, key: &str, v: &Scalar, want: &str) -> Option<usize> {
    let n = parse_size(&v.text);
    if n.is_none() {
        let want = format!("{want}, optionally with k, m or g");
        r.error(v.line, invalid(key, v, &want));
    }
    n
}

/// One of two words: `false` for the first (the default), `true` for the
/// second.
fn pick(r: &mut Report, key: &str, v: &Scalar, words: [&str; 2]) -> Option<bool> {
    match words.iter().position(|w| *w == v.text) {
        Some(i) => Some(i == 1),
        None => {
            let want = format!("{} or {}", words[0], words[1]);
            r.error(v.line, invalid(key, v, &want));
            None
        }
    }
}

fn set_listen(r: &mut Report, v: &Scalar, p: &mut PoolConfig) -> Option<()> {
    match parse_listen(&v.text) {
        Ok((addr, warning)) => {
            if let Some(w) = warning {
                r.warn(v.line, w);
            }
            if r.resolve && !super::addr::listen_resolves(&addr) {
                let msg = format!("'listen' address '{}' does not resolve", v.text);
                r.error(v.line, msg);
            }
            p.listen = addr;
            Some(())
        }
        Err(msg) => {
            r.error(v.line, msg);
            None
        }
    }
}

fn set_hash(r: &mut Report, v: &Scalar, p: &mut PoolConfig) -> Option<()> {
    let Some(h) = HashKind::from_name(&v.text) else {
        let names: Vec<_> = HashKind::ALL.iter().map(|h| h.name()).collect();
        let want = format!("one of {}", names.join(", "));
        r.error(v.line, invalid("hash", v, &want));
        return None;
    };
    p.hash = h;
    Some(())
}

fn set_distribution(r: &mut Report, v: &Scalar, p: &mut PoolConfig) -> Option<()> {
    let Some(d) = Distribution::from_name(&v.text) else {
        r.error(
            v.line,
            invalid("distribution", v, "ketama, modula or random"),
        );
        return None;
    };
    p.distribution = d;
    Some(())
}

fn set_hash_tag(r: &mut Report, v: &Scalar, p: &mut PoolConfig) -> Option<()> {
    let [a, b] = v.text.as_bytes() else {
        let want = "exactly two characters, e.g. \"{}\"";
        r.error(v.line, invalid("hash_tag", v, want));
        return None;
    };
    p.hash_tag = Some([*a, *b]);
    Some(())
}

/// The rules between keys, once each key is read (`refused`: the keys
/// whose value was bad, whose rules are not checked on a guess).
pub(super) fn check_combinations<'a>(
    r: &mut Report,
    p: &PoolConfig,
    scalar: impl Fn(&str) -> Option<&'a Scalar>,
    refused: &[&str],
) {
    let read = |k: &str| !refused.contains(&k);
    let mut refuse = |k: &str, wrong: bool, msg: &str| {
        if let (true, Some(v)) = (wrong, scalar(k)) {
            r.error(v.line, msg.to_string());
        }
    };
    let not_redis = !p.redis && read("redis");
    let only_redis = |k: &str| format!("'{k}' is only valid for a redis pool (add 'redis: true')");
    refuse("redis_auth", not_redis, &only_redis("redis_auth"));
    refuse("keyless_server", not_redis, &only_redis("keyless_server"));
    refuse(
        "redis_cluster",
        p.redis_cluster && !p.redis,
        &only_redis("redis_cluster"),
    );
    refuse(
        "cluster_read_replicas",
        p.cluster_read_replicas && !p.redis_cluster,
        "'cluster_read_replicas' is only valid with 'redis_cluster: true'",
    );
    refuse(
        "redis_db",
        p.redis_cluster && p.redis_db != 0,
        "'redis_db' must be 0 with 'redis_cluster: true' (a cluster has only database 0)",
    );
    refuse(
        "replicas",
        p.redis && p.replicas > 1 && read("replicas"),
        "'replicas' is only supported for memcached pools",
    );
    let n = p.servers.len();
    refuse(
        "replicas",
        p.replicas as usize > n && n > 0,
        &format!(
            "'replicas' is {} but the pool has only {n} servers",
            p.replicas
        ),
    );
    refuse(
        "migration",
        p.migration && p.redis_cluster,
        "'migration' cannot be on for this pool: a Redis Cluster reshards itself",
    );
}

/// The default that depends on another key: the largest value, by
/// protocol, when `max_value_size` is not set.
pub(super) fn max_value_default(p: &mut PoolConfig) {
    p.max_value_size = if p.redis {
        DEFAULT_REDIS_MAX_VALUE_SIZE
    } else {
        DEFAULT_MC_MAX_VALUE_SIZE
    };
}

#[cfg(test)]
mod tests {
    use super::super::pool::{LIST_KEYS, POOL_KEYS};
    use super::SCALAR_KEYS;

    /// Every pool key is in the table or is a list, and the table has
    /// nothing else: a key cannot be accepted without being read.
    #[test]
    fn the_table_covers_the_pool_keys() {
        for k in POOL_KEYS {
            let listed = LIST_KEYS.contains(&k);
            let read = SCALAR_KEYS.iter().filter(|s| s.name == k).count();
            assert_eq!(read, usize::from(!listed), "{k}");
        }
        assert_eq!(SCALAR_KEYS.len() + 1, POOL_KEYS.len());
    }
}
