//! A subscriber against a pool built from configuration text, without
//! sockets: fed a client's commands, it says what the client is answered
//! here and what each server is sent; fed its servers' pushes, what the
//! client gets (counts as one connection would report them).

use super::*;
use crate::config::Config;
use mio::Token;
use std::path::Path;

fn pool() -> PoolRt {
    let yaml = "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 shard1\n    - 127.0.0.1:6380:1 shard2\n";
    let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

fn v(names: &[&str]) -> Vec<Vec<u8>> {
    names.iter().map(|n| n.as_bytes().to_vec()).collect()
}

/// A channel name placed on `server`.
fn channel_on(p: &mut PoolRt, server: usize, now: Instant) -> String {
    (0..1000)
        .map(|i| format!("ch{i}"))
        .find(|c| p.server_for(c.as_bytes(), now) == Some(server))
        .expect("some channel lands there")
}

/// A confirmation (or message) frame as a server sends it.
fn frame(kind: &str, name: &str, count: i64) -> Vec<u8> {
    format!(
        "*3\r\n${}\r\n{kind}\r\n${}\r\n{name}\r\n:{count}\r\n",
        kind.len(),
        name.len()
    )
    .into_bytes()
}

/// `subs` listens on both servers, on connections of its own.
fn opened_both(subs: &mut Subs) {
    subs.opened(1, ServerRef::new(Token(41), 2));
    subs.opened(0, ServerRef::new(Token(40), 1));
}

#[test]
fn channels_go_to_their_servers_and_count_as_on_one_connection() {
    let (mut p, now) = (pool(), Instant::now());
    let (a, b) = (channel_on(&mut p, 0, now), channel_on(&mut p, 1, now));
    let mut s = Subs::default();
    let sends = s.command("SUBSCRIBE", v(&[&a, &b, &a]), false, &mut p, 7, now);
    assert_eq!(sends.reply, b"");
    assert_eq!(
        sends.to,
        vec![
            (0, pubsub::command("SUBSCRIBE", &v(&[&a, &a]))),
            (1, pubsub::command("SUBSCRIBE", &v(&[&b]))),
        ]
    );
    assert_eq!(s.channels, v(&[&a, &b]), "each channel held once");
    opened_both(&mut s);
    // Each server counts only its own; the client sees one running count.
    assert_eq!(
        s.pushed(&frame("subscribe", &a, 1), 0, false),
        Some(frame("subscribe", &a, 1))
    );
    assert_eq!(
        s.pushed(&frame("subscribe", &a, 1), 0, false),
        Some(frame("subscribe", &a, 1)),
        "twice on one server counts once"
    );
    assert_eq!(
        s.pushed(&frame("subscribe", &b, 1), 1, false),
        Some(frame("subscribe", &b, 2))
    );
    // A message passes as it is.
    let msg = frame("message", &b, 5).into_iter().collect::<Vec<u8>>();
    assert_eq!(s.pushed(&msg, 1, false), Some(msg.clone()));
    assert_eq!(s.count, 2);
    // UNSUBSCRIBE naming nothing drops everything, on each server.
    let sends = s.command("UNSUBSCRIBE", Vec::new(), false, &mut p, 7, now);
    assert_eq!(
        sends.to,
        vec![
            (0, pubsub::command("UNSUBSCRIBE", &v(&[&a]))),
            (1, pubsub::command("UNSUBSCRIBE", &v(&[&b]))),
        ]
    );
    assert!(s.channels.is_empty());
    assert!(!s.is_idle(), "not idle until the servers confirm");
    assert_eq!(
        s.pushed(&frame("unsubscribe", &a, 0), 0, false),
        Some(frame("unsubscribe", &a, 1))
    );
    assert_eq!(
        s.pushed(&frame("unsubscribe", &b, 0), 1, false),
        Some(frame("unsubscribe", &b, 0))
    );
    assert!(s.is_idle());
    assert!(s.keep(), "kept while it holds connections");
}

#[test]
fn a_pattern_goes_everywhere_and_is_confirmed_once() {
    let (mut p, now) = (pool(), Instant::now());
    let mut s = Subs::default();
    let sends = s.command("PSUBSCRIBE", v(&["n*"]), false, &mut p, 7, now);
    let cmd = pubsub::command("PSUBSCRIBE", &v(&["n*"]));
    assert_eq!(sends.to, vec![(0, cmd.clone()), (1, cmd)]);
    assert_eq!(s.patterns, v(&["n*"]));
    opened_both(&mut s);
    assert_eq!(
        s.pushed(&frame("psubscribe", "n*", 1), 1, false),
        None,
        "only the first server's"
    );
    assert_eq!(
        s.pushed(&frame("psubscribe", "n*", 1), 0, false),
        Some(frame("psubscribe", "n*", 1))
    );
    let pm = b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$2\r\nn1\r\n$1\r\nx\r\n";
    assert_eq!(
        s.pushed(pm, 1, false),
        Some(pm.to_vec()),
        "messages from any server pass"
    );
    let sends = s.command("PUNSUBSCRIBE", v(&["n*"]), false, &mut p, 7, now);
    assert_eq!(sends.to.len(), 2);
    assert_eq!(
        s.pushed(&frame("punsubscribe", "n*", 0), 0, false),
        Some(frame("punsubscribe", "n*", 0))
    );
    assert_eq!(s.pushed(&frame("punsubscribe", "n*", 0), 1, false), None);
    assert!(s.is_idle());
    // In a cluster pool a pattern is on one node: each confirmation counts.
    let mut c = Subs::default();
    opened_both(&mut c);
    assert_eq!(
        c.pushed(&frame("psubscribe", "n*", 1), 1, true),
        Some(frame("psubscribe", "n*", 1))
    );
}

#[test]
fn what_is_not_held_is_answered_here() {
    let (mut p, now) = (pool(), Instant::now());
    let a = channel_on(&mut p, 1, now);
    let mut s = Subs::default();
    // Nothing held: one confirmation with a null name, nothing sent.
    let sends = s.command("UNSUBSCRIBE", Vec::new(), false, &mut p, 7, now);
    assert_eq!(sends.reply, b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
    assert!(sends.to.is_empty());
    assert!(!s.keep());
    s.command("SUBSCRIBE", v(&[&a]), true, &mut p, 7, now);
    s.opened(1, ServerRef::new(Token(41), 2));
    s.pushed(&frame("subscribe", &a, 1), 1, false);
    // One name held, one not: the other is answered with the count as it is
    // (a push frame for RESP3), the held one sent to its server.
    let sends = s.command("UNSUBSCRIBE", v(&["zz", &a]), true, &mut p, 7, now);
    assert_eq!(
        sends.reply,
        b">3\r\n$11\r\nunsubscribe\r\n$2\r\nzz\r\n:1\r\n"
    );
    assert_eq!(
        sends.to,
        vec![(1, pubsub::command("UNSUBSCRIBE", &v(&[&a])))]
    );
    assert!(s.channels.is_empty());
    // Only names not held: nothing for the servers.
    let sends = s.command("SUNSUBSCRIBE", v(&["x"]), false, &mut p, 7, now);
    assert_eq!(
        sends.reply,
        b"*3\r\n$12\r\nsunsubscribe\r\n$1\r\nx\r\n:0\r\n"
    );
    assert!(sends.to.is_empty());
}

#[test]
fn subscribing_to_nothing_is_refused() {
    let (mut p, now) = (pool(), Instant::now());
    let mut s = Subs::default();
    for name in ["SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"] {
        let sends = s.command(name, Vec::new(), false, &mut p, 7, now);
        assert_eq!(sends.reply, reply::wrong_args(name));
        assert!(sends.to.is_empty());
    }
    assert!(!s.keep());
}

#[test]
fn sharded_channels_count_apart_and_a_new_connection_starts_from_zero() {
    let (mut p, now) = (pool(), Instant::now());
    let a = channel_on(&mut p, 0, now);
    let mut s = Subs::default();
    let sends = s.command("SSUBSCRIBE", v(&[&a]), false, &mut p, 7, now);
    assert_eq!(
        sends.to,
        vec![(0, pubsub::command("SSUBSCRIBE", &v(&[&a])))]
    );
    assert_eq!(s.shard_channels, v(&[&a]));
    s.opened(0, ServerRef::new(Token(40), 1));
    assert_eq!(
        s.pushed(&frame("ssubscribe", &a, 1), 0, false),
        Some(frame("ssubscribe", &a, 1))
    );
    assert_eq!((s.count, s.shard_count), (0, 1));
    // The connection to server 0 replaced: its count there starts again.
    s.opened(0, ServerRef::new(Token(42), 3));
    assert_eq!(s.conn(0), Some(ServerRef::new(Token(42), 3)));
    assert_eq!(
        s.pushed(&frame("ssubscribe", &a, 1), 0, false),
        Some(frame("ssubscribe", &a, 2))
    );
}

#[test]
fn a_subscribed_resp2_client_may_send_only_pubsub_ping_and_quit() {
    let ping = b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n";
    let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    // Not subscribed: only pub/sub commands are its.
    assert_eq!(
        offer("GET", false, get, false, false, false),
        SubsStep::Pass
    );
    assert_eq!(
        offer("PING", false, ping, false, false, false),
        SubsStep::Pass
    );
    assert_eq!(
        offer("SUBSCRIBE", true, b"", false, false, false),
        SubsStep::Command
    );
    // Subscribed, RESP2: PING answered here, others refused, QUIT passes.
    assert_eq!(
        offer("PING", false, ping, true, false, false),
        SubsStep::Answer(b"*2\r\n$4\r\npong\r\n$2\r\nhi\r\n".to_vec())
    );
    let SubsStep::Answer(refused) = offer("GET", false, get, true, false, false) else {
        panic!("refused");
    };
    assert!(refused.starts_with(b"-ERR Can't execute 'get'"));
    assert_eq!(offer("QUIT", false, b"", true, false, true), SubsStep::Pass);
    assert_eq!(
        offer("UNSUBSCRIBE", true, b"", true, false, false),
        SubsStep::Command
    );
    // RESP3: anything goes.
    assert_eq!(offer("GET", false, get, true, true, false), SubsStep::Pass);
}
