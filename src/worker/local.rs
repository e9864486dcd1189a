//! Requests the proxy answers itself: memcached `stats` (from the
//! shared-memory counters and the pool's settings) and the counters it
//! reads that the data path adds to (`cmd_get`, `cmd_set`, `get_hits`),
//! and the Redis session commands (AUTH, SELECT, HELLO, CLIENT, COMMAND).
//! None is a `Worker` method: each takes what it reads.

use super::conn::{Conn, ConnTable};
use super::pool::PoolRt;
use crate::config::PoolConfig;
use crate::proto::memcache::stats::{self, StatsGroup};
use crate::proto::{Op, Request};
use crate::stats::shm::StatsSlot;
use crate::stats::{PoolField, WorkerField};
use mio::Token;
use slab::Slab;

/// The memcached counters the data path adds to.
impl StatsSlot<'_> {
    /// Count a memcached request in `cmd_get` / `cmd_set`.
    pub(super) fn count_mc_request(&self, req: &Request) {
        if let Op::Mc(op) = req.op {
            let (gets, sets) = crate::proto::memcache::cmd_counts(op, req.keys.len());
            if gets > 0 {
                self.worker_add(WorkerField::CmdGet, gets);
            }
            if sets > 0 {
                self.worker_add(WorkerField::CmdSet, sets);
            }
        }
    }

    /// Count the values a memcached server's reply carries in `get_hits`.
    pub(super) fn count_mc_hits(&self, op: Op, reply: &[u8], values: u32) {
        if let Op::Mc(op) = op {
            let hits = crate::proto::memcache::hits(op, reply, values);
            if hits > 0 {
                self.worker_add(WorkerField::GetHits, hits);
            }
        }
    }
}

/// memcached `stats` for a client of pool `pool` (`p`): the fields
/// memcached clients and dashboards read most, for the whole instance
/// (summed over every worker from the shared-memory counters in `stats`),
/// then walnut's own.
///
/// - `stats` alone: `pid` (the worker's), `uptime`, `time`, `version`,
///   then summed over workers `curr_connections`, `total_connections`
///   (clients of every pool), `cmd_get`, `cmd_set`, `get_hits`,
///   `get_misses` (keys asked for minus keys found, so a key whose
///   server failed counts as a miss), then walnut's own fields, this
///   worker's (`cmd_total`, `accept_eagain`, `fragments`).
/// - `stats settings`: the proxy's settings in memcached's names.
/// - `stats reset`: acknowledged (`RESET`); walnut's counters keep
///   counting, as the twemproxy stats port's do.
/// - `stats slabs|items|sizes|conns|extstore|detail|cachedump`: they
///   describe one server's memory, which a proxy does not have:
///   `CLIENT_ERROR` naming the group, a complete reply either way.
/// - anything else: `ERROR`, as memcached answers a group it does not know.
pub(super) fn mc_stats(stats: &StatsSlot<'_>, pool: usize, p: &PoolRt, req: &[u8]) -> Vec<u8> {
    match stats::group(req) {
        StatsGroup::General => stats::listing(general(stats, pool, p)),
        StatsGroup::Settings => stats::listing(settings(&p.cfg)),
        StatsGroup::Reset => stats::RESET.to_vec(),
        StatsGroup::ServerOnly(group) => stats::server_only(group),
        StatsGroup::Unknown => stats::UNKNOWN.to_vec(),
    }
}

fn general(stats: &StatsSlot<'_>, pool: usize, p: &PoolRt) -> [(&'static str, String); 15] {
    let total = |f| stats.worker_total(f);
    // The pid of the process serving the connection (a worker), as in
    // memcached; tests and operators use it to tell workers apart.
    let pid = std::process::id();
    let (gets, hits) = (total(WorkerField::CmdGet), total(WorkerField::GetHits));
    [
        ("pid", pid.to_string()),
        ("uptime", crate::util::uptime_secs().to_string()),
        ("time", (crate::util::epoch_us() / 1_000_000).to_string()),
        ("version", crate::proto::memcache::VERSION.to_string()),
        (
            "curr_connections",
            total(WorkerField::CurrConnections).to_string(),
        ),
        (
            "total_connections",
            total(WorkerField::TotalConnections).to_string(),
        ),
        ("cmd_get", gets.to_string()),
        ("cmd_set", total(WorkerField::CmdSet).to_string()),
        ("get_hits", hits.to_string()),
        ("get_misses", gets.saturating_sub(hits).to_string()),
        ("pool", p.cfg.name.clone()),
        ("servers", p.servers.len().to_string()),
        // walnut's own fields: this worker's.
        (
            "cmd_total",
            stats.get_worker(WorkerField::Requests).to_string(),
        ),
        (
            "accept_eagain",
            stats.get_worker(WorkerField::AcceptEagain).to_string(),
        ),
        (
            "fragments",
            stats.get_pool(pool, PoolField::Fragments).to_string(),
        ),
    ]
}

