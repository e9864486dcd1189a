//! Stage 2 for one pool: a raw section's `key: value` entries →
//! [`PoolConfig`], every problem reported with its line.

use super::addr::{parse_server, ServerConfig};
use super::failover::{validate_failover, FAILOVER_KEYS};
use super::pool::{PoolConfig, LIST_KEYS, POOL_KEYS};
use super::pool_keys::{check_combinations, max_value_default, SCALAR_KEYS};
use super::routing::{validate_routing, ROUTING_KEYS};
use super::scalar::Report;
use super::security::{validate_security, SECURITY_KEYS};
use super::yaml::{RawEntry, RawSection, RawValue};
use std::collections::HashMap;

/// Keeps the first value of each key; reports later ones as duplicates.
fn first_of_each<'e>(r: &mut Report, entries: &'e [RawEntry]) -> HashMap<&'e str, &'e RawEntry> {
    let mut seen: HashMap<&str, &RawEntry> = HashMap::new();
    for e in entries {
        let key = e.key.text.as_str();
        if let Some(first) = seen.get(key) {
            r.error(
                e.key.line,
                format!(
                    "'{key}' is a duplicate (first set on line {})",
                    first.key.line
                ),
            );
            continue;
        }
        if !POOL_KEYS.contains(&key)
            && !SECURITY_KEYS.contains(&key)
            && !ROUTING_KEYS.contains(&key)
            && !FAILOVER_KEYS.contains(&key)
        {
            r.error(e.key.line, format!("unknown key '{key}'{}", suggest(key)));
            continue;
        }
        let is_seq = matches!(e.value, RawValue::Seq(_));
        let list = LIST_KEYS.contains(&key);
        if key == "users" && !is_seq {
            r.error(
                e.key.line,
                "'users' must be a list of \"- NAME PASSWORD [readonly] [~PREFIX*]...\" lines",
            );
        } else if key == "routes" && !is_seq {
            r.error(
                e.key.line,
                "'routes' must be a list of \"- PREFIX POOL\" lines",
            );
        } else if key == "warm_up" && !is_seq {
            r.error(
                e.key.line,
                "'warm_up' must be a list: the cold pool, then the warm one",
            );
        } else if key == "zones" && !is_seq {
            r.error(
                e.key.line,
                "'zones' must be a list of pool names, the local zone first",
            );
        } else if list && key != "servers" {
        } else if key == "servers" && !is_seq {
            r.error(
                e.key.line,
                "'servers' must be a list of \"- host:port:weight [name]\" lines",
            );
        } else if key != "servers" && is_seq {
            r.error(
                e.key.line,
                format!("'{key}' must be a single value, not a list"),
            );
        }
        seen.insert(key, e);
    }
    seen
}

fn suggest(key: &str) -> String {
    let lower = key.to_ascii_lowercase().replace('-', "_");
    POOL_KEYS
        .iter()
        .chain(SECURITY_KEYS.iter())
        .chain(ROUTING_KEYS.iter())
        .chain(FAILOVER_KEYS.iter())
        .find(|k| **k == lower || k.starts_with(&lower) && lower.len() >= 4)
        .map(|k| format!(" (did you mean '{k}'?)"))
        .unwrap_or_default()
}

/// Validates one pool section. Returns `None` when it has errors.
pub(crate) fn validate_pool(r: &mut Report, section: &RawSection) -> Option<PoolConfig> {
    let before = r.errors.len();
    let keys = first_of_each(r, &section.entries);
    let scalar = |k: &str| match keys.get(k).map(|e| &e.value) {
        Some(RawValue::Scalar(s)) => Some(s),
        _ => None,
    };
    if !keys.contains_key("listen") {
        r.error(section.name.line, "'listen' is missing");
    }
    let mut p = PoolConfig::new(&section.name.text, section.name.line);
    let mut refused = Vec::new();
    for k in SCALAR_KEYS {
        if let Some(v) = scalar(k.name) {
            if (k.set)(r, v, &mut p).is_none() {
                refused.push(k.name);
            }
        }
    }
    if scalar("max_value_size").is_none() {
        max_value_default(&mut p);
    }
    let routes = ["routes", "zones", "warm_up"]
        .iter()
        .any(|k| keys.contains_key(k));
    if !routes || keys.contains_key("servers") {
        // Else filled from the routed pools (routing::resolve).
        p.servers = validate_servers(r, section, keys.get("servers").copied());
    }
    check_combinations(r, &p, scalar, &refused);

    let entry = |k: &str| keys.get(k).map(|e| (&e.key, &e.value));
    // `None`: the key's value was refused (its dependants are not judged).
    let known = |k: &str, v: bool| Some(v).filter(|_| !refused.contains(&k));
    let redis = known("redis", p.redis);
    let redis_cluster = known("redis_cluster", p.redis_cluster);
    let routing = validate_routing(r, entry);
    let security = validate_security(r, entry, redis, p.redis_auth.is_some());
    let failover = validate_failover(r, entry, redis, redis_cluster, &p.servers);
    if r.errors.len() > before {
        return None;
    }
    p.routing = routing?;
    p.security = security?;
    p.failover = failover?;
    Some(p)
}

fn validate_servers(
    r: &mut Report,
    section: &RawSection,
    entry: Option<&RawEntry>,
) -> Vec<ServerConfig> {
    let items = match entry.map(|e| &e.value) {
        Some(RawValue::Seq(items)) => items,
        Some(RawValue::Scalar(_)) => return Vec::new(),
        None => {
            r.error(section.name.line, "'servers' is missing");
            return Vec::new();
        }
    };
    let mut servers = Vec::with_capacity(items.len());
    let mut names: HashMap<String, usize> = HashMap::new();
    for item in items {
        match parse_server(&item.text, item.line) {
            Ok((server, warning)) => {
                if let Some(w) = warning {
                    let e = r.make(item.line, w).at_server(&item.text);
                    r.warnings.push(e);
                }
                let name = server.ketama_name();
                if let Some(first) = names.get(&name) {
                    let e = r
                        .make(
                            item.line,
                            format!("has the same name '{name}' as the server on line {first}"),
                        )
                        .at_server(&item.text);
                    r.errors.push(e);
                } else {
                    names.insert(name, item.line);
                }
                servers.push(server);
            }
            Err(msg) => {
                let e = r.make(item.line, msg).at_server(&item.text);
                r.errors.push(e);
            }
        }
    }
    if items.is_empty() {
        let line = entry.map_or(section.name.line, |e| e.key.line);
        r.error(line, "'servers' is empty: a pool needs at least one server");
    }
    servers
}
