//! A transaction against a pool built from configuration text, without
//! sockets: fed a client's commands, it says what is answered here, where
//! each command goes (refused, a connection to open, the pinned one), what
//! is sent first on a connection just opened, and when the transaction
//! ends.

use super::*;
use crate::config::Config;
use crate::proto::redis::parse_request;
use crate::proto::{Limits, Parse, Protocol};
use std::path::Path;
use std::time::Duration;

fn pool() -> PoolRt {
    let yaml = "rd:\n  listen: 127.0.0.1:22998\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 shard1\n    - 127.0.0.1:6380:1 shard2\n";
    let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

/// A command as a client sends it: the parsed request and its bytes.
fn cmd(args: &[&str]) -> (Request, Vec<u8>) {
    let mut b = format!("*{}\r\n", args.len());
    for a in args {
        b.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    match parse_request(b.as_bytes(), &Limits::default()) {
        Ok(Parse::Done(r)) => (r, b.into_bytes()),
        other => panic!("{args:?}: {other:?}"),
    }
}

/// A key placed on `server`.
fn key_on(p: &mut PoolRt, server: usize, now: Instant) -> String {
    (0..1000)
        .map(|i| format!("k{i}"))
        .find(|k| p.server_for(k.as_bytes(), now) == Some(server))
        .expect("some key lands there")
}

/// `args` offered to `t`: what is answered here, else where it goes.
fn offer(t: &mut Txn, p: &mut PoolRt, args: &[&str], now: Instant) -> Result<Place, Vec<u8>> {
    let (req, bytes) = cmd(args);
    match t.answer(name_of(&req)) {
        Answer::Forward => Ok(t.place(&req, &bytes, p, now)),
        Answer::Here { reply, discard } => {
            assert_eq!(discard, None, "{args:?}: nothing pinned to let go");
            Err(reply)
        }
    }
}

fn here(s: &str) -> Result<Place, Vec<u8>> {
    Err(s.as_bytes().to_vec())
}

const CONN: ServerRef = ServerRef {
    token: Token(40),
    id: 7,
};

#[test]
fn multi_is_answered_here_and_sent_once_a_key_picks_the_server() {
    let (mut p, now) = (pool(), Instant::now());
    let k = key_on(&mut p, 1, now);
    let mut t = Txn::default();
    assert_eq!(offer(&mut t, &mut p, &["MULTI"], now), here("+OK\r\n"));
    assert!(t.keep() && t.conn().is_none());
    assert_eq!(
        offer(&mut t, &mut p, &["SET", &k, "v"], now),
        Ok(Place::Open(1))
    );
    assert_eq!(
        t.pinned(CONN, 1, "SET"),
        Some(txn::MULTI),
        "the MULTI answered here goes first"
    );
    assert!(!t.ends_on(CONN.token), "SET does not end it");
    assert_eq!(
        offer(&mut t, &mut p, &["GET", &k], now),
        Ok(Place::Send(CONN.token))
    );
    assert_eq!(
        offer(&mut t, &mut p, &["MULTI"], now),
        here("-ERR MULTI calls can not be nested\r\n")
    );
    assert_eq!(
        offer(&mut t, &mut p, &["WATCH", &k], now),
        here("-ERR WATCH inside MULTI is not allowed\r\n")
    );
    assert!(!t.ends_on(CONN.token));
    assert_eq!(
        offer(&mut t, &mut p, &["EXEC"], now),
        Ok(Place::Send(CONN.token))
    );
    assert!(t.ends_on(CONN.token), "unpinned once EXEC is answered");
    assert!(!t.ends_on(Token(41)), "on its own connection only");
    assert_eq!(t.end(), Some(CONN));
    assert!(!t.keep() && t.conn().is_none());
}

#[test]
fn watch_pins_its_key_server_and_multi_then_goes_there() {
    let (mut p, now) = (pool(), Instant::now());
    let (a, b) = (key_on(&mut p, 0, now), key_on(&mut p, 1, now));
    let mut t = Txn::default();
    assert_eq!(
        offer(&mut t, &mut p, &["WATCH", &a], now),
        Ok(Place::Open(0))
    );
    assert_eq!(t.pinned(CONN, 0, "WATCH"), None, "no MULTI owed");
    assert!(t.keep(), "pinned outside MULTI: kept");
    assert_eq!(
        offer(&mut t, &mut p, &["WATCH", &b], now),
        Ok(Place::Refuse(txn::keys_elsewhere("WATCH"))),
        "another server's key is refused"
    );
    assert_eq!(
        offer(&mut t, &mut p, &["MULTI"], now),
        Ok(Place::Send(CONN.token))
    );
    // Inside MULTI, UNWATCH is queued and does not end anything.
    assert_eq!(
        offer(&mut t, &mut p, &["UNWATCH"], now),
        Ok(Place::Send(CONN.token))
    );
    assert!(!t.ends_on(CONN.token));
    assert_eq!(
        offer(&mut t, &mut p, &["DISCARD"], now),
        Ok(Place::Send(CONN.token))
    );
    assert!(t.ends_on(CONN.token), "DISCARD ends it");

    // Outside MULTI, UNWATCH on a pinned connection ends it too.
    let mut t = Txn::default();
    assert_eq!(
        offer(&mut t, &mut p, &["WATCH", &b], now),
        Ok(Place::Open(1))
    );
    t.pinned(CONN, 1, "WATCH");
    assert_eq!(
        offer(&mut t, &mut p, &["UNWATCH"], now),
        Ok(Place::Send(CONN.token))
    );
    assert!(t.ends_on(CONN.token));
}

#[test]
fn a_command_refused_while_queueing_makes_exec_abort() {
    let (mut p, now) = (pool(), Instant::now());
    let (a, b) = (key_on(&mut p, 0, now), key_on(&mut p, 1, now));
    let mut t = Txn::default();
    offer(&mut t, &mut p, &["MULTI"], now).unwrap_err();
    assert_eq!(
        offer(&mut t, &mut p, &["SET", &a, "1"], now),
        Ok(Place::Open(0))
    );
    t.pinned(CONN, 0, "SET");
    assert_eq!(
        offer(&mut t, &mut p, &["SET", &b, "1"], now),
        Ok(Place::Refuse(txn::keys_elsewhere("SET")))
    );
    assert_eq!(
        offer(&mut t, &mut p, &["GET", &a], now),
        Ok(Place::Send(CONN.token))
    );
    assert_eq!(
        t.answer("EXEC"),
        Answer::Here {
            reply: txn::EXECABORT.to_vec(),
            discard: Some(CONN),
        },
        "the pinned connection is sent DISCARD and let go"
    );
    assert!(!t.keep() && t.conn().is_none(), "the transaction is over");

    // Refused before any server was chosen: nothing to discard.
    let mut t = Txn::default();
    offer(&mut t, &mut p, &["MULTI"], now).unwrap_err();
    t.refused(); // a request the parser refused
    assert_eq!(
        offer(&mut t, &mut p, &["EXEC"], now),
        Err(txn::EXECABORT.to_vec())
    );
    assert!(!t.keep());
}

#[test]
fn keys_on_two_servers_are_refused_and_dirty_only_inside_multi() {
    let (mut p, now) = (pool(), Instant::now());
    let (a, b) = (key_on(&mut p, 0, now), key_on(&mut p, 1, now));
    let mut t = Txn::default();
    assert_eq!(
        offer(&mut t, &mut p, &["WATCH", &a, &b], now),
        Ok(Place::Refuse(txn::keys_elsewhere("WATCH")))
    );
    assert!(!t.keep(), "nothing pinned, nothing kept");
    t.refused();
    offer(&mut t, &mut p, &["MULTI"], now).unwrap_err();
    assert_eq!(
        offer(&mut t, &mut p, &["MGET", &a, &a], now),
        Ok(Place::Open(0)),
        "keys of one server go together, whole"
    );
    t.pinned(CONN, 0, "MGET");
    assert_eq!(
        offer(&mut t, &mut p, &["EXEC"], now),
        Ok(Place::Send(CONN.token))
    );
}

#[test]
fn a_transaction_with_no_server_yet_ends_here() {
    let (mut p, now) = (pool(), Instant::now());
    let mut t = Txn::default();
    assert_eq!(
        offer(&mut t, &mut p, &["EXEC"], now),
        here("-ERR EXEC without MULTI\r\n")
    );
    assert_eq!(
        offer(&mut t, &mut p, &["DISCARD"], now),
        here("-ERR DISCARD without MULTI\r\n")
    );
    assert_eq!(offer(&mut t, &mut p, &["UNWATCH"], now), here("+OK\r\n"));
    offer(&mut t, &mut p, &["MULTI"], now).unwrap_err();
    assert_eq!(offer(&mut t, &mut p, &["EXEC"], now), here("*0\r\n"));
    assert!(!t.keep());
    offer(&mut t, &mut p, &["MULTI"], now).unwrap_err();
    assert_eq!(offer(&mut t, &mut p, &["DISCARD"], now), here("+OK\r\n"));
    assert!(!t.keep());
}

#[test]
fn keyless_commands_go_to_the_first_server_up() {
    let (mut p, now) = (pool(), Instant::now());
    let mut t = Txn::default();
    offer(&mut t, &mut p, &["MULTI"], now).unwrap_err();
    assert_eq!(offer(&mut t, &mut p, &["PING"], now), Ok(Place::Open(0)));
    p.servers[0].ejected_until = Some(now + Duration::from_secs(60));
    assert_eq!(offer(&mut t, &mut p, &["PING"], now), Ok(Place::Open(1)));
    p.servers[1].ejected_until = Some(now + Duration::from_secs(60));
    p.rebuild(now);
    assert_eq!(offer(&mut t, &mut p, &["PING"], now), Ok(Place::NoServer));
    assert_eq!(keyless_server(&mut p, now), None);
}

#[test]
fn which_requests_a_transaction_takes() {
    let c = |args: &[&str]| cmd(args).0;
    assert!(!concerns(&c(&["GET", "k"]), false), "the common request");
    assert!(concerns(&c(&["GET", "k"]), true), "any command inside one");
    assert!(concerns(&c(&["MULTI"]), false));
    assert!(concerns(&c(&["WATCH", "k"]), false));
    assert!(!concerns(&c(&["QUIT"]), true), "QUIT closes, in one or not");
    let Ok(Parse::Done(mc)) = Protocol::Memcache.parse_request(b"get k\r\n", &Limits::default())
    else {
        panic!("memcached get parses");
    };
    assert!(!concerns(&mc, true));
}
