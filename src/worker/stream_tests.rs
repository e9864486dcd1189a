//! How a streamed request's bytes pass from its client to its server
//! connection (`stream_out`), on a table of connections built on socket
//! pairs (nothing is written to them) and a stats region of one slot.

use super::*;
use crate::net::Stream;
use crate::proto::redis::local::Session;
use crate::proto::{Limits, Parse, Protocol};
use crate::stats::carry::Names;
use crate::stats::shm::Region;
use crate::stats::slowlog::KeyPrefix;
use crate::worker::conn::{Client, Server};

const CID: u64 = 40;

/// A client whose input holds `input` (read from its socket), and a
/// server connection its streamed request goes on (the connection's last
/// request), `head` queued on it.
fn streaming(conns: &mut slab::Slab<Conn>, input: &[u8], head: &[u8]) -> (Token, ServerRef) {
    let now = Instant::now();
    let (sock, mut peer) = mio::net::UnixStream::pair().expect("socket pair");
    let mut c = Client::new(
        Stream::Unix(sock),
        CID,
        0,
        Session::new(1, None, false),
        now,
    );
    std::io::Write::write_all(&mut peer, input).expect("written");
    let mut bufs = crate::worker::conn::BufPool::default();
    c.read_input(&mut bufs, 64 * 1024).expect("read");
    assert_eq!(c.input().len(), input.len());
    let ct = Token(conns.insert(Conn::Client(Box::new(c))));
    let bytes = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nabcdef\r\n";
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
        panic!("request parses");
    };
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let mut s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), now, true);
    let waiter = Waiter::Client {
        token: ct,
        id: CID,
        seq: 0,
        frag: None,
    };
    let _ = s.queue(
        Some(waiter),
        req.op,
        |w| w.extend_from_slice(head),
        now,
        KeyPrefix::new(b"k"),
    );
    let st = Token(conns.insert(Conn::Server(Box::new(s))));
    (ct, ServerRef::new(st, 9))
}

fn region() -> Region {
    let names = Names {
        pools: vec!["p".into()],
        servers: vec![vec!["a".into()]],
        routes: vec![Vec::new()],
    };
    Region::new(names.layout(), 1).expect("stats region")
}

/// `stream_out` of `n` bytes of the client's input.
fn pass(
    conns: &mut slab::Slab<Conn>,
    stats: &StatsSlot,
    dirty: &mut Dirty,
    ct: Token,
    to: ServerRef,
    n: usize,
) -> bool {
    stream_out(conns, stats, dirty, ct, to, Passing::Input(n))
}

#[test]
fn a_clients_bytes_pass_to_its_server_and_mark_it_to_write() {
    let mut conns = slab::Slab::new();
    let head = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\n";
    let (ct, to) = streaming(&mut conns, b"abcdef\r\n", head);
    let region = region();
    let stats = region.slot(0);
    let mut dirty = Dirty::default();
    // The head was queued already: the connection is not marked again.
    assert!(!pass(&mut conns, &stats, &mut dirty, ct, to, 4));
    assert!(dirty.take_servers().is_empty());
    let s = conns.server(to.token.0).expect("server");
    assert!(s.wbuf().bytes().ends_with(b"$6\r\nabcd"));
    assert_eq!(
        s.inflight().back().map(|f| f.len),
        Some(24 + 4),
        "the request's length"
    );
    // Its input is the caller's to consume.
    assert_eq!(conns.client(ct.0).map(|c| c.input().len()), Some(8));
    // A connection gone, or another one in its slot: nothing passes.
    let stale = ServerRef::new(to.token, 8);
    assert!(!pass(&mut conns, &stats, &mut dirty, ct, stale, 4));
}

#[test]
fn a_connection_with_nothing_queued_is_marked_and_a_full_one_says_so() {
    let region = region();
    let stats = region.slot(0);
    let mut dirty = Dirty::default();
    // Nothing queued yet (the head went out): marked to be written.
    let mut conns = slab::Slab::new();
    let (ct, to) = streaming(&mut conns, b"abcdef\r\n", b"");
    assert!(!pass(&mut conns, &stats, &mut dirty, ct, to, 8));
    assert_eq!(dirty.take_servers(), vec![to.token]);
    // At the high mark, then past it.
    let mut conns = slab::Slab::new();
    let (ct, to) = streaming(&mut conns, b"abcdef\r\n", &vec![b'x'; STREAM_HIGH - 1]);
    assert!(!pass(&mut conns, &stats, &mut dirty, ct, to, 1));
    assert!(pass(&mut conns, &stats, &mut dirty, ct, to, 1));
    assert!(dirty.take_servers().is_empty());
}

