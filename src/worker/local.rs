//! Requests the proxy answers itself: memcached `stats`, and the Redis
//! session commands (AUTH, SELECT, HELLO, CLIENT, COMMAND).

use super::conn::Conn;
use super::Worker;
use crate::proto::Request;
use crate::stats::{PoolField, WorkerField};
use mio::Token;
use std::fmt::Write as _;

impl Worker<'_> {
    /// memcached `stats`: walnut's own counters in memcached's STAT format.
    /// `stats` alone reports walnut's counters; `stats reset` is
    /// acknowledged; any other argument gets `ERROR`, as memcached answers
    /// a statistics group it does not know.
    pub(super) fn local_stats(&self, pool: usize, req: &[u8]) -> Vec<u8> {
        let line = req
            .strip_suffix(b"\r\n")
            .or_else(|| req.strip_suffix(b"\n"))
            .unwrap_or(req);
        let mut args = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).skip(1);
        match args.next() {
            None => {}
            Some(b"reset") => return b"RESET\r\n".to_vec(),
            Some(_) => return b"ERROR\r\n".to_vec(),
        }
        let mut s = String::new();
        let p = &self.pools[pool];
        let _ = write!(s, "STAT pid {}\r\n", std::process::id());
        let _ = write!(s, "STAT uptime {}\r\n", crate::util::uptime_secs());
        let _ = write!(s, "STAT time {}\r\n", crate::util::epoch_us() / 1_000_000);
        let _ = write!(s, "STAT version walnut-{}\r\n", env!("CARGO_PKG_VERSION"));
        let _ = write!(s, "STAT pool {}\r\n", p.cfg.name);
        let _ = write!(s, "STAT servers {}\r\n", p.servers.len());
        let _ = write!(s, "STAT curr_connections {}\r\n", p.clients);
        let _ = write!(
            s,
            "STAT total_connections {}\r\n",
            self.stats.get_worker(WorkerField::TotalConnections)
        );
        let _ = write!(
            s,
            "STAT cmd_total {}\r\n",
            self.stats.get_worker(WorkerField::Requests)
        );
        let _ = write!(
            s,
            "STAT accept_eagain {}\r\n",
            self.stats.get_worker(WorkerField::AcceptEagain)
        );
        let _ = write!(
            s,
            "STAT fragments {}\r\n",
            self.stats.get_pool(pool, PoolField::Fragments)
        );
        s.push_str("END\r\n");
        s.into_bytes()
    }

    /// Answer a Redis session command; returns the reply and whether to close.
    pub(super) fn redis_session(
        &mut self,
        token: Token,
        _req: &Request,
        bytes: &[u8],
    ) -> (Vec<u8>, bool) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return (Vec::new(), true);
        };
        let pool = &self.pools[c.pool];
        let side = crate::proto::redis::local::PoolSide {
            password: pool.cfg.redis_auth.as_deref().map(str::as_bytes),
            resp3: !pool.resp3_refused,
        };
        let mut out = Vec::new();
        crate::proto::redis::local::answer(bytes, &mut c.session, &side, &mut out);
        (out, false)
    }
}
