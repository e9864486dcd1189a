//! Which connections a sweep ends, asked of the connection table: clients
//! idle past their pool's `client_idle_timeout` or whose TLS handshake
//! takes too long (once a second), server connections whose TLS handshake
//! takes too long (once a second), and the clients a graceful stop closes
//! as soon as they are quiet. Each returns the tokens, or, for what a
//! second's sweep ends (`each_second`), `Close` values; a second's work
//! on the connections, those ends then the pools' health probes, is one
//! list of `Upkeep` steps (`second`) the worker carries out
//! (`Worker::upkeep`). What one connection's figures say is a pure function
//! ([`idle_verdict`], [`handshake_over`], [`quiet`]) with unit tests
//! without sockets.

use super::closes::Close;
use super::conn::Conn;
use super::fault::ServerFault;
use super::pool::PoolRt;
use super::upkeep::Upkeep;
use super::GRACEFUL_IDLE;
use mio::Token;
use slab::Slab;
use std::time::{Duration, Instant};

/// A TLS handshake's bound when the pool names none.
const HANDSHAKE_DEFAULT_MS: u64 = 10_000;

/// What a client's figures say to the idle sweep.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClientIdle {
    /// Its TLS handshake is not finished.
    pub handshaking: bool,
    /// A request in flight, held for its keys or the fleet, or a reply
    /// not yet written.
    pub busy: bool,
    /// When it connected.
    pub opened: Instant,
    /// When it last sent something (or was last busy).
    pub last_active: Instant,
}

/// What the idle sweep does with a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Swept {
    /// Nothing: within its bounds, or no idle bound.
    Keep,
    /// Busy: its idle time starts after that (touched now), so a reply
    /// arriving in this very pass is never lost to the sweep.
    Busy,
    /// Its TLS handshake took longer than the bound: closed.
    Handshake,
    /// Idle longer than the bound: closed.
    Idle,
}

/// What the idle sweep does with a client of these figures at `now`:
/// `handshake` bounds an unfinished TLS handshake, `idle` (if any) a
/// client with nothing to do.
pub(super) fn idle_verdict(
    c: ClientIdle,
    handshake: Duration,
    idle: Option<Duration>,
    now: Instant,
) -> Swept {
    if c.handshaking {
        return if now.duration_since(c.opened) > handshake {
            Swept::Handshake
        } else {
            Swept::Keep
        };
    }
    if c.busy {
        return Swept::Busy;
    }
    match idle {
        Some(limit) if now.duration_since(c.last_active) > limit => Swept::Idle,
        _ => Swept::Keep,
    }
}

/// Whether a TLS handshake begun at `opened` is over its bound of `ms`
/// at `now`.
pub(super) fn handshake_over(opened: Instant, ms: u64, now: Instant) -> bool {
    now.duration_since(opened) > Duration::from_millis(ms)
}

/// Whether a graceful stop closes a client now: nothing in flight or to
/// write, and quiet for [`GRACEFUL_IDLE`] since `last_active`.
pub(super) fn quiet(pending: bool, output: bool, last_active: Instant, now: Instant) -> bool {
    !pending && !output && now.duration_since(last_active) >= GRACEFUL_IDLE
}

/// The clients the idle sweep closes at `now`, in table order: an
/// unfinished TLS handshake past the pool's bound (logged here), or idle
/// past `client_idle_timeout` (`overridden` at run time first). A busy
/// client is touched instead.
pub(super) fn idle_clients(
    conns: &mut Slab<Conn>,
    pools: &[PoolRt],
    overridden: Option<Duration>,
    now: Instant,
) -> Vec<Token> {
    conns
        .iter_mut()
        .filter_map(|(k, c)| {
            let Conn::Client(c) = c else {
                return None;
            };
            let cfg = &pools[c.pool()].cfg;
            let handshaking = c.sock().is_handshaking();
            let ms = if handshaking {
                cfg.security
                    .listen_tls
                    .as_ref()
                    .map_or(HANDSHAKE_DEFAULT_MS, |t| t.handshake_timeout_ms)
            } else {
                0
            };
            let figures = ClientIdle {
                handshaking,
                busy: !handshaking
                    && (c.has_pending()
                        || c.has_output()
                        || c.stream().is_some()
                        || c.rstream_from().is_some()
                        || c.gate().is_some()),
                opened: c.opened(),
                last_active: c.last_active(),
            };
            let idle = cfg.client_idle_timeout_ms;
            let limit = overridden.or((idle > 0).then(|| Duration::from_millis(idle)));
            match idle_verdict(figures, Duration::from_millis(ms), limit, now) {
                Swept::Keep => None,
                Swept::Busy => {
                    c.touch(now);
                    None
                }
                Swept::Handshake => {
                    crate::log_warn!(
                        "client {} of pool '{}': TLS handshake not finished after {} ms; closing it",
                        crate::net::peer_of(std::os::fd::AsRawFd::as_raw_fd(c.sock())),
                        cfg.name,
                        ms
                    );
                    Some(Token(k))
                }
                Swept::Idle => Some(Token(k)),
            }
        })
        .collect()
}

