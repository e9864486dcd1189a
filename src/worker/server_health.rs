//! A server's health as a worker sees it: request timeouts, failures that
//! eject a server (`auto_eject_hosts`), and the probes that take an
//! ejected one back (`server_health_check`).

use super::conn::{Conn, ConnTable, Open, Waiter};
use super::fault::{Ending, ServerFault};
use super::pool::PoolRt;
use super::server_conn::TimerStep;
use super::server_rt::FAIL_LOG_EVERY;
use super::upkeep::{OwnAsk, Upkeep};
use crate::stats::shm::StatsSlot;
use crate::stats::{PoolField, ServerField};
use mio::Token;
use slab::Slab;
use std::time::{Duration, Instant};

/// A server connection's timer fired (`token`, armed for connection
/// `id`): armed again, or its oldest request timed out and the connection
/// fails, as `Server::timer_fired` says with its pool's `timeout`.
/// Nothing when the connection is gone, or the token is another's now.
pub(super) fn timer_fired(
    conns: &mut Slab<Conn>,
    pools: &[PoolRt],
    token: Token,
    id: u64,
    now: Instant,
) -> Option<Upkeep> {
    let s = conns.server_mut(token.0).filter(|s| s.id() == id)?;
    match s.timer_fired(pools[s.pool()].timeout(), now) {
        TimerStep::Idle => None,
        TimerStep::Arm(at) => Some(Upkeep::Arm { at, token, id }),
        TimerStep::TimedOut => Some(Upkeep::Close {
            token,
            fault: ServerFault::TimedOut,
        }),
    }
}

/// Once a second: the health probes of every pool of `pools`
/// (`PoolRt::probes`).
pub(super) fn probes(pools: &mut [PoolRt], now: Instant) -> Vec<Upkeep> {
    let pools = pools.iter_mut().enumerate();
    pools.flat_map(|(at, p)| p.probes(at, now)).collect()
}

/// A server's failures and recovery, kept by its pool: `at` is the pool's
/// index in the stats, `stats` where its gauges and counters go.
impl PoolRt {
    /// Health checks of this pool (its index `at`): a connection to every
    /// server whose retry time came and that waits for a probe
    /// (`probes_due`), asked something cheap (memcached `version`, Redis
    /// `PING`); its first reply takes it back.
    pub(super) fn probes(&mut self, at: usize, now: Instant) -> Vec<Upkeep> {
        let (op, bytes) = self.proto.probe();
        let ask = |server| {
            Upkeep::Ask(OwnAsk {
                pool: at,
                servers: vec![server],
                open: Open::Probe,
                op,
                bytes,
                waiter: Waiter::Internal,
            })
        };
        self.probes_due(now).into_iter().map(ask).collect()
    }

