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
