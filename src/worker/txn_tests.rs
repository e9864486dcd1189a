//! When a transaction's connection is let go (`let_go`), on a table of
//! connections built on a socket pair (nothing is written to it).

use super::*;
use crate::net::Stream;
use crate::proto::{Limits, Parse, Protocol};
use crate::stats::slowlog::KeyPrefix;
use crate::worker::conn::Server;
use crate::worker::transaction::Answer;

/// A connected dedicated connection pinned to client `Token(3)`.
fn pinned(conns: &mut Slab<Conn>) -> ServerRef {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let mut s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), Instant::now(), true);
    s.set_connected();
    s.pin(Some(Token(3)));
    ServerRef::new(Token(conns.insert(Conn::Server(Box::new(s)))), 9)
}

#[test]
fn an_idle_connection_is_closed_at_once() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    assert_eq!(let_go(&mut conns, r), Some(r.token));
}

#[test]
fn a_busy_connection_is_unpinned_and_kept_for_its_replies() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    let bytes = b"*1\r\n$4\r\nEXEC\r\n";
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
        panic!("request parses");
    };
    let s = conns.server_mut(r.token.0).expect("server");
    let _ = s.queue(
        Some(Waiter::Internal),
        req.op,
        |w| w.extend_from_slice(bytes),
        Instant::now(),
        KeyPrefix::new(b""),
    );
    assert_eq!(let_go(&mut conns, r), None);
    assert_eq!(
        conns.server(r.token.0).and_then(|s| s.pinned()),
        None,
        "unpinned"
    );
}

#[test]
fn a_reused_slot_is_not_touched() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    let stale = ServerRef::new(r.token, 8);
    assert_eq!(let_go(&mut conns, stale), None);
    assert_eq!(
        conns.server(r.token.0).and_then(|s| s.pinned()),
        Some(Token(3)),
        "still pinned"
    );
}

/// A client on a socket pair.
fn client() -> Box<crate::worker::client_conn::Client> {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let c =
        crate::worker::client_conn::Client::new(Stream::Unix(sock), 1, 0, session, Instant::now());
    Box::new(c)
}

/// Client `Token(3)` in the table (after the connection `r`), its
/// transaction pinned to `r` with `name` sent on it.
fn client_in(conns: &mut Slab<Conn>, r: ServerRef, name: &str) {
    let mut c = client();
    let mut t = Txn::default();
    let _ = t.pinned(r, 0, name);
    c.set_txn(Some(Box::new(t)));
    while conns.vacant_key() < 3 {
        conns.insert(Conn::Client(client()));
    }
    conns.insert(Conn::Client(c));
}

#[test]
fn the_reply_that_ends_a_transaction_closes_its_connection() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    client_in(&mut conns, r, "UNWATCH");
    assert_eq!(replied(&mut conns, r.token, Token(3)), Some(r.token));
    assert!(conns.client(3).is_some_and(|c| c.txn().is_none()), "ended");
}

#[test]
fn a_reply_inside_a_transaction_keeps_it() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    client_in(&mut conns, r, "WATCH");
    assert_eq!(replied(&mut conns, r.token, Token(3)), None);
    assert!(conns.client(3).is_some_and(|c| c.txn().is_some()), "kept");
    // Another connection's reply does not end it either.
    assert_eq!(replied(&mut conns, Token(1), Token(3)), None);
}

#[test]
fn a_transaction_is_started_where_none_was_and_goes_once_empty() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    client_in(&mut conns, r, "WATCH");
    let c = conns.client_mut(3).expect("client");
    c.set_txn(None);
    let t = get_mut(&mut conns, Token(3)).expect("started");
    assert!(!t.keep(), "nothing in it yet");
    tidy(&mut conns, Token(3));
    assert!(conns.client(3).is_some_and(|c| c.txn().is_none()), "gone");
    assert!(get_mut(&mut conns, Token(7)).is_none(), "no client");
    // One pinned is kept.
    let t = get_mut(&mut conns, Token(3)).expect("started");
    let _ = t.pinned(r, 0, "WATCH");
    tidy(&mut conns, Token(3));
    assert!(conns.client(3).is_some_and(|c| c.txn().is_some()), "kept");
}

