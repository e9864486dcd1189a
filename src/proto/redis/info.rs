//! `INFO` through the proxy: one reply for a pool that lives on several
//! servers, each field either the proxy's own or the servers' summed, and
//! only fields that mean the same for the pool as for one server. The
//! servers are asked plain `INFO` (their default sections); whatever
//! section the client asked for, it gets these:
//!
//! - `# Proxy`: `proxy:walnut`, walnut's version, how many servers answered.
//! - `# Server`: `redis_version`, the lowest of the servers' (what a client
//!   may rely on everywhere), and `redis_mode:standalone`.
//! - `# Clients`: `connected_clients`, the pool's client connections to the
//!   proxy (all workers); `blocked_clients`, the servers' sum: a client
//!   blocked through walnut holds a server connection of its own, so this
//!   counts it once (a server's own direct clients count too).
//! - `# Stats`: the servers' `total_commands_processed`, `keyspace_hits`,
//!   `keyspace_misses`, `expired_keys` and `evicted_keys`, summed.
//! - `# Keyspace`: every server's `dbN:keys=..,expires=..,avg_ttl=..`
//!   summed per database (the average TTL weighted by keys with one).

use super::keyspace::bulk_text;
use super::reply;

/// Fields of the servers' `# Stats` summed into the pool's.
const SUMMED_STATS: [&str; 5] = [
    "total_commands_processed",
    "keyspace_hits",
    "keyspace_misses",
    "expired_keys",
    "evicted_keys",
];

/// The proxy's own figures for the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyFigures {
    /// Client connections to the pool, over all workers.
    pub connected_clients: u64,
}

/// `field:value` of one server's reply, with the section it is in.
fn fields(body: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    let mut section = "";
    body.lines().filter_map(move |line| {
        if let Some(name) = line.strip_prefix("# ") {
            section = name.trim();
            return None;
        }
        let (k, v) = line.split_once(':')?;
        Some((section, k, v.trim_end()))
    })
}

/// A version as numbers, for the lowest of several (`7.0.15` < `7.2.4`).
fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// `INFO` as each server of a pool is asked it (its default sections,
/// whatever the client asked: the merge picks its own).
pub const INFO: &[u8] = b"*1\r\n$4\r\nINFO\r\n";

/// The client's reply to `INFO` from every server's reply: the first
/// error if any server failed it, else the merge, else (a reply that is
/// not a bulk string) the first server's reply as it is.
pub fn merge_replies(replies: &[&[u8]], proxy: ProxyFigures, out: &mut Vec<u8>) {
    match replies.iter().find(|r| r.first() == Some(&b'-')) {
        Some(err) => out.extend_from_slice(err),
        None => match merge(replies, proxy) {
            Some(merged) => *out = merged,
            None => out.extend_from_slice(replies.first().copied().unwrap_or(b"$0\r\n\r\n")),
        },
    }
}

