//! What a streamed reply's connections decide between them, on a table of
//! connections built on socket pairs (nothing is written to them): when
//! the server is read again as its client drains (`client_drained`), when
//! the rest of a paused reply moves out of the way (`spool_rest`), which
//! clients are stalled (`stalled_readers`), and when a connection fed from
//! a spool is refilled (`Server::refills`).

use super::*;
use crate::net::Stream;
use crate::proto::redis::local::Session;
use crate::proto::{Limits, Op, Parse, Protocol};
use crate::stats::slowlog::KeyPrefix;
use crate::worker::conn::{Client, Feed, ReplySlot, Server};
use crate::worker::rep_stream::RepStream;
use crate::worker::spool::{Spool, SpoolReader};
use crate::worker::{STREAM_HIGH, STREAM_STALL};
use std::time::Duration;

const CID: u64 = 40;
const SID: u64 = 9;

fn get_op() -> Op {
    let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    let Ok(Parse::Done(r)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
        panic!("request parses");
    };
    r.op
}

fn waiter(token: Token, id: u64) -> Option<Waiter> {
    Some(Waiter::Client {
        token,
        id,
        seq: 0,
        frag: None,
    })
}

/// A client (id [`CID`]) and a connected server connection (id [`SID`])
/// streaming a reply to it from `since`, its request the server's first
/// in flight; their tokens.
fn streaming(conns: &mut slab::Slab<Conn>, since: Instant) -> (Token, Token) {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let mut c = Client::new(
        Stream::Unix(sock),
        CID,
        0,
        Session::new(1, None, false),
        since,
    );
    c.push_reply(ReplySlot::default());
    let ct = Token(conns.insert(Conn::Client(Box::new(c))));
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let mut s = Server::new(Stream::Unix(sock), SID, (0, 0, 0), since, false);
    s.set_connected();
    let _ = s.queue(
        waiter(ct, CID),
        get_op(),
        |w| w.extend_from_slice(b"GET"),
        since,
        KeyPrefix::new(b"k"),
    );
    s.set_rstream(Some(RepStream::new(ClientRef::new(ct, CID), None, since)));
    let st = Token(conns.insert(Conn::Server(Box::new(s))));
    (ct, st)
}

/// The server's reply pauses for its lagging client.
fn pause(conns: &mut slab::Slab<Conn>, ct: Token, st: Token) {
    let rs = conns
        .server_mut(st.0)
        .and_then(|s| s.rstream_mut())
        .expect("streaming");
    assert!(rs.pause_if_lagging(STREAM_HIGH + 1, false));
    let c = conns.client_mut(ct.0).expect("client");
    c.wait_on_reply(ServerRef::new(st, SID));
}

fn blocked(conns: &slab::Slab<Conn>, st: Token) -> bool {
    conns
        .server(st.0)
        .and_then(|s| s.rstream())
        .expect("streaming")
        .is_blocked()
}

#[test]
fn a_drained_client_lets_its_paused_server_read_again_once() {
    let mut conns = slab::Slab::new();
    let (ct, st) = streaming(&mut conns, Instant::now());
    assert_eq!(client_drained(&mut conns, ct), None, "nothing waits");
    pause(&mut conns, ct, st);
    assert!(blocked(&conns, st));
    assert_eq!(
        client_drained(&mut conns, ct),
        Some(st),
        "its output is empty"
    );
    assert!(!blocked(&conns, st));
    assert_eq!(conns.client(ct.0).and_then(|c| c.rstream_from()), None);
    assert_eq!(client_drained(&mut conns, ct), None, "once");
}

#[test]
fn a_drained_client_is_no_longer_stalled() {
    let mut conns = slab::Slab::new();
    let long_ago = Instant::now() - 2 * STREAM_STALL;
    let (ct, st) = streaming(&mut conns, long_ago);
    pause(&mut conns, ct, st);
    let client = ClientRef::new(ct, CID);
    assert_eq!(stalled_readers(&conns, Instant::now()), vec![client]);
    assert_eq!(client_drained(&mut conns, ct), Some(st));
    assert_eq!(stalled_readers(&conns, Instant::now()), vec![]);
}

#[test]
fn a_client_reading_none_of_its_paused_reply_is_stalled_after_the_bound() {
    let mut conns = slab::Slab::new();
    let t = Instant::now();
    let (ct, st) = streaming(&mut conns, t);
    let late = t + STREAM_STALL + Duration::from_millis(1);
    assert_eq!(stalled_readers(&conns, late), vec![], "not paused");
    pause(&mut conns, ct, st);
    assert_eq!(stalled_readers(&conns, t + STREAM_STALL), vec![], "not yet");
    assert_eq!(stalled_readers(&conns, late), vec![ClientRef::new(ct, CID)]);
}