/// A client at a new table's first token whose streamed request is `data`
/// (its head found with a threshold of 8 bytes): an MSET's reply slot is
/// its reply 0.
fn client_streaming(data: &[u8]) -> slab::Slab<Conn> {
    let limits = Limits::default();
    let head = (1..=data.len())
        .find_map(|n| redis::stream_head(&data[..n], &limits, 8))
        .expect("a streamed head");
    let machine = StreamMachine::new(&head, limits, 8);
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let now = Instant::now();
    let mut c = Client::new(
        Stream::Unix(sock),
        CID,
        0,
        Session::new(1, None, false),
        now,
    );
    let rs = match head.kind {
        StreamKind::Pairs => {
            let (slot, _) = ReqStream::pairs_slot(&head);
            c.push_reply(slot);
            ReqStream::pairs(machine, 0)
        }
        _ => ReqStream::single(machine, None),
    };
    c.start_stream(rs);
    let mut conns = slab::Slab::new();
    conns.insert(Conn::Client(Box::new(c)));
    conns
}

#[test]
fn a_failed_mset_fails_the_pairs_it_did_not_send() {
    let mset = b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$10\r\n0123456789\r\n$1\r\nb\r\n$1\r\nx\r\n";
    let conns = client_streaming(mset);
    let u = unsent_pairs(&conns, Token(0)).expect("pairs unsent");
    assert_eq!(u.pool, 0);
    assert!(matches!(u.op, crate::proto::Op::Redis(o) if o.cmd.name() == "MSET"));
    let frag = |i| ReplyTo::new(Token(0), CID, Some(0), Some(i));
    assert_eq!(u.pairs, vec![frag(0), frag(1)]);
    assert_eq!(unsent_pairs(&conns, Token(1)), None, "no such client");
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
    let conns = client_streaming(set);
    assert_eq!(unsent_pairs(&conns, Token(0)), None, "no pairs");
}

#[test]
fn held_bytes_pass_until_the_server_holds_enough() {
    let eval = b"*4\r\n$4\r\nEVAL\r\n$10\r\n0123456789\r\n$1\r\n1\r\n$1\r\nk\r\n";
    let limits = Limits::default();
    let head = (1..=eval.len())
        .find_map(|n| redis::stream_head(&eval[..n], &limits, 8))
        .expect("a streamed head");
    assert_eq!(head.kind, StreamKind::Spool);
    let held = &eval[..head.req.len];
    let region = region();
    let stats = region.slot(0);
    let mut dirty = Dirty::default();
    for queued in [0, STREAM_HIGH] {
        let mut conns = slab::Slab::new();
        let (ct, to) = streaming(&mut conns, b"$1\r\n", &vec![b'x'; queued]);
        let mut rs = ReqStream::held(StreamMachine::new(&head, limits, 8), held);
        rs.routed(Some(to));
        conns.client_mut(ct.0).expect("client").start_stream(rs);
        let wbuf = |conns: &slab::Slab<Conn>| conns.server(to.token.0).map(|s| s.wbuf().len());
        if queued == 0 {
            assert_eq!(
                feed_held(&mut conns, &stats, &mut dirty, ct, to),
                HeldFed::Done
            );
            assert_eq!(wbuf(&conns), Some(held.len()), "all passed");
            let stale = ServerRef::new(to.token, 8);
            assert_eq!(
                feed_held(&mut conns, &stats, &mut dirty, ct, stale),
                HeldFed::Done,
                "another connection in its slot"
            );
        } else {
            assert_eq!(
                feed_held(&mut conns, &stats, &mut dirty, ct, to),
                HeldFed::Full
            );
            assert_eq!(wbuf(&conns), Some(STREAM_HIGH), "nothing passed");
        }
    }
}

#[test]
fn input_passes_on_and_a_server_over_its_mark_is_named() {
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
    let limits = Limits::default();
    let head = (1..=set.len())
        .find_map(|n| redis::stream_head(&set[..n], &limits, 8))
        .expect("a streamed head");
    let region = region();
    let stats = region.slot(0);
    let mut dirty = Dirty::default();
    for queued in [0, STREAM_HIGH] {
        let mut conns = slab::Slab::new();
        let (ct, to) = streaming(&mut conns, b"0123456789\r\n", &vec![b'x'; queued]);
        let rs = ReqStream::single(StreamMachine::new(&head, limits, 8), Some(to));
        conns.client_mut(ct.0).expect("client").start_stream(rs);
        let fwd = forward_input(&mut conns, &stats, &mut dirty, ct, 4);
        let input = conns.client(ct.0).map(|c| c.input().len());
        assert_eq!(input, Some(8), "the bytes passed left the input");
        if queued == 0 {
            assert_eq!(fwd, Forwarded::Passed);
        } else {
            assert_eq!(fwd, Forwarded::Over(to.token), "over the high mark");
        }
        let gone = Token(ct.0 + 7);
        assert_eq!(
            forward_input(&mut conns, &stats, &mut dirty, gone, 1),
            Forwarded::Gone
        );
    }
}

