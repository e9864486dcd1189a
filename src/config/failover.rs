//! A pool's failover keys: the Redis Sentinels that say where each shard's
//! master and replicas are (`sentinels`, `sentinel_auth`), and which of
//! them serve reads (`read_from`).
//!
//! With `sentinels`, every server of the pool is written with the name its
//! sentinels monitor it by (`- 10.0.0.1:6379:1 shard1`): placement hashes
//! that name, as twemproxy does for a named server, so a failover moves no
//! key. The address written is where walnut starts; the sentinels'
//! answer replaces it.

use super::addr::ServerConfig;
use super::scalar::Report;
use super::yaml::{RawValue, Scalar};

/// The keys this file reads.
pub const FAILOVER_KEYS: [&str; 3] = ["sentinels", "sentinel_auth", "read_from"];

/// Where a sentinel pool's single-key reads go (`read_from`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// Every request to the master (the default).
    #[default]
    Master,
    /// Reads to a replica of the key's shard (by client), the master when
    /// it has none that is up or the replica cannot be reached.
    PreferReplica,
    /// Reads spread over the master and its replicas (by client).
    Any,
}

impl ReadFrom {
    /// The name as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            ReadFrom::Master => "master",
            ReadFrom::PreferReplica => "prefer-replica",
            ReadFrom::Any => "any",
        }
    }
}

/// Where a pool learns its shards' masters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failover {
    /// `sentinels:` `host:port` of each sentinel, tried in turn.
    pub sentinels: Vec<(String, u16)>,
    /// `sentinel_auth:` password of the sentinels (`requirepass` in
    /// sentinel.conf).
    pub sentinel_auth: Option<String>,
    /// `read_from:` where single-key reads go.
    pub read_from: ReadFrom,
}

impl Failover {
    /// Whether the pool follows sentinels.
    pub fn on(&self) -> bool {
        !self.sentinels.is_empty()
    }
}

/// Validate the failover keys of one pool. `get` finds a key's value;
/// `redis`/`cluster`: the pool's `redis` and `redis_cluster`.
pub(crate) fn validate_failover<'a>(
    r: &mut Report,
    get: impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
    redis: Option<bool>,
    cluster: Option<bool>,
    servers: &[ServerConfig],
) -> Option<Failover> {
    let before = r.errors.len();
    let mut out = Failover::default();
    if let Some((key, value)) = get("sentinels") {
        if redis != Some(true) {
            r.error(
                key.line,
                "'sentinels' is only valid for a redis pool (add 'redis: true')",
            );
        } else if cluster == Some(true) {
            r.error(
                key.line,
                "'sentinels' cannot be used with 'redis_cluster: true' (a cluster fails over by itself)",
            );
        }
        let items: &[Scalar] = match value {
            RawValue::Seq(items) => items,
            RawValue::Scalar(_) => {
                r.error(
                    key.line,
                    "'sentinels' must be a list of \"- host:port\" lines",
                );
                &[]
            }
        };
        for item in items {
            match parse_host_port(&item.text) {
                Some(hp) => out.sentinels.push(hp),
                None => r.error(
                    item.line,
                    format!("sentinel '{}' is not host:port", item.text),
                ),
            }
        }
        if items.is_empty() && matches!(value, RawValue::Seq(_)) {
            r.error(key.line, "'sentinels' lists no sentinel");
        }
        for s in servers {
            if s.name.is_none() {
                r.error(
                    s.line,
                    "a server of a pool with 'sentinels' needs a name: the master name its sentinels monitor (e.g. \"- 127.0.0.1:6379:1 shard1\")",
                );
            }
        }
    }
    if let Some((key, RawValue::Scalar(v))) = get("sentinel_auth") {
        if get("sentinels").is_none() {
            r.error(key.line, "'sentinel_auth' needs 'sentinels'");
        }
        out.sentinel_auth = Some(v.text.clone());
    }
    if let Some((key, RawValue::Scalar(v))) = get("read_from") {
        out.read_from = match v.text.as_str() {
            "master" => ReadFrom::Master,
            "prefer-replica" => ReadFrom::PreferReplica,
            "any" => ReadFrom::Any,
            other => {
                r.error(
                    v.line,
                    format!("'read_from' has invalid value '{other}': expected master, prefer-replica or any"),
                );
                ReadFrom::Master
            }
        };
        if get("sentinels").is_none() {
            r.error(
                key.line,
                "'read_from' needs 'sentinels' (they say where the replicas are)",
            );
        }
    }
    if r.errors.len() > before {
        return None;
    }
    Some(out)
}

/// `host:port`, split from the right (an IPv6 literal may be bracketed).
fn parse_host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.trim().rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_addresses() {
        assert_eq!(
            parse_host_port("127.0.0.1:26379"),
            Some(("127.0.0.1".into(), 26379))
        );
        assert_eq!(parse_host_port("[::1]:26379"), Some(("::1".into(), 26379)));
        assert_eq!(parse_host_port("::1:26379"), Some(("::1".into(), 26379)));
        assert_eq!(parse_host_port("host"), None);
        assert_eq!(parse_host_port(":1"), None);
        assert_eq!(parse_host_port("h:0"), None);
        assert_eq!(parse_host_port("h:x"), None);
    }
}
