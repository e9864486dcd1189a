//! When a transaction's connection is let go (`let_go`), on a table of
//! connections built on a socket pair (nothing is written to it).

use super::*;
use crate::net::Stream;
use crate::proto::{Limits, Parse, Protocol};
use crate::stats::slowlog::KeyPrefix;
use crate::worker::conn::Server;

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
fn a_connection_opened_for_a_transaction_is_pinned_to_its_client() {
    let mut conns = Slab::new();
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let s = Server::new(Stream::Unix(sock), 11, (0, 0, 0), Instant::now(), true);
    let st = Token(conns.insert(Conn::Server(Box::new(s))));
    assert_eq!(
        pin_opened(&mut conns, st, Token(3)),
        Some(ServerRef::new(st, 11))
    );
    assert_eq!(conns.server(st.0).and_then(|s| s.pinned()), Some(Token(3)));
    assert_eq!(
        pin_opened(&mut conns, Token(5), Token(3)),
        None,
        "none there"
    );
}
