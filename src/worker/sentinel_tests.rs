//! A sentinel watch against a pool built from configuration text, fed the
//! replies a sentinel sends, without sockets: where the masters move, what
//! is retired, when the conversation is asked again or ends.

use super::*;
use crate::config::Config;
use std::path::Path;

fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n  sentinels:\n    - 127.0.0.1:26379\n{extra}  servers:\n    - 127.0.0.1:6379:1 shard1\n    - 127.0.0.1:6380:1 shard2\n"
    );
    let c = Config::from_str(&yaml, Path::new("t.yml")).expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

/// A watch of `p` whose conversation was just opened (its questions due).
fn asked(p: &PoolRt) -> Watch {
    let mut w = Watch::new(0, p);
    w.due = w.questions();
    w
}

fn master(host: &str, port: u16) -> Vec<u8> {
    let port = port.to_string();
    format!(
        "*2\r\n${}\r\n{host}\r\n${}\r\n{port}\r\n",
        host.len(),
        port.len()
    )
    .into_bytes()
}

fn switch(name: &str, to: u16) -> Vec<u8> {
    let msg = format!("{name} 127.0.0.1 6379 127.0.0.1 {to}");
    format!(
        "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n${}\r\n{msg}\r\n",
        msg.len()
    )
    .into_bytes()
}

