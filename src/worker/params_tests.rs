//! What the controller's run-time parameters change (`params.rs`): in the
//! pools, built from configuration text, and in the timers of a table of
//! server connections on socket pairs (nothing is written to them).

use super::*;
use crate::config::Config;
use crate::net::Stream;
use crate::proto::{Limits, Parse, Protocol};
use crate::stats::slowlog::KeyPrefix;
use crate::worker::conn::{Server, Waiter};
use std::path::Path;
use std::time::Instant;

/// A pool of two servers, migrating from one of them when `migration`.
fn pool(migration: bool) -> PoolRt {
    let cfg = |ports: &[u16]| {
        let mut text = String::from(
            "p:\n  listen: 127.0.0.1:39999\n  redis: true\n  migration: true\n  servers:\n",
        );
        for port in ports {
            text.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
        }
        Config::from_str(&text, Path::new("t.yml"))
            .expect("config parses")
            .pools
            .remove(0)
    };
    let olds = if migration {
        vec![cfg(&[30001])]
    } else {
        Vec::new()
    };
    PoolRt::new(&cfg(&[30001, 30002]), &olds)
}

fn ctl() -> WorkerCtl {
    WorkerCtl {
        latency: true,
        pool_names: vec!["p".into(), "q".into()],
        ..WorkerCtl::default()
    }
}

#[test]
fn a_barrier_passed_and_a_migration_ended_are_given_to_their_pool_once() {
    let mut pools = vec![pool(true), pool(true)];
    pools[0].fleet_fenced = true;
    pools[1].fleet_fenced = true;
    assert!(pools[0].migration.is_some() && pools[0].route.is_migrating());
    let mut c = ctl();
    c.fleet_go = vec![0, 7];
    c.migration_done = vec![0, 7];
    assert!(c.apply_to(&mut pools).is_empty(), "no timeout changed");
    assert!(!pools[0].fleet_fenced, "the barrier passed");
    assert!(pools[0].migration.is_none() && !pools[0].route.is_migrating());
    assert!(
        pools[1].fleet_fenced && pools[1].migration.is_some(),
        "the other pool is left as it was"
    );
    assert!(
        c.fleet_go.is_empty() && c.migration_done.is_empty(),
        "taken once, an unknown pool ignored"
    );
}

#[test]
fn a_new_server_timeout_is_the_pool_s_and_named_for_its_connections() {
    let mut pools = vec![pool(false), pool(false)];
    pools[1].cfg.timeout_ms = Some(400);
    let mut c = ctl();
    c.pool_timeouts = vec![(0, 250), (1, 0), (9, 100)];
    let changed = c.apply_to(&mut pools);
    assert_eq!(
        changed,
        vec![(0, Some(Duration::from_millis(250))), (1, None)],
        "0 ms is none; an unknown pool is skipped"
    );
    assert_eq!(pools[0].cfg.timeout_ms, Some(250));
    assert_eq!(pools[1].cfg.timeout_ms, None);
    assert!(c.pool_timeouts.is_empty());
    assert!(
        c.apply_to(&mut pools).is_empty(),
        "nothing new in the next pass"
    );
}

/// A server connection of `pool` (id `id`), with a request in flight
/// since `sent` when there is one.
fn server(conns: &mut Slab<Conn>, pool: usize, id: u64, sent: Option<Instant>) -> Token {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let now = Instant::now();
    let mut s = Server::new(Stream::Unix(sock), id, (pool, 0, 0), now, true);
    if let Some(at) = sent {
        let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
            panic!("request parses");
        };
        let waiter = Waiter::Client {
            token: Token(100),
            id: 1,
            seq: 0,
            frag: None,
        };
        let _ = s.queue(
            Some(waiter),
            req.op,
            |w| w.extend_from_slice(bytes),
            at,
            KeyPrefix::new(b"k"),
        );
    }
    s.set_timer_armed(true);
    Token(conns.insert(Conn::Server(Box::new(s))))
}

fn armed(conns: &Slab<Conn>, t: Token) -> bool {
    match conns.get(t.0) {
        Some(Conn::Server(s)) => s.timer_armed(),
        _ => panic!("a server connection"),
    }
}

#[test]
fn a_pool_s_connections_with_a_request_in_flight_are_timed_from_its_oldest() {
    let mut conns = Slab::new();
    let mut timers = Timers::default();
    let sent = Instant::now();
    let busy = server(&mut conns, 0, 11, Some(sent));
    let idle = server(&mut conns, 0, 12, None);
    let other = server(&mut conns, 1, 13, Some(sent));
    let t = Duration::from_millis(100);
    rearm(&mut conns, &mut timers, 0, Some(t));
    assert!(armed(&conns, busy));
    assert!(!armed(&conns, idle), "nothing in flight: nothing timed");
    assert!(
        armed(&conns, other),
        "another pool's connection is left alone"
    );
    assert_eq!(timers.due(sent + t - Duration::from_millis(1)), None);
    assert_eq!(timers.due(sent + t), Some((busy, 11)));
    assert_eq!(
        timers.due(sent + t),
        None,
        "one timer, for that connection only"
    );

    rearm(&mut conns, &mut timers, 0, None);
    assert!(!armed(&conns, busy), "no timeout: nothing timed");
    assert_eq!(timers.due(sent + Duration::from_secs(60)), None);
}
