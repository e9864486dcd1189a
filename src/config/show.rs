//! The running configuration written back as twemproxy YAML (admin
//! `config show`) and read one value at a time (`config get`). Both come
//! from one list of settings, so what `get` returns is what `show` prints,
//! and `show`'s text is a file `walnut -t` accepts.

use super::addr::ServerAddr;
use super::pool::PoolConfig;
use super::pool_keys::SCALAR_KEYS;
use super::scalar::yaml_scalar;
use super::{Config, PROCESS_SECTION};
use std::fmt::Write as _;

/// One setting: its section (a pool name or `_walnut`), key and value as
/// YAML text; `servers` has one value per server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Pool name, or `_walnut`.
    pub section: String,
    /// The configuration key.
    pub key: &'static str,
    /// The value(s), as written in YAML.
    pub values: Vec<String>,
}

/// What changes the file's values while walnut runs: the current log level
/// (TTIN/TTOU, `config set log_level`) and other `config set` values.
pub struct Runtime<'a> {
    /// The log level now.
    pub log_level: u8,
    /// `config set` parameters and values, in the order they were set.
    pub set: &'a [(String, String)],
}

impl Runtime<'_> {
    /// The value `config set` gave `key`, in the unit the file uses (a
    /// `50ms` threshold is `50000` µs, a `64k` limit `65536` bytes, `on`
    /// is `true`), as the workers parsed it.
    fn get(&self, key: &str) -> Option<String> {
        let (_, v) = self.set.iter().rev().find(|(k, _)| k == key)?;
        let v = v.as_str();
        let ms = || super::parse_millis(v).map(|n| n.to_string());
        match key {
            "slowlog_threshold" | "reply_hold" => super::parse_micros(v).map(|n| n.to_string()),
            "client_output_limit" => super::parse_size(v).map(|n| n.to_string()),
            "tcp_quickack" => match v {
                "true" | "on" | "1" => Some("true".into()),
                "false" | "off" | "0" => Some("false".into()),
                _ => None,
            },
            "client_idle_timeout" => ms(),
            k if k.ends_with(".timeout") => ms(),
            _ => Some(v.to_string()),
        }
    }
}

fn server_text(s: &super::addr::ServerConfig) -> String {
    let addr = match &s.addr {
        ServerAddr::Tcp { host, port } => format!("{host}:{port}"),
        ServerAddr::Unix { path } => path.display().to_string(),
    };
    match &s.name {
        Some(name) => format!("{addr}:{} {name}", s.weight),
        None => format!("{addr}:{}", s.weight),
    }
}

fn pool_settings(p: &PoolConfig, rt: &Runtime, out: &mut Vec<Setting>) {
    let mut put = |key: &'static str, value: String| {
        out.push(Setting {
            section: p.name.clone(),
            key,
            values: vec![value],
        })
    };
    for k in SCALAR_KEYS {
        let Some(v_file) = (k.show)(p) else { continue };
        // Values changed at run time (admin `config set`) are shown.
        let v = match k.name {
            "timeout" => rt.get(&format!("pool.{}.timeout", p.name)),
            "client_output_limit" | "client_max_inflight" | "client_idle_timeout" => rt.get(k.name),
            _ => None,
        };
        put(k.name, v.unwrap_or(v_file));
    }
    security_settings(p, out);
    routing_settings(p, out);
    if p.failover.on() {
        out.push(Setting {
            section: p.name.clone(),
            key: "sentinels",
            values: p
                .failover
                .sentinels
                .iter()
                .map(|(h, port)| {
                    if h.contains(':') {
                        format!("[{h}]:{port}")
                    } else {
                        format!("{h}:{port}")
                    }
                })
                .collect(),
        });
    }
    if !p.security.users.is_empty() {
        out.push(Setting {
            section: p.name.clone(),
            key: "users",
            values: p.security.users.iter().map(user_text).collect(),
        });
    }
}