#[test]
fn an_mset_pairs_go_on_the_connection_opened_for_their_server_while_open() {
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
    let limits = Limits::default();
    let head = (1..=set.len())
        .find_map(|n| redis::stream_head(&set[..n], &limits, 8))
        .expect("a streamed head");
    let mut conns = slab::Slab::new();
    let (ct, to) = streaming(&mut conns, b"\r\n", b"");
    let rs = ReqStream::pairs(StreamMachine::new(&head, limits, 8), 0);
    conns.client_mut(ct.0).expect("client").start_stream(rs);
    assert_eq!(known_pair_conn(&conns, ct, 0), None, "none opened yet");
    let usage = Usage::Pair {
        server: 0,
        large: false,
    };
    let opened = crate::worker::dedicated::opened;
    assert_eq!(
        opened(&mut conns, ct, to.token, usage),
        Ok((to.token, None))
    );
    assert_eq!(known_pair_conn(&conns, ct, 0), Some(to.token));
    assert_eq!(known_pair_conn(&conns, ct, 1), None, "another server's");
    conns.remove(to.token.0);
    assert_eq!(known_pair_conn(&conns, ct, 0), None, "closed once answered");
    assert_eq!(
        opened(&mut conns, ct, to.token, usage),
        Err(ServerFault::NoServer)
    );
}

/// A pool of two Redis servers from configuration text (`extra`: more
/// of its keys).
fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "p:\n  listen: 127.0.0.1:22999\n  redis: true\n{extra}  servers:\n    - 127.0.0.1:30001:1\n    - 127.0.0.1:30002:1\n"
    );
    let c = crate::config::Config::from_str(&yaml, std::path::Path::new("t.yml"))
        .expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