#[test]
fn a_paused_reply_moves_out_of_the_way_only_for_someone_else() {
    let mut conns = slab::Slab::new();
    let t = Instant::now();
    let (ct, st) = streaming(&mut conns, t);
    assert_eq!(spool_rest(&mut conns, st), None, "not paused");
    pause(&mut conns, ct, st);
    assert_eq!(spool_rest(&mut conns, st), None, "nobody else waits");
    // The same client's next request does not count as someone else.
    let s = conns.server_mut(st.0).expect("server");
    let _ = s.queue(
        waiter(ct, CID),
        get_op(),
        |w| w.extend_from_slice(b"GET"),
        t,
        KeyPrefix::new(b"k"),
    );
    assert_eq!(spool_rest(&mut conns, st), None);
    // Another client's does.
    let s = conns.server_mut(st.0).expect("server");
    let _ = s.queue(
        waiter(Token(99), 7),
        get_op(),
        |w| w.extend_from_slice(b"GET"),
        t,
        KeyPrefix::new(b"k"),
    );
    assert_eq!(spool_rest(&mut conns, st), Some(st));
    assert!(!blocked(&conns, st), "read on");
    let rs = conns
        .server(st.0)
        .and_then(|s| s.rstream())
        .expect("streaming");
    assert_eq!(
        rs.dest(),
        Dest::Hold(ClientRef::new(ct, CID)),
        "held for its slot"
    );
    assert_eq!(conns.client(ct.0).and_then(|c| c.rstream_from()), None);
    assert_eq!(spool_rest(&mut conns, st), None, "once");
}

#[test]
fn a_connection_fed_from_a_spool_is_refilled_once_connected() {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let now = Instant::now();
    let mut s = Server::new(Stream::Unix(sock), SID, (0, 0, 0), now, true);
    assert_eq!(s.refills(), None, "not fed");
    let spool = Spool::default();
    s.set_feed(Some(Feed {
        client: Token(1),
        client_id: CID,
        seq: 0,
        at: SpoolReader::new(&spool),
    }));
    assert_eq!(s.refills(), None, "still connecting");
    s.set_connected();
    assert_eq!(s.refills(), Some(true), "all written");
    let _ = s.queue(
        None,
        get_op(),
        |w| w.extend_from_slice(b"GET"),
        now,
        KeyPrefix::new(b"k"),
    );
    assert_eq!(s.refills(), Some(false), "some left to write");
    s.set_feed(None);
    assert_eq!(s.refills(), None);
}

fn region() -> crate::stats::shm::Region {
    let names = crate::stats::carry::Names {
        pools: vec!["p".into()],
        servers: vec![vec!["a".into()]],
        routes: vec![Vec::new()],
    };
    crate::stats::shm::Region::new(names.layout(), 1).expect("stats region")
}

fn dest(conns: &slab::Slab<Conn>, st: Token) -> Option<Dest> {
    conns.server(st.0)?.rstream().map(|r| r.dest())
}

#[test]
fn a_piece_passes_to_its_client_and_a_client_gone_drops_the_rest() {
    let mut conns = slab::Slab::new();
    let (ct, st) = streaming(&mut conns, Instant::now());
    let mut bufs = BufPool::default();
    let mut dirty = Dirty::default();
    let to = ClientRef::new(ct, CID);
    let passed = pass_piece(&mut conns, &mut bufs, &mut dirty, st, to, 0, false);
    assert_eq!(passed, (0, None), "nothing lags");
    assert_eq!(dirty.take_clients(), vec![ct], "its output to be written");
    assert_eq!(dest(&conns, st), Some(Dest::Pass(to)));
    let other = ClientRef::new(ct, CID + 1);
    let passed = pass_piece(&mut conns, &mut bufs, &mut dirty, st, other, 0, false);
    assert_eq!(passed, (0, None));
    assert!(dirty.take_clients().is_empty());
    assert_eq!(dest(&conns, st), Some(Dest::Drop), "the rest dropped");
    // Held for its slot: a client gone drops the rest too.
    let (ct, st) = streaming(&mut conns, Instant::now());
    let gone = ClientRef::new(ct, CID + 1);
    assert_eq!(hold_piece(&mut conns, st, gone, 0, |_| 0), None);
    assert_eq!(dest(&conns, st), Some(Dest::Drop));
}

#[test]
fn a_reply_streamed_whole_leaves_its_connection_and_its_client_goes_on() {
    let region = region();
    let stats = region.slot(0);
    let mut bufs = BufPool::default();
    let mut dirty = Dirty::default();
    let mut conns = slab::Slab::new();
    let (ct, st) = streaming(&mut conns, Instant::now());
    let end = reply_ended(&mut conns, &stats, &mut bufs, &mut dirty, st).expect("ended");
    assert_eq!((end.pool, end.server), (0, 0));
    assert!(
        matches!(end.front.waiter, Waiter::Client { token, id: CID, seq: 0, .. } if token == ct)
    );
    assert!(matches!(end.then, Then::Drained(0)), "its head answered");
    assert_eq!(dirty.take_clients(), vec![ct]);
    let s = conns.server(st.0).expect("server");
    assert!(s.rstream().is_none() && s.inflight().is_empty());
    assert!(conns.client(ct.0).is_some_and(|c| c.head().is_none()));
    let again = reply_ended(&mut conns, &stats, &mut bufs, &mut dirty, st);
    assert!(again.is_none(), "once");
    // Its client gone: nothing follows for it.
    let (ct, st) = streaming(&mut conns, Instant::now());
    conns.remove(ct.0);
    let end = reply_ended(&mut conns, &stats, &mut bufs, &mut dirty, st).expect("ended");
    assert!(matches!(end.then, Then::Nothing));
    assert!(dirty.take_clients().is_empty());
}
