//! Requests the proxy answers itself: memcached `stats`, and the Redis
//! session commands (AUTH, SELECT, HELLO, CLIENT, COMMAND).

use super::conn::ConnTable;
use super::Worker;
use crate::proto::memcache::stats::{self, StatsGroup};
use crate::proto::{Op, Request};
use crate::stats::{PoolField, WorkerField};
use mio::Token;

impl Worker<'_> {
    /// Count a memcached request in `cmd_get` / `cmd_set`.
    pub(super) fn count_mc_request(&self, req: &Request) {
        if let Op::Mc(op) = req.op {
            let (gets, sets) = crate::proto::memcache::cmd_counts(op, req.keys.len());
            if gets > 0 {
                self.stats.worker_add(WorkerField::CmdGet, gets);
            }
            if sets > 0 {
                self.stats.worker_add(WorkerField::CmdSet, sets);
            }
        }
    }

    /// Count the values a memcached server's reply carries in `get_hits`.
    pub(super) fn count_mc_hits(&self, op: Op, reply: &[u8], values: u32) {
        if let Op::Mc(op) = op {
            let hits = crate::proto::memcache::hits(op, reply, values);
            if hits > 0 {
                self.stats.worker_add(WorkerField::GetHits, hits);
            }
        }
    }

    /// memcached `stats`: the fields memcached clients and dashboards read
    /// most, for the whole instance (summed over every worker from the
    /// shared-memory counters), then walnut's own.
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
    pub(super) fn local_stats(&self, pool: usize, req: &[u8]) -> Vec<u8> {
        match stats::group(req) {
            StatsGroup::General => stats::listing(self.stats_general(pool)),
            StatsGroup::Settings => stats::listing(self.stats_settings(pool)),
            StatsGroup::Reset => stats::RESET.to_vec(),
            StatsGroup::ServerOnly(group) => stats::server_only(group),
            StatsGroup::Unknown => stats::UNKNOWN.to_vec(),
        }
    }

    fn stats_general(&self, pool: usize) -> [(&'static str, String); 15] {
        let total = |f| self.stats.worker_total(f);
        let p = &self.pools[pool];
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
                self.stats.get_worker(WorkerField::Requests).to_string(),
            ),
            (
                "accept_eagain",
                self.stats.get_worker(WorkerField::AcceptEagain).to_string(),
            ),
            (
                "fragments",
                self.stats.get_pool(pool, PoolField::Fragments).to_string(),
            ),
        ]
    }

    fn stats_settings(&self, pool: usize) -> [(&'static str, String); 4] {
        let c = &self.pools[pool].cfg;
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

    /// Answer a Redis session command; returns the reply and whether to close.
    pub(super) fn redis_session(
        &mut self,
        token: Token,
        _req: &Request,
        bytes: &[u8],
    ) -> (Vec<u8>, bool) {
        let Some(c) = self.conns.client_mut(token.0) else {
            return (Vec::new(), true);
        };
        let pool = &self.pools[c.pool()];
        let side = crate::proto::redis::local::PoolSide {
            password: pool.cfg.redis_auth.as_deref().map(str::as_bytes),
            users: &pool.cfg.security.users,
            resp3: !pool.resp3_refused,
        };
        let mut out = Vec::new();
        crate::proto::redis::local::answer(bytes, c.session_mut(), &side, &mut out);
        (out, false)
    }
}