fn settings(c: &PoolConfig) -> [(&'static str, String); 4] {
    [
        ("item_size_max", c.max_value_size.to_string()),
        ("maxconns", c.client_connections.to_string()),
        (
            "flush_enabled",
            if c.allow_flush { "yes" } else { "no" }.to_string(),
        ),
        ("tcp_backlog", c.backlog.to_string()),
    ]
}

/// Answer a Redis session command of client `token`; returns the reply
/// and whether to close (the client is gone).
pub(super) fn redis_session(
    conns: &mut Slab<Conn>,
    pools: &[PoolRt],
    token: Token,
    bytes: &[u8],
) -> (Vec<u8>, bool) {
    let Some(c) = conns.client_mut(token.0) else {
        return (Vec::new(), true);
    };
    let pool = &pools[c.pool()];
    let side = crate::proto::redis::local::PoolSide {
        password: pool.cfg.redis_auth.as_deref().map(str::as_bytes),
        users: &pool.cfg.security.users,
        resp3: !pool.resp3_refused,
    };
    let mut out = Vec::new();
    crate::proto::redis::local::answer(bytes, c.session_mut(), &side, &mut out);
    (out, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proto::{Limits, Parse, Protocol};
    use crate::stats::shm::{Layout, Region};
    use std::path::Path;

    fn pool() -> PoolRt {
        let yaml = "mc:\n  listen: 127.0.0.1:22997\n  allow_flush: true\n  servers:\n    - 127.0.0.1:11211:1 a\n    - 127.0.0.1:11212:1 b\n";
        let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    fn mc(b: &[u8]) -> Request {
        match Protocol::Memcache.parse_request(b, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    /// The value of `field` in a `stats` listing.
    fn field(listing: &[u8], field: &str) -> String {
        let text = String::from_utf8_lossy(listing);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {field} ")))
            .unwrap_or_else(|| panic!("{field} in {text}"))
            .to_string()
    }

    #[test]
    fn counts_summed_over_workers() {
        let r = Region::new(Layout::new(vec![2], Vec::new()), 2).unwrap();
        let (w0, w1) = (r.slot(0), r.slot(1));
        let get = mc(b"get a b c\r\n");
        w0.count_mc_request(&get);
        w1.count_mc_request(&mc(b"set k 0 0 1\r\nv\r\n"));
        w1.count_mc_hits(get.op, b"VALUE a 0 1\r\nv\r\nEND\r\n", 1);
        let p = pool();
        let out = mc_stats(&w0, 0, &p, b"stats\r\n");
        assert_eq!(field(&out, "cmd_get"), "3");
        assert_eq!(field(&out, "cmd_set"), "1");
        assert_eq!(field(&out, "get_hits"), "1");
        assert_eq!(field(&out, "get_misses"), "2");
        assert_eq!(field(&out, "pool"), "mc");
        assert_eq!(field(&out, "servers"), "2");
        assert_eq!(field(&out, "pid"), std::process::id().to_string());
        assert!(out.ends_with(b"END\r\n"));
    }

    #[test]
    fn settings_and_other_groups() {
        let r = Region::new(Layout::new(vec![2], Vec::new()), 1).unwrap();
        let p = pool();
        let out = mc_stats(&r.slot(0), 0, &p, b"stats settings\r\n");
        assert_eq!(field(&out, "flush_enabled"), "yes");
        assert_eq!(
            field(&out, "item_size_max"),
            p.cfg.max_value_size.to_string()
        );
        assert_eq!(
            mc_stats(&r.slot(0), 0, &p, b"stats reset\r\n"),
            stats::RESET
        );
        assert_eq!(
            mc_stats(&r.slot(0), 0, &p, b"stats nonsense\r\n"),
            stats::UNKNOWN
        );
        let slabs = mc_stats(&r.slot(0), 0, &p, b"stats slabs\r\n");
        assert!(slabs.starts_with(b"CLIENT_ERROR"), "{slabs:?}");
    }
}