#[test]
fn a_request_streams_where_it_can_be_routed_as_it_arrives() {
    let limits = Limits::default();
    let head = |data: &[u8]| {
        (1..=data.len())
            .find_map(|n| redis::stream_head(&data[..n], &limits, 8))
            .expect("a streamed head")
    };
    let set = head(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n");
    // A script before its key: not routed until the key is read.
    let eval = head(b"*4\r\n$4\r\nEVAL\r\n$10\r\n0123456789\r\n$1\r\n1\r\n$1\r\nk\r\n");
    assert_eq!(eval.kind, StreamKind::Spool);
    let mut conns = slab::Slab::new();
    let (ct, _) = streaming(&mut conns, b"\r\n", b"");
    let c = conns.client(ct.0).expect("client");
    let plain = pool("");
    assert!(streams_here(c, &plain, false, &set));
    assert!(streams_here(c, &plain, true, &set), "no migration: true");
    assert!(streams_here(c, &plain, false, &eval));
    let cluster = pool("  redis_cluster: true\n");
    assert!(streams_here(c, &cluster, false, &set), "routed by its slot");
    assert!(!streams_here(c, &cluster, false, &eval), "its slot unknown");
}

#[test]
fn a_connection_carrying_a_streamed_request_names_its_client() {
    let mut conns = slab::Slab::new();
    let (ct, to) = streaming(&mut conns, b"\r\n", b"");
    assert_eq!(stream_to(&mut conns, to.token, ct, CID), Some(to));
    let s = conns.server(to.token.0).expect("server");
    assert!(s
        .stream()
        .is_some_and(|ss| ss.client == ct && ss.client_id == CID));
    assert_eq!(stream_to(&mut conns, Token(9), ct, CID), None, "gone");
}

/// The head of `data`, a request whose last argument streams (over 8
/// bytes).
fn head_of(data: &[u8]) -> StreamHead {
    let limits = Limits::default();
    (1..=data.len())
        .find_map(|n| redis::stream_head(&data[..n], &limits, 8))
        .expect("a streamed head")
}

#[test]
fn a_request_with_its_key_in_its_head_goes_to_the_keys_server_on_its_own() {
    let data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
    let head = head_of(data);
    let bytes = &data[..head.req.len];
    let now = Instant::now();
    let mut p = pool("");
    let server = pool("").key_server(b"k", head.req.op, CID, now);
    assert!(server.is_some());
    let d = single_plan(&mut p, 0, CID, &head, bytes, now);
    assert_eq!((d.pool, d.server, d.op), (0, server, head.req.op));
    assert_eq!(
        (d.conn, d.usage, d.note),
        (None, Usage::Stream, Some(&b"k"[..]))
    );
    assert!(matches!(d.write, Sent::Bytes(b) if b == bytes), "its head");
    assert!(
        matches!(d.reply, Reply::New { ref slot, noreply: false } if slot.redirect.is_none()),
        "nothing kept outside a cluster"
    );
    let mut cluster = pool("  redis_cluster: true\n");
    let d = single_plan(&mut cluster, 0, CID, &head, bytes, now);
    assert!(
        matches!(d.reply, Reply::New { ref slot, .. } if slot.redirect.is_some()),
        "kept to follow a redirection"
    );
}

#[test]
fn a_held_request_goes_to_its_keys_server_once_the_key_is_read() {
    let data = b"*4\r\n$4\r\nEVAL\r\n$10\r\n0123456789\r\n$1\r\n1\r\n$1\r\nk\r\n";
    let head = head_of(data);
    let mut conns = slab::Slab::new();
    let (ct, _) = streaming(&mut conns, b"\r\n", b"");
    let now = Instant::now();
    let mut pools = vec![pool("")];
    assert!(
        spool_plan(&conns, &mut pools, ct, b"k", now).is_none(),
        "not streaming"
    );
    let machine = StreamMachine::new(&head, Limits::default(), 8);
    let rs = ReqStream::held(machine, &data[..head.req.len]);
    conns.client_mut(ct.0).expect("client").start_stream(rs);
    let d = spool_plan(&conns, &mut pools, ct, b"k", now).expect("a plan");
    assert_eq!(d.server, pool("").server_for(b"k", now));
    assert_eq!((d.op, d.usage, d.conn), (head.req.op, Usage::Stream, None));
    assert!(matches!(d.write, Sent::Bytes(b"")), "the held bytes follow");
    assert!(
        spool_plan(&conns, &mut pools, Token(7), b"k", now).is_none(),
        "gone"
    );
}

#[test]
fn an_mset_pair_is_taken_off_its_input_and_goes_on_its_servers_connection() {
    let data = b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
    let head = head_of(data);
    assert_eq!(head.kind, StreamKind::Pairs);
    let mut conns = slab::Slab::new();
    let pair_bytes = b"$1\r\na\r\n$1\r\n1\r\nrest";
    let (ct, to) = streaming(&mut conns, pair_bytes, b"");
    let pair = PairOut {
        index: 1,
        key: 4..5,
        cmd: b"MSET a 1".to_vec(),
        len: 14,
        large: false,
    };
    assert_eq!(take_pair(&mut conns, ct, &pair), None, "not streaming");
    let machine = StreamMachine::new(&head, Limits::default(), 8);
    let rs = ReqStream::pairs(machine, 3);
    conns.client_mut(ct.0).expect("client").start_stream(rs);
    let (taken, key) = take_pair(&mut conns, ct, &pair).expect("a pair");
    assert_eq!(key, b"a");
    let reply_to = ReplyTo::new(ct, CID, Some(3), Some(1));
    let want = PairTo {
        pool: 0,
        op: head.req.op,
        to: reply_to,
    };
    assert_eq!(taken, want);
    let c = conns.client(ct.0).expect("client");
    assert_eq!(c.input().bytes(), b"rest", "the pair's bytes are taken");
    let now = Instant::now();
    let mut p = pool("");
    let server = pool("").server_for(b"a", now).expect("a server");
    let d = pair_plan(&conns, &mut p, &taken, &key, &pair, now);
    assert_eq!((d.server, d.conn, d.note), (Some(server), None, None));
    assert_eq!(
        d.usage,
        Usage::Pair {
            server,
            large: false
        }
    );
    assert!(matches!(d.reply, Reply::At(r) if r == reply_to));
    assert!(matches!(d.write, Sent::Bytes(b"MSET a 1")));
    let rs = conns
        .client_mut(ct.0)
        .and_then(|c| c.stream_mut())
        .expect("stream");
    rs.set_pair_conn(server, to);
    let d = pair_plan(&conns, &mut p, &taken, &key, &pair, now);
    assert_eq!(d.conn, Some(to.token), "the connection it opened before");
}