    /// Once a second: the ring rebuilt when an ejection's time is up
    /// (`next_rebuild`), and the servers to probe now, in order: those
    /// waiting for a health probe with none under way.
    pub(super) fn probes_due(&mut self, now: Instant) -> Vec<usize> {
        if self.next_rebuild.is_some_and(|t| now >= t) {
            self.rebuild(now);
        }
        self.servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.probing && s.conns[0].is_none())
            .map(|(i, _)| i)
            .collect()
    }

    /// Record a failure of server `idx` (`fault` is what clients are told
    /// while reconnection backs off); returns true if it was ejected.
    pub fn record_failure(&mut self, idx: usize, now: Instant, fault: &ServerFault) -> bool {
        let retry = Duration::from_millis(self.cfg.server_retry_timeout_ms.max(1));
        let s = &mut self.servers[idx];
        s.failures += 1;
        // Reconnect backoff: 10 ms doubling to at most 1 s (and at most the
        // retry timeout), with ±25% jitter so workers and servers that
        // failed together do not all reconnect in the same instant.
        s.backoff = if s.backoff.is_zero() {
            Duration::from_millis(10)
        } else {
            (s.backoff * 2).min(Duration::from_secs(1)).min(retry)
        };
        let jitter = jitter_factor();
        s.retry_at = Some(now + s.backoff.mul_f64(jitter));
        s.last_fault = Some(fault.clone());
        if s.probing {
            // A failed health probe: stay out for another retry period.
            crate::log_warn!(
                "pool '{}': server '{}' failed its health check ({fault}): ejected for another {} ms",
                self.cfg.name,
                s.name,
                retry.as_millis()
            );
            s.probing = false;
            s.ejected_until = Some(now + retry);
            self.next_rebuild = Some(
                self.next_rebuild
                    .map_or(now + retry, |t| t.min(now + retry)),
            );
            return false;
        }
        if !self.cfg.auto_eject_hosts || s.failures < self.cfg.server_failure_limit {
            return false;
        }
        s.failures = 0;
        s.ejected_until = Some(now + retry);
        if self.cfg.eject_fail_fast {
            // The server keeps its place on the ring: its keys fail fast
            // instead of moving to another server.
            let until = now + retry;
            self.next_rebuild = Some(self.next_rebuild.map_or(until, |t| t.min(until)));
        } else {
            self.rebuild(now);
        }
        true
    }

    /// Record a successful exchange with server `idx`; a probed server
    /// returns to the ring. True when the server was down (its last
    /// attempt had failed): the caller reports it back.
    #[must_use]
    pub fn record_success(&mut self, idx: usize, now: Instant) -> bool {
        let s = &mut self.servers[idx];
        let was_down = std::mem::take(&mut s.down);
        s.failures = 0;
        s.backoff = Duration::ZERO;
        s.retry_at = None;
        if s.probing {
            s.probing = false;
            s.ejected_until = None;
            crate::log_notice!(
                "pool '{}': server '{}' answered its health check: back in the ring",
                self.cfg.name,
                s.name
            );
            self.rebuild(now);
        }
        was_down
    }

    /// A closed connection to `server` (this pool's index `at` in the
    /// stats), with `waiting` requests failed, in the counters and the log; a failure
    /// of the server's own (not an idle connection it ended) counts towards
    /// its ejection, and in a cluster pool the slot map is asked again.
    pub(super) fn connection_ended(
        &mut self,
        at: usize,
        server: usize,
        fault: &ServerFault,
        waiting: usize,
        now: Instant,
        stats: &StatsSlot<'_>,
    ) {
        let how = fault.ending();
        let field = match how {
            Ending::Eof => ServerField::ServerEof,
            Ending::Error => ServerField::ServerErr,
            Ending::Timeout => ServerField::ServerTimedout,
        };
        stats.server_add(at, server, field, 1);
        if how == Ending::Eof && waiting == 0 {
            return;
        }
        let level = if fault.is_tls() {
            crate::log::level::WARN
        } else {
            crate::log::level::INFO
        };
        crate::log::write(
            level,
            format_args!(
                "pool '{}': server '{}' closed: {} ({} requests failed)",
                self.cfg.name, self.servers[server].name, fault, waiting
            ),
        );
        if fault.is_fault() {
            self.note_failure(at, server, now, fault, stats);
        }
        if self.cluster.is_some() {
            self.cluster_node_failed();
        }
    }

    /// A failure of the server's ([`ServerFault::is_fault`]): it backs
    /// off, and is ejected after `server_failure_limit` in a row. It is
    /// seen at the default log level (a dead backend must not be found
    /// only through its clients' errors): the first failure of a run at
    /// once with the server's address, then at most one line per
    /// [`FAIL_LOG_EVERY`] with how many failed since; the `server_down`
    /// gauge says it is down until it answers.
    pub(super) fn note_failure(
        &mut self,
        at: usize,
        server: usize,
        now: Instant,
        fault: &ServerFault,
        stats: &StatsSlot<'_>,
    ) {
        let s = &mut self.servers[server];
        if !s.down {
            s.down = true;
            stats.server_set(at, server, ServerField::ServerDown, 1);
        }
        s.fail_log.0 += 1;
        if s.fail_log.1.is_none_or(|t| now >= t + FAIL_LOG_EVERY) {
            let n = std::mem::take(&mut s.fail_log.0);
            s.fail_log.1 = Some(now);
            crate::log_warn!(
                "pool '{}': server '{}' at {}: {}{}{}",
                self.cfg.name,
                s.name,
                s.address(),
                if matches!(fault, ServerFault::Connect(_)) {
                    "cannot connect: "
                } else {
                    ""
                },
                fault.detail(),
                if n > 1 {
                    format!(" ({n} failures in the last {} s)", FAIL_LOG_EVERY.as_secs())
                } else {
                    String::new()
                }
            );
        }
        if !self.record_failure(server, now, fault) {
            return;
        }
        stats.pool_add(at, PoolField::ServerEjects, 1);
        stats.server_set(
            at,
            server,
            ServerField::ServerEjectedAt,
            crate::util::epoch_us(),
        );
        crate::log_warn!(
            "pool '{}': server '{}' ejected for {} ms after {} failures in a row ({}){}",
            self.cfg.name,
            self.servers[server].name,
            self.cfg.server_retry_timeout_ms,
            self.cfg.server_failure_limit,
            fault,
            if self.cfg.eject_fail_fast {
                "; its keys fail fast meanwhile"
            } else {
                "; its keys go to the other servers meanwhile"
            }
        );
    }

    /// A server that was down answered: said once, gauge cleared.
    pub(super) fn server_back(&mut self, at: usize, server: usize, stats: &StatsSlot<'_>) {
        stats.server_set(at, server, ServerField::ServerDown, 0);
        let s = &mut self.servers[server];
        s.fail_log = (0, None);
        crate::log_notice!(
            "pool '{}': server '{}' at {} answers again",
            self.cfg.name,
            s.name,
            s.address()
        );
    }
}

/// A factor in [0.75, 1.25) from the clock's low bits (no shared RNG state).
fn jitter_factor() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let x = nanos.wrapping_mul(2_654_435_761) >> 16;
    0.75 + (x % 1000) as f64 / 2000.0
}

#[cfg(test)]
#[path = "server_health_tests.rs"]
mod tests;
