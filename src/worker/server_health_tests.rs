//! A pool's servers failing, ejected and taken back, without sockets: the
//! pool built from configuration text, its gauges and counters in a stats
//! region of its own.

use super::*;
use crate::config::Config;
use crate::stats::shm::{Layout, Region};
use std::path::Path;

fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "mc:\n  listen: 127.0.0.1:22999\n{extra}  servers:\n    - 127.0.0.1:11211:1 a\n    - 127.0.0.1:11212:1 b\n"
    );
    let c = Config::from_str(&yaml, Path::new("t.yml")).expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

fn stats() -> Region {
    Region::new(Layout::new(vec![2], vec![0]), 1).expect("stats region")
}

#[test]
fn failures_in_a_row_eject_and_an_answer_takes_back() {
    let mut p =
        pool("  auto_eject_hosts: true\n  server_failure_limit: 2\n  server_retry_timeout: 500\n");
    let region = stats();
    let st = region.slot(0);
    let now = Instant::now();
    p.note_failure(0, 1, now, &ServerFault::TimedOut, &st);
    assert!(p.servers[1].down && p.servers[1].ejected_until.is_none());
    assert_eq!(region.server_sum(0, 1, ServerField::ServerDown), 1);
    assert!(p.servers[1].retry_at.is_some(), "reconnection backs off");
    p.note_failure(0, 1, now, &ServerFault::TimedOut, &st);
    assert_eq!(
        p.servers[1].ejected_until,
        Some(now + Duration::from_millis(500))
    );
    assert_eq!(region.pool_sum(0, PoolField::ServerEjects), 1);
    assert!(region.server_sum(0, 1, ServerField::ServerEjectedAt) > 0);
    assert_eq!(p.servers[1].last_fault, Some(ServerFault::TimedOut));
    // The other server is untouched.
    assert!(!p.servers[0].down && p.servers[0].failures == 0);
    // It answers: it was down, so the worker says it is back.
    assert!(p.record_success(1, now));
    p.server_back(0, 1, &st);
    assert_eq!(region.server_sum(0, 1, ServerField::ServerDown), 0);
    assert!(!p.record_success(1, now), "said once");
}

#[test]
fn without_auto_eject_a_server_only_backs_off() {
    let mut p = pool("  server_failure_limit: 1\n");
    let region = stats();
    let now = Instant::now();
    let mut last = Duration::ZERO;
    for _ in 0..12 {
        p.note_failure(0, 0, now, &ServerFault::TimedOut, &region.slot(0));
        assert!(p.servers[0].ejected_until.is_none());
        assert!(p.servers[0].backoff >= last && p.servers[0].backoff <= Duration::from_secs(1));
        last = p.servers[0].backoff;
    }
    assert_eq!(last, Duration::from_secs(1), "doubling, capped at a second");
    assert_eq!(region.pool_sum(0, PoolField::ServerEjects), 0);
}

#[test]
fn jitter_stays_within_a_quarter() {
    for _ in 0..100 {
        let j = jitter_factor();
        assert!((0.75..1.25).contains(&j), "{j}");
    }
}

#[test]
fn an_ended_connection_is_counted_by_how_it_ended_and_only_a_fault_backs_off() {
    let mut p = pool("  server_failure_limit: 3\n");
    let region = stats();
    let st = region.slot(0);
    let now = Instant::now();
    // The server closed an idle connection: counted, not a failure.
    p.connection_ended(0, 0, &ServerFault::Closed, 0, now, &st);
    assert_eq!(region.server_sum(0, 0, ServerField::ServerEof), 1);
    assert!(!p.servers[0].down && p.servers[0].failures == 0);
    // Closed under waiting requests: still an end of file, and the
    // server's fault (it dropped them).
    p.connection_ended(0, 0, &ServerFault::Closed, 2, now, &st);
    assert_eq!(region.server_sum(0, 0, ServerField::ServerEof), 2);
    assert!(p.servers[0].down && p.servers[0].failures == 1);
    // A timeout is counted as one and backs off.
    p.connection_ended(0, 1, &ServerFault::TimedOut, 1, now, &st);
    assert_eq!(region.server_sum(0, 1, ServerField::ServerTimedout), 1);
    assert!(p.servers[1].retry_at.is_some());
    // A connection this side gave up on (the poller refused it) is an
    // error in the counters, never the server's failure.
    let io = super::super::fault::IoFault::from(&std::io::Error::from_raw_os_error(24));
    p.connection_ended(0, 1, &ServerFault::Register(io), 1, now, &st);
    assert_eq!(region.server_sum(0, 1, ServerField::ServerErr), 1);
    assert_eq!(p.servers[1].failures, 1);
}