/// The server connections whose TLS handshake has not finished within
/// their pool's `server_tls_handshake_timeout` at `now`, with that bound
/// in ms, in table order.
pub(super) fn stalled_server_handshakes(
    conns: &Slab<Conn>,
    pools: &[PoolRt],
    now: Instant,
) -> Vec<(Token, u64)> {
    conns
        .iter()
        .filter_map(|(k, c)| match c {
            Conn::Server(s) if s.sock().is_handshaking() => {
                let ms = pools[s.pool()]
                    .cfg
                    .security
                    .server_tls
                    .as_ref()
                    .map_or(HANDSHAKE_DEFAULT_MS, |t| t.handshake_timeout_ms);
                handshake_over(s.opened(), ms, now).then_some((Token(k), ms))
            }
            _ => None,
        })
        .collect()
}

/// What the once-a-second sweep ends at `now`, in this order: clients
/// idle past their pool's bound or whose TLS handshake outlasts it
/// ([`idle_clients`], `overridden` the idle bound set at run time); server
/// connections whose TLS handshake outlasts its bound (their requests fail
/// with the reason, which counts towards ejection: a server, or something
/// on its port, that accepts and never finishes it would otherwise hold
/// them until the pool's `timeout`, or for ever without one); clients
/// that read none of a large reply for `STREAM_STALL`, which hold a shared
/// connection up.
pub(super) fn each_second(
    conns: &mut Slab<Conn>,
    pools: &[PoolRt],
    overridden: Option<Duration>,
    now: Instant,
) -> Vec<Close> {
    let mut closes: Vec<Close> = idle_clients(conns, pools, overridden, now)
        .into_iter()
        .map(|token| {
            crate::log_info!("closing idle client");
            Close::Client {
                token,
                error: false,
            }
        })
        .collect();
    closes.extend(
        stalled_server_handshakes(conns, pools, now)
            .into_iter()
            .map(|(token, ms)| Close::Server {
                token,
                fault: ServerFault::TlsHandshakeTimeout { ms },
                at: now,
            }),
    );
    closes.extend(
        super::stream_reply::stalled_readers(conns, now)
            .into_iter()
            .map(|client| {
                crate::log_notice!(
                    "client not reading a large reply for {} s: closing it",
                    super::STREAM_STALL.as_secs()
                );
                Close::Named {
                    client,
                    error: true,
                }
            }),
    );
    closes
}

/// A second's work on the connections at `now`, in order: what the
/// sweep ends ([`each_second`], `overridden` the idle bound set at run
/// time), then the health probes of every pool of `pools`
/// (`server_health::probes`).
pub(super) fn second(
    conns: &mut Slab<Conn>,
    pools: &mut [PoolRt],
    overridden: Option<Duration>,
    now: Instant,
) -> Vec<Upkeep> {
    let ends = each_second(conns, pools, overridden, now);
    let mut steps: Vec<Upkeep> = ends.into_iter().map(Upkeep::End).collect();
    steps.extend(super::server_health::probes(pools, now));
    steps
}

/// The clients a graceful stop closes at `now` ([`quiet`]), in table
/// order.
pub(super) fn quiet_clients(conns: &Slab<Conn>, now: Instant) -> Vec<Token> {
    conns
        .iter()
        .filter_map(|(k, c)| match c {
            Conn::Client(c) if quiet(c.has_pending(), c.has_output(), c.last_active(), now) => {
                Some(Token(k))
            }
            _ => None,
        })
        .collect()
}

/// Every client in the table, in table order: those a handover that
/// could not go on reads again (what they sent meanwhile waits in their
/// sockets, and edge-triggered epoll will not report it again).
pub(super) fn clients(conns: &Slab<Conn>) -> impl Iterator<Item = Token> + '_ {
    conns.iter().filter_map(|(k, c)| match c {
        Conn::Client(_) => Some(Token(k)),
        Conn::Server(_) => None,
    })
}