/// The TLS, ACL and sentinel keys of a pool.
fn security_settings(p: &PoolConfig, out: &mut Vec<Setting>) {
    let mut put = |key: &'static str, value: String| {
        out.push(Setting {
            section: p.name.clone(),
            key,
            values: vec![value],
        })
    };
    let sec = &p.security;
    if let Some(t) = &sec.listen_tls {
        put("tls_cert", t.cert.clone());
        put("tls_key", t.key.clone());
        if let Some(ca) = &t.client_ca {
            put("tls_client_ca", ca.clone());
        }
        put("tls_handshake_timeout", t.handshake_timeout_ms.to_string());
    }
    if let Some(t) = &sec.server_tls {
        put("server_tls", "true".into());
        let optional = [
            ("server_tls_ca", &t.ca),
            ("server_tls_name", &t.name),
            ("server_tls_cert", &t.cert),
            ("server_tls_key", &t.key),
        ];
        for (key, v) in optional {
            if let Some(v) = v {
                put(key, v.clone());
            }
        }
        put(
            "server_tls_handshake_timeout",
            t.handshake_timeout_ms.to_string(),
        );
    }
    if let Some(u) = &sec.redis_auth_user {
        put("redis_auth_user", u.clone());
    }
    if let Some(pw) = &p.failover.sentinel_auth {
        put("sentinel_auth", pw.clone());
    }
    if p.failover.on() {
        put("read_from", p.failover.read_from.name().into());
    }
}

/// Where a pool's keys go: shadow, warm-up, zones, routes or servers.
fn routing_settings(p: &PoolConfig, out: &mut Vec<Setting>) {
    let mut put = |key: &'static str, value: String| {
        out.push(Setting {
            section: p.name.clone(),
            key,
            values: vec![value],
        })
    };
    if let Some(sh) = &p.routing.shadow {
        put("shadow", sh.pool.clone());
        put(
            "shadow_mode",
            if sh.writes_only { "writes" } else { "all" }.into(),
        );
        put("shadow_sample", sh.sample_pct.to_string());
    }
    if let Some(z) = p.routing.zones.as_ref().filter(|z| z.warm) {
        out.push(Setting {
            section: p.name.clone(),
            key: "warm_up",
            values: z.pools.clone(),
        });
    } else if let Some(z) = &p.routing.zones {
        put(
            "zone_writes",
            if z.sync_writes { "sync" } else { "async" }.into(),
        );
        put(
            "zone_failover",
            if z.failover_on_miss { "miss" } else { "error" }.into(),
        );
        out.push(Setting {
            section: p.name.clone(),
            key: "zones",
            values: z.pools.clone(),
        });
    } else if p.routing.is_route_pool() {
        // Its servers are the routed pools' (filled in when loaded).
        out.push(Setting {
            section: p.name.clone(),
            key: "routes",
            values: p
                .routing
                .routes
                .iter()
                .map(|r| {
                    let prefix = if r.prefix.is_empty() { "*" } else { &r.prefix };
                    let strip = if r.strip { " strip" } else { "" };
                    format!("{prefix} {}{strip}", r.pool)
                })
                .collect(),
        });
    } else {
        out.push(Setting {
            section: p.name.clone(),
            key: "servers",
            values: p.servers.iter().map(server_text).collect(),
        });
    }
}

/// A `users:` entry as written.
fn user_text(u: &super::AclUser) -> String {
    let mut t = format!("{} {}", u.name, u.password);
    if u.readonly {
        t.push_str(" readonly");
    }
    for prefix in &u.prefixes {
        t.push_str(&format!(" ~{prefix}*"));
    }
    t
}

