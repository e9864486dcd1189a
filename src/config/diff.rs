//! What a reload changes, in words an operator reads in the log and in the
//! admin port's reply: pools added and removed, servers added, removed and
//! re-weighted, pool keys and process settings changed (by name).

use super::{Config, PoolConfig};

/// Compare two pools' keys (everything but the name, line and servers).
macro_rules! changed_keys {
    ($a:expr, $b:expr, $( $key:literal => $field:ident ),* $(,)?) => {{
        let mut keys: Vec<&'static str> = Vec::new();
        $( if $a.$field != $b.$field { keys.push($key); } )*
        keys
    }};
}

fn pool_keys(a: &PoolConfig, b: &PoolConfig) -> Vec<&'static str> {
    changed_keys!(a, b,
        "listen" => listen,
        "hash" => hash,
        "hash_tag" => hash_tag,
        "distribution" => distribution,
        "timeout" => timeout_ms,
        "backlog" => backlog,
        "client_connections" => client_connections,
        "tcpkeepalive" => tcpkeepalive,
        "reuseport" => reuseport,
        "preconnect" => preconnect,
        "redis" => redis,
        "redis_auth" => redis_auth,
        "redis_db" => redis_db,
        "server_connections" => server_connections,
        "auto_eject_hosts" => auto_eject_hosts,
        "server_retry_timeout" => server_retry_timeout_ms,
        "server_failure_limit" => server_failure_limit,
        "max_value_size" => max_value_size,
        "allow_flush" => allow_flush,
        "allow_keys" => allow_keys,
        "replicas" => replicas,
        "replica_read" => replica_read_random,
        "max_keys" => max_keys,
        "client_output_limit" => client_output_limit,
        "client_max_inflight" => client_max_inflight,
        "client_idle_timeout" => client_idle_timeout_ms,
        "eject_mode" => eject_fail_fast,
        "server_health_check" => server_health_check,
        "slowlog_threshold" => slowlog_threshold_us,
        "redis_cluster" => redis_cluster,
        "cluster_read_replicas" => cluster_read_replicas,
        "migration" => migration,
        "migration_rate" => migration_rate,
        "keyless_server" => keyless_random,
        "tls/users" => security,
        "routes/shadow" => routing,
        "sentinels" => failover,
    )
}

/// One line per change from `old` to `new`; empty when they route, listen
/// and behave the same.
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for p in &new.pools {
        if !old.pools.iter().any(|o| o.name == p.name) {
            out.push(format!(
                "pool '{}' added ({} servers)",
                p.name,
                p.servers.len()
            ));
        }
    }
    for o in &old.pools {
        let Some(p) = new.pools.iter().find(|p| p.name == o.name) else {
            out.push(format!("pool '{}' removed", o.name));
            continue;
        };
        for s in &p.servers {
            match o.servers.iter().find(|x| x.addr == s.addr) {
                None => out.push(format!(
                    "pool '{}': server '{}' added",
                    p.name,
                    s.stats_name()
                )),
                Some(x) if x.weight != s.weight => out.push(format!(
                    "pool '{}': server '{}' weight {} -> {}",
                    p.name,
                    s.stats_name(),
                    x.weight,
                    s.weight
                )),
                Some(x) if x.stats_name() != s.stats_name() => out.push(format!(
                    "pool '{}': server '{}' renamed '{}'",
                    p.name,
                    x.stats_name(),
                    s.stats_name()
                )),
                Some(_) => {}
            }
        }
        for x in &o.servers {
            if !p.servers.iter().any(|s| s.addr == x.addr) {
                out.push(format!(
                    "pool '{}': server '{}' removed",
                    p.name,
                    x.stats_name()
                ));
            }
        }
        let keys = pool_keys(o, p);
        if !keys.is_empty() {
            out.push(format!("pool '{}': {} changed", p.name, keys.join(", ")));
        }
    }
    if old.process != new.process {
        out.push("process settings (_walnut) changed".to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Config {
        let dir =
            std::env::temp_dir().join(format!("walnut-diff-{}-{}", std::process::id(), text.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path).unwrap()
    }

    #[test]
    fn a_reload_is_told_in_words() {
        let old = load(
            "a:\n  listen: 127.0.0.1:30001\n  timeout: 100\n  servers:\n   - 127.0.0.1:30011:1\n   - 127.0.0.1:30012:1\n\
             gone:\n  listen: 127.0.0.1:30002\n  servers:\n   - 127.0.0.1:30013:1\n",
        );
        let new = load(
            "a:\n  listen: 127.0.0.1:30001\n  timeout: 200\n  hash: md5\n  servers:\n   - 127.0.0.1:30011:2\n   - 127.0.0.1:30014:1\n\
             b:\n  listen: 127.0.0.1:30003\n  servers:\n   - 127.0.0.1:30015:1\n",
        );
        let c = changes(&old, &new);
        assert_eq!(
            c,
            vec![
                "pool 'b' added (1 servers)",
                "pool 'a': server '127.0.0.1:30011' weight 1 -> 2",
                "pool 'a': server '127.0.0.1:30014' added",
                "pool 'a': server '127.0.0.1:30012' removed",
                "pool 'a': hash, timeout changed",
                "pool 'gone' removed",
            ]
        );
        assert!(changes(&new, &new).is_empty());
    }
}