#[test]
fn a_connection_opened_for_a_transaction_is_pinned_to_its_client_and_sent_the_multi_first() {
    use crate::worker::dedicated::opened;
    use crate::worker::send_plan::Usage;
    let mut conns = Slab::new();
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let s = Server::new(Stream::Unix(sock), 11, (0, 1, 0), Instant::now(), true);
    let st = Token(conns.insert(Conn::Server(Box::new(s))));
    while conns.vacant_key() < 3 {
        conns.insert(Conn::Client(client()));
    }
    let mut c = client();
    let mut t = Txn::default();
    assert!(
        matches!(t.answer("MULTI"), Answer::Here { .. }),
        "answered here"
    );
    c.set_txn(Some(Box::new(t)));
    conns.insert(Conn::Client(c));
    let usage = Usage::Pin { name: "SET" };
    let Ok((got, Some((multi, _)))) = opened(&mut conns, Token(3), st, usage) else {
        panic!("opened, its MULTI to send first");
    };
    assert_eq!((got, multi), (st, txn::MULTI));
    assert_eq!(conns.server(st.0).and_then(|s| s.pinned()), Some(Token(3)));
    let t = conns.client(3).and_then(|c| c.txn()).expect("kept");
    assert_eq!(
        (t.conn(), t.server()),
        (Some(ServerRef::new(st, 11)), Some(1))
    );
    assert!(
        opened(&mut conns, Token(3), Token(5), usage).is_err(),
        "none there"
    );
}

/// Pools of two servers from configuration text.
fn pools() -> Vec<PoolRt> {
    let yaml = "p:\n  listen: 127.0.0.1:22999\n  redis: true\n  servers:\n    - 127.0.0.1:30001:1\n    - 127.0.0.1:30002:1\n";
    let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
        .expect("config parses");
    vec![PoolRt::new(&c.pools[0], &[])]
}

fn parsed(bytes: &[u8]) -> Request {
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
        panic!("request parses");
    };
    req
}

#[test]
fn a_transactions_first_command_opens_a_connection_pinned_for_it() {
    let mut conns = Slab::new();
    conns.insert(Conn::Client(client()));
    let mut pools = pools();
    let bytes = b"*2\r\n$5\r\nWATCH\r\n$3\r\nfoo\r\n";
    let req = parsed(bytes);
    let now = Instant::now();
    let server = pools[0].key_server(b"foo", req.op, 1, now);
    let d = pulled(&mut conns, &mut pools, Token(0), &req, bytes, now).expect("sent");
    assert_eq!((d.pool, d.server, d.conn), (0, server, None));
    assert_eq!(d.usage, Usage::Pin { name: "WATCH" });
    assert!(matches!(d.reply, Reply::New { noreply: false, .. }));
    assert!(matches!(d.write, Sent::Bytes(b) if b == bytes));
    assert!(conns.client(0).is_some_and(|c| c.txn().is_some()), "kept");
}

#[test]
fn a_pinned_transactions_command_goes_on_its_connection_or_is_refused() {
    let mut conns = Slab::new();
    let r = pinned(&mut conns);
    let mut pools = pools();
    let now = Instant::now();
    let bytes = b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n";
    let req = parsed(bytes);
    let server = pools[0]
        .key_server(b"foo", req.op, 1, now)
        .expect("a server");
    let mut c = client();
    let mut t = Txn::default();
    let _ = t.pinned(r, server, "WATCH");
    c.set_txn(Some(Box::new(t)));
    let ct = Token(conns.insert(Conn::Client(c)));
    let d = pulled(&mut conns, &mut pools, ct, &req, bytes, now).expect("sent");
    assert_eq!((d.server, d.conn), (Some(server), Some(r.token)));
    // A key of the other server's is refused here.
    let other = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| pools[0].key_server(k.as_bytes(), req.op, 1, now) != Some(server))
        .expect("a key elsewhere");
    let bytes = format!("*2\r\n$3\r\nGET\r\n${}\r\n{other}\r\n", other.len());
    let req = parsed(bytes.as_bytes());
    assert!(pulled(&mut conns, &mut pools, ct, &req, bytes.as_bytes(), now).is_none());
    assert!(
        conns.client(ct.0).is_some_and(|c| c.txn().is_some()),
        "kept"
    );
}