/// Every setting of the running configuration, pools first (in file
/// order), then the `_walnut` section.
pub fn settings(cfg: &Config, rt: &Runtime) -> Vec<Setting> {
    let mut out = Vec::new();
    for p in &cfg.pools {
        pool_settings(p, rt, &mut out);
    }
    let p = &cfg.process;
    let mut put = |key: &'static str, value: String| {
        out.push(Setting {
            section: PROCESS_SECTION.into(),
            key,
            values: vec![value],
        })
    };
    put("workers", p.workers.to_string());
    put("listener", p.listener.to_string());
    put("cpu_affinity", p.cpu_affinity.to_string());
    put(
        "admin",
        p.admin
            .clone()
            .unwrap_or_else(|| super::DEFAULT_ADMIN.into()),
    );
    let quickack = rt
        .get("tcp_quickack")
        .unwrap_or_else(|| p.tcp_quickack.to_string());
    put("tcp_quickack", quickack);
    put(
        "accept_mutex_delay",
        format!("{}ms", p.accept_mutex_delay_ms),
    );
    put("graceful_timeout", format!("{}ms", p.graceful_timeout_ms));
    let slow = rt
        .get("slowlog_threshold")
        .unwrap_or_else(|| p.slowlog_threshold_us.to_string());
    put("slowlog_threshold", format!("{slow}us"));
    let hold = rt
        .get("reply_hold")
        .unwrap_or_else(|| p.reply_hold_us.to_string());
    put("reply_hold", format!("{hold}us"));
    put("max_connections", p.max_connections.to_string());
    put("buffer_budget", p.buffer_budget.to_string());
    put("log_level", rt.log_level.to_string());
    out
}

/// The running configuration as a YAML file `walnut -t` accepts.
pub fn to_yaml(cfg: &Config, rt: &Runtime) -> String {
    let mut s = String::from("# walnut's running configuration (admin `config show`)\n");
    for (k, v) in rt.set {
        let _ = writeln!(s, "# config set at run time: {k} = {v}");
    }
    let all = settings(cfg, rt);
    let mut section = "";
    for st in &all {
        if st.section != section {
            section = &st.section;
            let _ = writeln!(s, "\n{}:", yaml_scalar(&st.section));
        }
        if super::pool::LIST_KEYS.contains(&st.key) {
            let _ = writeln!(s, "  {}:", st.key);
            for v in &st.values {
                let _ = writeln!(s, "   - {}", yaml_scalar(v));
            }
        } else {
            let _ = writeln!(s, "  {}: {}", st.key, yaml_scalar(&st.values[0]));
        }
    }
    s
}

