//! How a request's bytes go onto a server connection's queue: written
//! into its output by the caller (a closure: a request rebuilt, a
//! command of the proxy's own), or as they came from the client
//! ([`Through`]), written to the socket at once when nothing waits
//! before them. `Worker::enqueue` takes either; each is its own
//! compiled copy, so the choice costs nothing per request. And the
//! connection's timeout timer a queued request starts
//! (`Server::arm_once`).

use super::conn::{Server, Waiter};
use super::pool::PoolRt;
use super::server_conn::Queued;
use crate::proto::Op;
use crate::stats::slowlog::KeyPrefix;
use std::time::Instant;

/// Request bytes to queue on a server connection.
pub(super) trait RequestBytes {
    /// Queue them on `s` (as `Server::queue` says), with what waits for
    /// the reply.
    fn queue_on(
        self,
        s: &mut Server,
        waiter: Option<Waiter>,
        op: Op,
        now: Instant,
        key: KeyPrefix,
    ) -> Queued;
}

/// Written into the connection's output by the closure.
impl<F: FnOnce(&mut Vec<u8>)> RequestBytes for F {
    #[inline(always)]
    fn queue_on(
        self,
        s: &mut Server,
        waiter: Option<Waiter>,
        op: Op,
        now: Instant,
        key: KeyPrefix,
    ) -> Queued {
        s.queue(waiter, op, self, now, key)
    }
}

/// A request that goes as it came: what the socket takes is written at
/// once from these bytes when nothing waits before it, the rest copied
/// (`Server::queue_through`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Through<'a>(pub &'a [u8]);

impl RequestBytes for Through<'_> {
    #[inline(always)]
    fn queue_on(
        self,
        s: &mut Server,
        waiter: Option<Waiter>,
        op: Op,
        now: Instant,
        key: KeyPrefix,
    ) -> Queued {
        s.queue_through(waiter, op, self.0, now, key)
    }
}

/// A server connection's timeout timer as requests are queued on it.
impl Server {
    /// A request was queued at `now`; `waits`: a client waits for its
    /// reply. The deadline to arm the connection's timer for when that
    /// starts the pool's `timeout` (none: no timeout, nothing waits, or
    /// the timer is armed already; it is re-armed from the oldest request
    /// as it fires, `Server::timer_fired`). `pools`: the worker's, the
    /// connection's among them.
    #[inline(always)]
    pub(super) fn arm_once(
        &mut self,
        waits: bool,
        pools: &[PoolRt],
        now: Instant,
    ) -> Option<Instant> {
        if self.timer_armed() || !waits {
            return None;
        }
        let t = pools[self.pool()].timeout()?;
        self.set_timer_armed(true);
        Some(now + t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::proto::redis::{Cmd, RedisOp};

    fn ping() -> Op {
        let cmd = Cmd::lookup(b"PING").expect("PING");
        Op::Redis(RedisOp {
            cmd,
            class: cmd.class(),
        })
    }

    const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

    #[test]
    fn a_connections_timer_is_armed_by_the_first_request_waited_for() {
        let yaml =
            "a:\n  listen: 127.0.0.1:22121\n  timeout: 400\n  servers:\n   - 127.0.0.1:11211:1\n\
                    b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let pools: Vec<PoolRt> = c.pools.iter().map(|p| PoolRt::new(p, &[])).collect();
        let server = |pool: usize| {
            let (sock, peer) = mio::net::UnixStream::pair().expect("socket pair");
            let s = Server::new(
                crate::net::Stream::Unix(sock),
                1,
                (pool, 0, 0),
                Instant::now(),
                true,
            );
            (s, peer)
        };
        let now = Instant::now();
        let (mut s, _peer) = server(0);
        assert_eq!(s.arm_once(false, &pools, now), None, "nothing waits");
        assert!(!s.timer_armed());
        let at = now + std::time::Duration::from_millis(400);
        assert_eq!(s.arm_once(true, &pools, now), Some(at));
        assert!(s.timer_armed());
        assert_eq!(s.arm_once(true, &pools, now), None, "armed already");
        // A pool without a timeout: never armed.
        let (mut s, _peer) = server(1);
        assert_eq!(s.arm_once(true, &pools, now), None);
        assert!(!s.timer_armed());
    }

    #[test]
    fn bytes_written_by_the_caller_or_as_they_came_queue_alike() {
        let now = Instant::now();
        let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
        // Still connecting: nothing is written at once.
        let mut s = Server::new(Stream::Unix(sock), 7, (0, 0, 0), now, false);
        let key = KeyPrefix::default();
        let write = |o: &mut Vec<u8>| o.extend_from_slice(PING);
        let q = write.queue_on(&mut s, Some(Waiter::Internal), ping(), now, key);
        assert!(q.first_out && q.first_uncounted, "the first of the pass");
        let q = Through(PING).queue_on(&mut s, Some(Waiter::Internal), ping(), now, key);
        assert!(!q.first_out && !q.first_uncounted);
        assert_eq!(s.wbuf().bytes(), [PING, PING].concat());
        assert_eq!(s.inflight().len(), 2, "each waits for its reply");
        let q = Through(PING).queue_on(&mut s, None, ping(), now, key);
        assert!(!q.first_out);
        assert_eq!(s.inflight().len(), 2, "nothing waits for this one");
    }
}