/// Whether a client is pinned to this worker: a subscriber or a client
/// in a transaction, whose server connections are this worker's (it
/// crosses in a handover once it leaves that state).
pub(super) fn any_pinned(conns: &Slab<Conn>) -> bool {
    conns
        .iter()
        .any(|(_, c)| matches!(c, Conn::Client(c) if c.is_stateful()))
}

/// The clients holding unwritten replies, and how many bytes each: those
/// a worker over its `buffer_budget` chooses from
/// (`OutputBudget::evictions`).
pub(super) fn outputs(conns: &Slab<Conn>) -> impl Iterator<Item = (Token, usize)> + '_ {
    conns.iter().filter_map(|(k, c)| match c {
        Conn::Client(c) if c.has_output() => Some((Token(k), c.out_len())),
        _ => None,
    })
}

/// Whether any client is left in the table.
pub(super) fn any_client(conns: &Slab<Conn>) -> bool {
    conns.iter().any(|(_, c)| matches!(c, Conn::Client(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn client(handshaking: bool, busy: bool, opened: Instant, last_active: Instant) -> ClientIdle {
        ClientIdle {
            handshaking,
            busy,
            opened,
            last_active,
        }
    }

    #[test]
    fn an_unfinished_handshake_is_closed_past_its_bound_only() {
        let t0 = Instant::now();
        let shaking = client(true, false, t0, t0);
        let bound = 100 * MS;
        assert_eq!(idle_verdict(shaking, bound, None, t0 + bound), Swept::Keep);
        assert_eq!(
            idle_verdict(shaking, bound, None, t0 + bound + MS),
            Swept::Handshake
        );
        // Handshaking counts before busy and before the idle bound: it is
        // not touched, and not closed as idle.
        let busy = client(true, true, t0, t0);
        assert_eq!(
            idle_verdict(busy, bound, Some(MS), t0 + 50 * MS),
            Swept::Keep
        );
    }

    #[test]
    fn a_busy_client_is_touched_however_long_it_was_quiet() {
        let t0 = Instant::now();
        let busy = client(false, true, t0, t0);
        assert_eq!(
            idle_verdict(busy, MS, Some(MS), t0 + 60_000 * MS),
            Swept::Busy
        );
        assert_eq!(idle_verdict(busy, MS, None, t0), Swept::Busy);
    }

    #[test]
    fn an_idle_client_is_closed_past_its_bound_and_kept_without_one() {
        let t0 = Instant::now();
        let c = client(false, false, t0, t0 + 10 * MS);
        let bound = Some(100 * MS);
        assert_eq!(idle_verdict(c, MS, bound, t0 + 110 * MS), Swept::Keep);
        assert_eq!(idle_verdict(c, MS, bound, t0 + 111 * MS), Swept::Idle);
        assert_eq!(idle_verdict(c, MS, None, t0 + 3_600_000 * MS), Swept::Keep);
    }

    #[test]
    fn a_handshake_bound_is_passed_only_after_it() {
        let t0 = Instant::now();
        assert!(!handshake_over(t0, 50, t0 + 50 * MS));
        assert!(handshake_over(t0, 50, t0 + 51 * MS));
        assert!(!handshake_over(t0, 50, t0), "no time passed");
    }

    #[test]
    fn a_graceful_stop_closes_only_quiet_clients_with_nothing_to_do() {
        let t0 = Instant::now();
        let later = t0 + GRACEFUL_IDLE;
        assert!(
            quiet(false, false, t0, later),
            "quiet for exactly the bound"
        );
        assert!(
            !quiet(false, false, t0, later - MS),
            "not quiet long enough"
        );
        assert!(!quiet(true, false, t0, later), "a request in flight");
        assert!(!quiet(false, true, t0, later), "replies to write");
    }

    #[test]
    fn every_client_and_no_server_connection_is_named() {
        use crate::net::Stream;
        use crate::proto::redis::local::Session;
        use crate::worker::conn::{Client, Server};
        let now = Instant::now();
        let mut conns = Slab::new();
        let client = |conns: &mut Slab<Conn>| {
            let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
            let c = Client::new(Stream::Unix(sock), 1, 0, Session::new(1, None, false), now);
            Token(conns.insert(Conn::Client(Box::new(c))))
        };
        assert_eq!(clients(&conns).count(), 0);
        assert!(!any_client(&conns));
        let a = client(&mut conns);
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let s = Server::new(Stream::Unix(sock), 2, (0, 0, 0), now, true);
        conns.insert(Conn::Server(Box::new(s)));
        let b = client(&mut conns);
        assert_eq!(clients(&conns).collect::<Vec<_>>(), vec![a, b]);
        assert!(any_client(&conns));
        assert!(
            !any_pinned(&conns),
            "neither subscribed nor in a transaction"
        );
    }

    #[test]
    fn a_second_closes_the_clients_idle_past_their_bound_without_error() {
        use crate::net::Stream;
        use crate::proto::redis::local::Session;
        use crate::worker::conn::{Client, Server};
        let yaml = "p:\n  listen: 127.0.0.1:22999\n  redis: true\n  client_idle_timeout: 1000\n  servers:\n    - 127.0.0.1:30001:1\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let pools = vec![PoolRt::new(&c.pools[0], &[])];
        let t0 = Instant::now();
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let c = Client::new(Stream::Unix(sock), 1, 0, Session::new(1, None, false), t0);
        let ct = Token(conns.insert(Conn::Client(Box::new(c))));
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let s = Server::new(Stream::Unix(sock), 2, (0, 0, 0), t0, true);
        conns.insert(Conn::Server(Box::new(s)));
        assert!(each_second(&mut conns, &pools, None, t0 + 500 * MS).is_empty());
        let later = t0 + 1001 * MS;
        assert_eq!(
            each_second(&mut conns, &pools, None, later),
            vec![Close::Client {
                token: ct,
                error: false
            }]
        );
        assert!(
            each_second(&mut conns, &pools, Some(2000 * MS), later).is_empty(),
            "the bound set at run time first"
        );
    }

    #[test]
    fn a_second_ends_what_the_sweep_names_then_probes_the_ejected_servers() {
        use crate::net::Stream;
        use crate::proto::redis::local::Session;
        use crate::worker::conn::Client;
        let yaml = "p:\n  listen: 127.0.0.1:22999\n  redis: true\n  client_idle_timeout: 1000\n  auto_eject_hosts: true\n  server_health_check: true\n  servers:\n    - 127.0.0.1:30001:1\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let mut pools = vec![PoolRt::new(&c.pools[0], &[])];
        let t0 = Instant::now();
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let c = Client::new(Stream::Unix(sock), 1, 0, Session::new(1, None, false), t0);
        let ct = Token(conns.insert(Conn::Client(Box::new(c))));
        let quiet = second(&mut conns, &mut pools, None, t0 + 500 * MS);
        assert!(quiet.is_empty(), "{quiet:?}");
        pools[0].servers[0].probing = true;
        let steps = second(&mut conns, &mut pools, None, t0 + 1001 * MS);
        let [Upkeep::End(end), Upkeep::Ask(probe)] = &steps[..] else {
            panic!("an end, then a probe: {steps:?}");
        };
        let idle = Close::Client {
            token: ct,
            error: false,
        };
        assert_eq!(end, &idle);
        assert_eq!((probe.pool, &probe.servers[..]), (0, &[0][..]));
    }

    #[test]
    fn the_clients_holding_output_are_named_with_how_much() {
        use crate::net::Stream;
        use crate::proto::redis::local::Session;
        use crate::worker::conn::{BufPool, Client, ConnTable};
        let now = Instant::now();
        let mut conns = Slab::new();
        let mut bufs = BufPool::default();
        let mut client = |conns: &mut Slab<Conn>, out: &[u8]| {
            let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
            let c = Client::new(Stream::Unix(sock), 1, 0, Session::new(1, None, false), now);
            let t = Token(conns.insert(Conn::Client(Box::new(c))));
            if !out.is_empty() {
                conns.push_ready(t, out.to_vec(), false);
                let _ = conns.client_mut(t.0).map(|c| c.drain_ready(&mut bufs));
            }
            t
        };
        assert_eq!(outputs(&conns).count(), 0);
        let _quiet = client(&mut conns, b"");
        assert_eq!(outputs(&conns).count(), 0, "nothing held");
        let small = client(&mut conns, b"+OK\r\n");
        let big = client(&mut conns, b"$5\r\nhello\r\n");
        assert_eq!(
            outputs(&conns).collect::<Vec<_>>(),
            vec![(small, 5), (big, 11)]
        );
    }
}