/// One value for `config get PARAM`: `KEY` of the `_walnut` section (or
/// `_walnut.KEY`), or `pool.NAME.KEY` / `NAME.KEY` of a pool; `servers`
/// gives one line per server.
pub fn get(cfg: &Config, rt: &Runtime, param: &str) -> Result<String, String> {
    let (section, key) = match param.rsplit_once('.') {
        Some((sec, key)) => (sec.strip_prefix("pool.").unwrap_or(sec), key),
        None => (PROCESS_SECTION, param),
    };
    let all = settings(cfg, rt);
    if let Some(st) = all.iter().find(|s| s.section == section && s.key == key) {
        return Ok(st.values.join("\n"));
    }
    if section != PROCESS_SECTION && !cfg.pools.iter().any(|p| p.name == section) {
        return Err(format!("no pool named '{section}'"));
    }
    let keys: Vec<&str> = all
        .iter()
        .filter(|s| s.section == section)
        .map(|s| s.key)
        .collect();
    Err(format!(
        "unknown parameter '{param}': {} has {}",
        if section == PROCESS_SECTION {
            "_walnut".to_string()
        } else {
            format!("pool '{section}'")
        },
        keys.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
alpha:
  listen: 127.0.0.1:22121
  hash: murmur
  hash_tag: \"{}\"
  distribution: modula
  timeout: 400
  auto_eject_hosts: true
  replicas: 2
  slowlog_threshold: 2ms
  servers:
   - 127.0.0.1:11212:1 cache-a
   - 127.0.0.1:11213:2
   - /tmp/mc.sock:1
beta:
  listen: /tmp/walnut-beta.sock 0660
  redis: true
  redis_auth: \"p@ss \\\"word\\\"\"
  redis_db: 3
  eject_mode: fail_fast
  redis_auth_user: walnut
  users:
   - \"app pw ~app:* ~shared:*\"
   - \"dash pw2 readonly\"
  servers:
   - 127.0.0.1:6380:1
gamma:
  listen: 127.0.0.1:22124
  redis: true
  sentinels:
   - 127.0.0.1:26379
   - \"[::1]:26380\"
  sentinel_auth: sp
  read_from: prefer-replica
  servers:
   - 127.0.0.1:6390:1 shard1
   - 127.0.0.1:6391:1 shard2
_walnut:
  workers: 3
  listener: accept_mutex
  cpu_affinity: 0,2-3
  admin: off
  graceful_timeout: 5s
  slowlog_threshold: 10ms
";

    fn load(text: &str, name: &str) -> Config {
        let dir = std::env::temp_dir().join(format!("walnut-show-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yml");
        std::fs::write(&path, text).unwrap();
        let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        std::fs::remove_dir_all(&dir).unwrap();
        cfg
    }

    #[test]
    fn yaml_round_trips() {
        let cfg = load(FILE, "a");
        let rt = Runtime {
            log_level: 5,
            set: &[],
        };
        let yaml = to_yaml(&cfg, &rt);
        let again = load(&yaml, "b");
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
        let mut a = cfg.clone();
        let mut b = again.clone();
        // Lines differ by construction; everything else must not.
        for c in [&mut a, &mut b] {
            for p in &mut c.pools {
                p.line = 0;
                p.servers.iter_mut().for_each(|s| s.line = 0);
            }
            c.warnings.clear();
        }
        assert_eq!(a.pools, b.pools, "{yaml}");
        assert_eq!(b.process.log_level, Some(5));
        b.process.log_level = a.process.log_level;
        assert_eq!(a.process, b.process, "{yaml}");
        assert_eq!(to_yaml(&again, &rt), yaml);
        assert!(!yaml.contains("Tcp {") && !yaml.contains("N(") && !yaml.contains("Fnv1a"));
    }

    #[test]
    fn get_one_value() {
        let cfg = load(FILE, "c");
        let set = [
            ("pool.alpha.timeout".to_string(), "90".to_string()),
            ("slowlog_threshold".to_string(), "2ms".to_string()),
            ("client_output_limit".to_string(), "64k".to_string()),
        ];
        let rt = Runtime {
            log_level: 7,
            set: &set,
        };
        assert_eq!(get(&cfg, &rt, "pool.alpha.hash").unwrap(), "murmur");
        assert_eq!(get(&cfg, &rt, "alpha.distribution").unwrap(), "modula");
        assert_eq!(get(&cfg, &rt, "pool.alpha.timeout").unwrap(), "90");
        assert_eq!(
            get(&cfg, &rt, "beta.listen").unwrap(),
            "/tmp/walnut-beta.sock 0660"
        );
        assert_eq!(
            get(&cfg, &rt, "alpha.servers").unwrap(),
            "127.0.0.1:11212:1 cache-a\n127.0.0.1:11213:2\n/tmp/mc.sock:1"
        );
        assert_eq!(get(&cfg, &rt, "workers").unwrap(), "3");
        assert_eq!(get(&cfg, &rt, "_walnut.listener").unwrap(), "accept_mutex");
        assert_eq!(get(&cfg, &rt, "cpu_affinity").unwrap(), "0,2,3");
        assert_eq!(get(&cfg, &rt, "log_level").unwrap(), "7");
        assert_eq!(get(&cfg, &rt, "slowlog_threshold").unwrap(), "2000us");
        assert_eq!(
            get(&cfg, &rt, "alpha.client_output_limit").unwrap(),
            "65536"
        );
        assert!(get(&cfg, &rt, "pool.nope.hash")
            .unwrap_err()
            .contains("no pool named 'nope'"));
        let e = get(&cfg, &rt, "alpha.colour").unwrap_err();
        assert!(e.contains("pool 'alpha' has listen, hash"), "{e}");
        // A run-time value shows in the YAML too, and still loads.
        let yaml = to_yaml(&cfg, &rt);
        assert!(yaml.contains("# config set at run time: pool.alpha.timeout = 90"));
        assert_eq!(load(&yaml, "d").pools[0].timeout_ms, Some(90));
    }
}