fn port_of(p: &PoolRt, server: usize) -> u16 {
    match &p.servers[server].endpoint {
        Some(Endpoint::Tcp(a)) => a.port(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn masters_answered_move_the_servers_and_retire_their_connections() {
    let mut p = pool("");
    let now = Instant::now();
    p.servers[0].conns[0] = Some(Token(40));
    p.servers[0].failures = 2;
    let mut w = asked(&p);
    let mut retire = Vec::new();
    // shard1 moved; shard2 is where it was written.
    assert_eq!(
        w.said(&master("127.0.0.1", 7001), &mut p, now, &mut retire),
        Ok(Next::Listen)
    );
    assert!(!w.answered());
    assert_eq!(
        w.said(&master("127.0.0.1", 6380), &mut p, now, &mut retire),
        Ok(Next::Listen)
    );
    assert!(w.answered());
    assert_eq!((port_of(&p, 0), port_of(&p, 1)), (7001, 6380));
    assert_eq!(retire, vec![Token(40)]);
    assert_eq!(
        p.servers[0].failures, 0,
        "the old address's failures are dropped"
    );
    assert!(p.servers[0].conns.iter().all(Option::is_none));
    // Then the subscription's confirmation: nothing changes.
    let sub = b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n";
    assert_eq!(w.said(sub, &mut p, now, &mut retire), Ok(Next::Listen));
}

#[test]
fn a_failover_announced_moves_its_master_only() {
    let mut p = pool("");
    let now = Instant::now();
    let mut w = asked(&p);
    let mut retire = Vec::new();
    for m in [master("127.0.0.1", 6379), master("127.0.0.1", 6380)] {
        assert_eq!(w.said(&m, &mut p, now, &mut retire), Ok(Next::Listen));
    }
    assert_eq!(
        w.said(&switch("shard2", 7002), &mut p, now, &mut retire),
        Ok(Next::Listen)
    );
    assert_eq!((port_of(&p, 0), port_of(&p, 1)), (6379, 7002));
    // A name the pool does not have is not followed.
    assert_eq!(
        w.said(&switch("other", 7003), &mut p, now, &mut retire),
        Ok(Next::Listen)
    );
    assert_eq!((port_of(&p, 0), port_of(&p, 1)), (6379, 7002));
    assert!(retire.is_empty(), "nothing was connected");
}

#[test]
fn an_ejected_master_that_moved_is_taken_back() {
    let mut p = pool("");
    let now = Instant::now();
    p.servers[1].ejected_until = Some(now + Duration::from_secs(30));
    let mut w = asked(&p);
    w.due.masters = 0;
    assert_eq!(
        w.said(&switch("shard2", 7002), &mut p, now, &mut Vec::new()),
        Ok(Next::Listen)
    );
    assert_eq!(p.servers[1].ejected_until, None);
}

#[test]
fn auth_refused_and_errors_end_the_conversation() {
    let mut p = pool("  sentinel_auth: pw\n");
    let now = Instant::now();
    let mut w = asked(&p);
    assert!(w.due.auth);
    let refused = w.said(
        b"-WRONGPASS invalid password\r\n",
        &mut p,
        now,
        &mut Vec::new(),
    );
    assert_eq!(
        refused,
        Err("AUTH refused: WRONGPASS invalid password".into())
    );
    let mut w = asked(&pool(""));
    let asking = w.said(
        b"-NOAUTH Authentication required.\r\n",
        &mut p,
        now,
        &mut Vec::new(),
    );
    assert_eq!(
        asking,
        Err("asking for 'shard1': NOAUTH Authentication required.".into())
    );
}

#[test]
fn an_unknown_name_leaves_its_server_where_it_was() {
    let mut p = pool("");
    let now = Instant::now();
    let mut w = asked(&p);
    assert_eq!(
        w.said(b"*-1\r\n", &mut p, now, &mut Vec::new()),
        Ok(Next::Listen)
    );
    assert_eq!(port_of(&p, 0), 6379);
}

#[test]
fn with_replicas_serving_reads_replica_events_ask_again() {
    let mut p = pool("  read_from: prefer-replica\n");
    let now = Instant::now();
    let mut w = asked(&p);
    assert_eq!(w.due.replicas, 2);
    let mut retire = Vec::new();
    for m in [master("127.0.0.1", 6379), master("127.0.0.1", 6380)] {
        assert_eq!(w.said(&m, &mut p, now, &mut retire), Ok(Next::Listen));
    }
    let replicas = b"*1\r\n\
*6\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n$4\r\n6390\r\n$5\r\nflags\r\n$5\r\nslave\r\n";
    assert_eq!(w.said(replicas, &mut p, now, &mut retire), Ok(Next::Listen));
    assert_eq!(
        w.said(b"*0\r\n", &mut p, now, &mut retire),
        Ok(Next::Listen)
    );
    assert_eq!(p.replicas_of[0].len(), 1);
    assert_eq!(port_of(&p, p.replicas_of[0][0]), 6390);
    assert!(p.replicas_of[1].is_empty());
    let sdown = b"*3\r\n$7\r\nmessage\r\n$6\r\n+sdown\r\n$5\r\nslave\r\n";
    assert_eq!(w.said(sdown, &mut p, now, &mut retire), Ok(Next::AskAgain));
    assert_eq!(
        w.said(&switch("shard1", 6390), &mut p, now, &mut retire),
        Ok(Next::AskAgain)
    );
    assert_eq!(port_of(&p, 0), 6390);
}

#[test]
fn replies_are_taken_whole_and_in_order() {
    let mut rbuf = b"+OK\r\n:1\r\n$5\r\nab".to_vec();
    let (replies, bad) = whole_replies(&mut rbuf);
    assert_eq!(replies, vec![b"+OK\r\n".to_vec(), b":1\r\n".to_vec()]);
    assert_eq!((bad, rbuf.as_slice()), (None, &b"$5\r\nab"[..]));
    let mut rbuf = b"+OK\r\n?what\r\n".to_vec();
    let (replies, bad) = whole_replies(&mut rbuf);
    assert_eq!(replies.len(), 1);
    assert_eq!(bad.as_deref(), Some("a reply that is not RESP"));
}

#[test]
fn the_gate_opens_once_every_watch_answered_or_its_time_is_up() {
    let mut p = pool("");
    let now = Instant::now();
    let until = now + GATE;
    assert_eq!(
        gate(until, &[], now),
        GateStep::Answered,
        "nothing to wait for"
    );
    let mut w = asked(&p);
    let mut retire = Vec::new();
    let waiting = [Watch::new(0, &p)];
    assert_eq!(gate(until, &waiting, now), GateStep::Shut);
    assert_eq!(gate(until, &waiting, until), GateStep::TimedOut);
    let _ = w.said(&master("127.0.0.1", 6379), &mut p, now, &mut retire);
    let _ = w.said(&master("127.0.0.1", 6380), &mut p, now, &mut retire);
    assert!(w.answered());
    let both = [w, Watch::new(1, &p)];
    assert_eq!(gate(until, &both, now), GateStep::Shut, "one still waits");
    assert_eq!(gate(until, &both[..1], now), GateStep::Answered);
    assert_eq!(
        gate(until, &both[..1], until),
        GateStep::Answered,
        "answered in time: no warning"
    );
}

#[test]
fn a_watch_opens_its_conversation_once_its_retry_time_came() {
    let p = pool("");
    let pools = [p];
    let poll = mio::Poll::new().expect("poll");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("address").port();
    let now = Instant::now();
    let mut watches = [Watch::new(0, &pools[0]), Watch::new(0, &pools[0])];
    for w in &mut watches {
        w.sentinels = vec![("127.0.0.1".into(), port)];
    }
    watches[0].retry_at = Some(now + Duration::from_secs(1));
    watches[1].retry_at = Some(now);
    maintain(&mut watches, &pools, poll.registry(), now);
    assert!(watches[0].talk.is_none(), "its retry time has not come");
    assert!(watches[1].talk.is_some(), "asked");
    assert_eq!(watches[1].opened_at, Some(now));
    assert_eq!(watches[1].due, watches[1].questions());
    let later = now + Duration::from_secs(1);
    maintain(&mut watches, &pools, poll.registry(), later);
    assert!(watches[0].talk.is_some(), "asked once its time came");
    assert_eq!(
        watches[1].opened_at,
        Some(now),
        "one conversation at a time"
    );
}

#[test]
fn readiness_of_a_conversation_not_open_retires_nothing() {
    let mut pools = vec![pool("")];
    let mut watches = watches(&pools);
    let poll = mio::Poll::new().expect("poll");
    let now = Instant::now();
    assert_eq!(watches.len(), 1);
    for i in [0, 1] {
        let due = event(&mut watches, &mut pools, poll.registry(), i, now);
        assert!(due.is_empty(), "conversation {i}");
    }
}