#[test]
fn an_ejected_server_is_probed_once_its_time_is_up_and_one_probe_at_a_time() {
    let mut p = pool(
        "  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 500\n  server_health_check: true\n",
    );
    let region = stats();
    let st = region.slot(0);
    let now = Instant::now();
    assert!(p.probes_due(now).is_empty(), "nothing ejected");
    p.note_failure(0, 1, now, &ServerFault::TimedOut, &st);
    assert!(p.servers[1].ejected_until.is_some());
    let later = now + Duration::from_millis(499);
    assert!(p.probes_due(later).is_empty(), "still ejected");
    let over = now + Duration::from_millis(500);
    assert_eq!(p.probes_due(over), vec![1], "its ejection is over: probed");
    assert!(p.servers[1].probing && p.next_rebuild.is_none());
    p.servers[1].conns[0] = Some(Token(7));
    assert!(p.probes_due(over).is_empty(), "a probe is under way");
    p.servers[1].conns[0] = None;
    assert_eq!(p.probes_due(over), vec![1], "that probe's connection ended");
}

#[test]
fn a_due_probe_is_the_protocols_cheap_request_on_the_servers_probe_connection() {
    let mut p = pool(
        "  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 500\n  server_health_check: true\n",
    );
    let region = stats();
    let now = Instant::now();
    assert!(p.probes(4, now).is_empty(), "nothing ejected");
    p.note_failure(0, 1, now, &ServerFault::TimedOut, &region.slot(0));
    let steps = p.probes(4, now + Duration::from_millis(500));
    let [Upkeep::Ask(a)] = &steps[..] else {
        panic!("one probe: {steps:?}")
    };
    assert_eq!((a.pool, &a.servers[..], a.open), (4, &[1][..], Open::Probe));
    assert_eq!((a.op, a.bytes), crate::proto::Protocol::Memcache.probe());
    assert!(matches!(a.waiter, Waiter::Internal), "its reply is dropped");
}

#[test]
fn a_fired_timer_is_armed_again_or_fails_its_connection_and_a_stale_one_does_nothing() {
    use crate::proto::redis::{Cmd, RedisOp};
    let p = pool("  timeout: 100\n");
    let now = Instant::now();
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let server =
        super::super::conn::Server::new(crate::net::Stream::Unix(sock), 7, (0, 0, 0), now, false);
    let mut conns = Slab::new();
    let token = Token(conns.insert(Conn::Server(Box::new(server))));
    let fire = |conns: &mut Slab<Conn>, id, at| {
        timer_fired(conns, std::slice::from_ref(&p), token, id, at)
    };
    assert!(fire(&mut conns, 7, now).is_none(), "nothing in flight");
    let cmd = Cmd::lookup(b"PING").expect("PING");
    let ping = crate::proto::Op::Redis(RedisOp {
        cmd,
        class: cmd.class(),
    });
    let s = conns.server_mut(token.0).expect("server");
    s.queue(
        Some(Waiter::Internal),
        ping,
        |o| o.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
        now,
        Default::default(),
    );
    let t = Duration::from_millis(100);
    assert!(
        fire(&mut conns, 8, now).is_none(),
        "another connection's timer"
    );
    assert!(fire(&mut conns, 7, now + t / 2).is_some_and(
        |s| matches!(s, Upkeep::Arm { at, token: k, id: 7 } if at == now + t && k == token)
    ));
    assert!(fire(&mut conns, 7, now + t).is_some_and(|s| matches!(
        s,
        Upkeep::Close {
            fault: ServerFault::TimedOut,
            ..
        }
    )));
    assert!(
        timer_fired(&mut conns, &[], Token(99), 7, now).is_none(),
        "gone"
    );
}