/// The one reply to `INFO` for a pool, from every server's reply; `None`
/// when a reply is not a bulk string (the caller passes the first on).
pub fn merge(replies: &[&[u8]], proxy: ProxyFigures) -> Option<Vec<u8>> {
    let mut version: Option<&str> = None;
    let mut blocked = 0u64;
    let mut stats = [0u64; SUMMED_STATS.len()];
    // (db, keys, expires, sum of avg_ttl × expires)
    let mut dbs: Vec<(&str, u64, u64, u128)> = Vec::new();
    for r in replies {
        let body = bulk_text(r)?;
        for (section, k, v) in fields(body) {
            let num = || v.parse::<u64>().unwrap_or(0);
            match (section, k) {
                ("Server", "redis_version")
                    if version.is_none_or(|old| version_key(v) < version_key(old)) =>
                {
                    version = Some(v);
                }
                ("Clients", "blocked_clients") => blocked = blocked.saturating_add(num()),
                ("Stats", _) => {
                    if let Some(i) = SUMMED_STATS.iter().position(|f| *f == k) {
                        stats[i] = stats[i].saturating_add(num());
                    }
                }
                ("Keyspace", db) if db.starts_with("db") => {
                    let field = |name: &str| -> u64 {
                        v.split(',')
                            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(0)
                    };
                    let (keys, expires, ttl) = (field("keys"), field("expires"), field("avg_ttl"));
                    let weighted = u128::from(ttl) * u128::from(expires);
                    match dbs.iter_mut().find(|d| d.0 == db) {
                        // Saturating: a server's reply is not trusted.
                        Some(d) => {
                            d.1 = d.1.saturating_add(keys);
                            d.2 = d.2.saturating_add(expires);
                            d.3 = d.3.saturating_add(weighted);
                        }
                        None => dbs.push((db, keys, expires, weighted)),
                    }
                }
                _ => {}
            }
        }
    }
    dbs.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(b.0)));
    let mut text = format!(
        "# Proxy\r\nproxy:walnut\r\nwalnut_version:{}\r\nservers:{}\r\n\r\n\
         # Server\r\nredis_version:{}\r\nredis_mode:standalone\r\n\r\n\
         # Clients\r\nconnected_clients:{}\r\nblocked_clients:{blocked}\r\n\r\n# Stats\r\n",
        env!("CARGO_PKG_VERSION"),
        replies.len(),
        version.unwrap_or("0.0.0"),
        proxy.connected_clients,
    );
    for (name, n) in SUMMED_STATS.iter().zip(stats) {
        text.push_str(&format!("{name}:{n}\r\n"));
    }
    text.push_str("\r\n# Keyspace\r\n");
    for (db, keys, expires, ttl_sum) in dbs {
        let avg = ttl_sum.checked_div(u128::from(expires)).unwrap_or(0);
        text.push_str(&format!(
            "{db}:keys={keys},expires={expires},avg_ttl={avg}\r\n"
        ));
    }
    let mut out = Vec::with_capacity(text.len() + 16);
    reply::bulk(text.as_bytes(), &mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_replies_errors_and_odd_ones() {
        let mut o = Vec::new();
        crate::proto::redis::reply::command(&[b"INFO"], &mut o);
        assert_eq!(o, INFO);
        let mut out = Vec::new();
        merge_replies(
            &[b"$0\r\n\r\n", b"-ERR down\r\n"],
            ProxyFigures::default(),
            &mut out,
        );
        assert_eq!(out, b"-ERR down\r\n");
        out.clear();
        merge_replies(&[b":1\r\n", b":2\r\n"], ProxyFigures::default(), &mut out);
        assert_eq!(out, b":1\r\n");
        out.clear();
        merge_replies(&[b"$0\r\n\r\n"], ProxyFigures::default(), &mut out);
        assert!(out.starts_with(b"$") && out.windows(7).any(|w| w == b"# Proxy"));
    }

    fn bulk(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        reply::bulk(s.as_bytes(), &mut out);
        out
    }

    #[test]
    fn sections_summed_and_the_proxys_own() {
        let a = bulk(
            "# Server\r\nredis_version:7.2.4\r\n\r\n# Clients\r\nconnected_clients:3\r\nblocked_clients:1\r\n\r\n\
             # Stats\r\nkeyspace_hits:10\r\nkeyspace_misses:2\r\ninstantaneous_ops_per_sec:9\r\n\r\n\
             # Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=100\r\n",
        );
        let b = bulk(
            "# Server\r\nredis_version:7.0.15\r\n\r\n# Clients\r\nblocked_clients:2\r\n\r\n\
             # Stats\r\nkeyspace_hits:5\r\n\r\n# Keyspace\r\ndb0:keys=5,expires=1,avg_ttl=300\r\ndb1:keys=1,expires=0,avg_ttl=0\r\n",
        );
        let c = bulk("# Keyspace\r\n");
        let out = merge(
            &[&a, &b, &c],
            ProxyFigures {
                connected_clients: 42,
            },
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        for want in [
            "servers:3\r\n",
            "redis_version:7.0.15\r\n",
            "connected_clients:42\r\n",
            "blocked_clients:3\r\n",
            "keyspace_hits:15\r\n",
            "keyspace_misses:2\r\n",
            "db0:keys=8,expires=2,avg_ttl=200\r\n",
            "db1:keys=1,expires=0,avg_ttl=0\r\n",
        ] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
        // A server's own figures that are not the pool's stay out.
        assert!(!text.contains("connected_clients:3"), "{text}");
        assert!(!text.contains("instantaneous_ops_per_sec"), "{text}");
        assert_eq!(merge(&[b"-ERR x\r\n"], ProxyFigures::default()), None);
    }
}
