//! What a request on a connection of its own is planned as and how its
//! connection is named once opened, on connections built on socket pairs
//! and pools from configuration text.

use super::*;
use crate::net::Stream;
use crate::proto::redis::local::Session;
use crate::proto::{Limits, Parse, Protocol};
use crate::worker::conn::{Client, Server};
use crate::worker::pool::PoolRt;

/// A client (id 10) and a server connection (id 9) in a table.
fn table() -> (Slab<Conn>, Token, Token) {
    let mut conns = Slab::new();
    let now = Instant::now();
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let c = Client::new(Stream::Unix(sock), 10, 0, Session::new(1, None, false), now);
    let ct = Token(conns.insert(Conn::Client(Box::new(c))));
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), now, true);
    let st = Token(conns.insert(Conn::Server(Box::new(s))));
    (conns, ct, st)
}

#[test]
fn a_blocking_commands_connection_blocks_its_client() {
    let (mut conns, ct, st) = table();
    assert_eq!(opened(&mut conns, ct, st, Usage::Blocking), Ok((st, None)));
    let r = ServerRef::new(st, 9);
    assert_eq!(
        conns.client(ct.0).map(|c| c.blocked().to_vec()),
        Some(vec![r])
    );
    assert_eq!(
        opened(&mut conns, ct, Token(5), Usage::Blocking),
        Err(ServerFault::NoServer),
        "a connection gone"
    );
}

#[test]
fn a_streamed_requests_connection_is_named_by_what_follows() {
    let (mut conns, ct, st) = table();
    assert_eq!(opened(&mut conns, ct, st, Usage::Stream), Ok((st, None)));
    assert!(conns.client(ct.0).is_some_and(|c| c.blocked().is_empty()));
    assert!(Usage::Stream.streams());
    assert!(!Usage::Blocking.streams());
    assert!(Usage::Pair {
        server: 0,
        large: true
    }
    .streams());
    assert!(!Usage::Pair {
        server: 0,
        large: false
    }
    .streams());
}

#[test]
fn a_blocking_command_goes_whole_to_its_keys_server() {
    let yaml = "p:\n  listen: 127.0.0.1:22999\n  redis: true\n  servers:\n    - 127.0.0.1:30001:1\n    - 127.0.0.1:30002:1\n";
    let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
        .expect("config parses");
    let mut p = PoolRt::new(&c.pools[0], &[]);
    let bytes = b"*3\r\n$5\r\nBLPOP\r\n$4\r\nlist\r\n$1\r\n0\r\n";
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
        panic!("request parses");
    };
    let now = Instant::now();
    let server = PoolRt::new(&c.pools[0], &[]).key_server(b"list", req.op, 10, now);
    assert!(server.is_some());
    let at = crate::worker::conn::Origin {
        token: Token(3),
        client_id: 10,
        pool: 0,
    };
    let d = super::super::blocking::plan(&mut p, at, &req, bytes, now);
    assert_eq!((d.pool, d.server, d.op), (0, server, req.op));
    assert_eq!((d.conn, d.usage, d.note), (None, Usage::Blocking, None));
    assert!(matches!(d.reply, Reply::New { noreply: false, .. }));
    assert!(matches!(d.write, Sent::Request(_, b) if b == bytes));
}

#[test]
fn a_subscribers_connection_carries_its_pushes() {
    let (mut conns, ct, st) = table();
    assert_eq!(opened(&mut conns, ct, st, Usage::Push), Ok((st, None)));
    let s = conns.server(st.0).expect("server");
    assert_eq!(
        s.push_to(),
        Some(crate::worker::handle::ClientRef::new(ct, 10))
    );
    let subs = conns.client(ct.0).and_then(|c| c.subs()).expect("subs");
    assert_eq!(subs.conn(0), Some(ServerRef::new(st, 9)));
    assert_eq!(
        opened(&mut conns, ct, ct, Usage::Push),
        Err(ServerFault::NoServer),
        "a client"
    );
}

#[test]
fn a_failure_to_open_is_counted_told_or_not_said_by_use() {
    assert_eq!(Usage::Blocking.failed(), Failed::Counted);
    assert_eq!(Usage::Stream.failed(), Failed::Counted);
    let pair = Usage::Pair {
        server: 1,
        large: false,
    };
    assert_eq!(pair.failed(), Failed::Counted);
    assert_eq!(Usage::Pin { name: "GET" }.failed(), Failed::Told);
    assert_eq!(Usage::Push.failed(), Failed::Silent);
    assert!(!Usage::Pin { name: "GET" }.streams());
    assert!(!Usage::Push.streams());
}

#[test]
fn a_transaction_with_nothing_in_it_goes_when_its_connection_fails() {
    let (mut conns, ct, _) = table();
    if let Some(c) = conns.client_mut(ct.0) {
        c.set_txn(Some(Box::default()));
    }
    unsent(&mut conns, ct, Usage::Blocking);
    assert!(conns.client(ct.0).is_some_and(|c| c.txn().is_some()));
    unsent(&mut conns, ct, Usage::Pin { name: "WATCH" });
    assert!(conns.client(ct.0).is_some_and(|c| c.txn().is_none()));
}
