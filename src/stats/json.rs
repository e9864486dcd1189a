//! The stats document twemproxy serves on its stats port, with the same
//! layout and field names, summed over every worker.

use super::shm::Region;
use super::{PoolField, ServerField, WorkerField};
use crate::config::Config;
use crate::hash::{server_order, RingServer};
use std::fmt::Write as _;

/// The host name reported as "source".
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn esc(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// twemproxy's `total_connections` and `curr_connections`: every
/// connection object it ever made / holds now (client, server, and one
/// listening "proxy" connection per pool), summed over the workers; the
/// listeners count once per pool.
pub fn connections(config: &Config, region: &Region) -> (u64, u64) {
    let listeners = config.pools.len() as u64;
    let mut server_conns = 0;
    for (pi, pool) in config.pools.iter().enumerate() {
        for si in 0..pool.servers.len() {
            server_conns += region.server_sum(pi, si, ServerField::ServerConnections);
        }
    }
    let total = region.worker_sum(WorkerField::TotalConnections)
        + region.worker_sum(WorkerField::ServerConnects)
        + listeners;
    let curr = region.worker_sum(WorkerField::CurrConnections) + server_conns + listeners;
    (total, curr)
}

/// Render the document for `config` from the counters in `region`;
/// `pool_extra`: fields appended to a pool's object (walnut's own, such as
/// a running migration's progress), by pool name.
pub fn render(
    config: &Config,
    region: &Region,
    uptime: u64,
    source: &str,
    pool_extra: &[(String, String)],
) -> String {
    let mut s = String::with_capacity(4096);
    let now = crate::util::epoch_us() / 1_000_000;
    let (total, curr) = connections(config, region);
    // "service" and "version" stay twemproxy's ("nutcracker", "0.5.0"):
    // dashboards and checks match on them, and the document has the meaning
    // of 0.5.0's. walnut's own version goes beside them, a string like
    // "version", so tools that take object-valued keys as pools skip it.
    let _ = write!(
        s,
        "{{\"service\":\"nutcracker\", \"source\":{}, \"version\":\"0.5.0\", \"walnut_version\":\"{}\", \"uptime\":{}, \"timestamp\":{}, \"total_connections\":{}, \"curr_connections\":{}",
        esc(source),
        env!("CARGO_PKG_VERSION"),
        uptime,
        now,
        total,
        curr,
    );
    for (pi, pool) in config.pools.iter().enumerate() {
        let _ = write!(s, ", {}: {{", esc(&pool.name));
        for (i, f) in PoolField::ALL.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "\"{}\":{}", f.name(), region.pool_sum(pi, *f));
        }
        for (_, fields) in pool_extra.iter().filter(|(p, _)| *p == pool.name) {
            let _ = write!(s, ", {fields}");
        }
        let names: Vec<String> = pool.servers.iter().map(|sv| sv.ketama_name()).collect();
        let ring: Vec<RingServer> = names
            .iter()
            .zip(&pool.servers)
            .map(|(n, sv)| RingServer {
                name: n.as_bytes(),
                weight: sv.weight,
                live: true,
            })
            .collect();
        for si in server_order(&ring) {
            let _ = write!(s, ", {}: {{", esc(&pool.servers[si].stats_name()));
            for (i, f) in ServerField::ALL.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                let _ = write!(s, "\"{}\":{}", f.name(), region.server_sum(pi, si, *f));
            }
            s.push('}');
        }
        s.push('}');
    }
    s.push_str("}\n");
    s
}
