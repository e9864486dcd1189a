//! `ReqStream` on real request bytes, without sockets: what it asks the
//! worker to do, what it holds and consumes, when the client pauses.

use super::*;
use crate::proto::redis::stream_head;
use crate::proto::Limits;
use mio::Token;

/// The threshold the heads are found with (small, so that the vectors are).
const T: usize = 8;

fn limits() -> Limits {
    Limits {
        max_value: 4096,
        max_keys: 64,
        pre_auth: false,
    }
}

/// The head of `data` (read up to its large argument's first value byte)
/// with its machine, and a buffer holding the rest of `data`.
fn start(data: &[u8]) -> (StreamHead, StreamMachine, Buffer) {
    let head = (1..=data.len())
        .find_map(|n| stream_head(&data[..n], &limits(), T))
        .expect("a streamed head");
    let machine = StreamMachine::new(&head, limits(), T);
    let mut input = Buffer::with_capacity(0);
    input.extend(&data[head.req.len..]);
    (head, machine, input)
}

fn server(n: usize) -> ServerRef {
    ServerRef::new(Token(n), n as u64 + 100)
}

#[test]
fn a_single_key_request_forwards_then_ends_at_its_server() {
    let data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n*1\r\n$4\r\nPING\r\n";
    let (_, m, mut input) = start(data);
    let mut rs = ReqStream::single(m, Some(server(1)));
    assert_eq!(rs.next(&mut input), ReqAction::Forward(12));
    // The worker consumes what it forwards.
    input.consume(12);
    assert_eq!(rs.next(&mut input), ReqAction::Done(Some(server(1))));
    assert_eq!(
        input.bytes(),
        b"*1\r\n$4\r\nPING\r\n",
        "the next request stays"
    );
}

#[test]
fn the_client_pauses_while_its_server_lags() {
    let (_, m, _) = start(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123");
    let mut rs = ReqStream::single(m, Some(server(1)));
    assert!(
        !rs.pause_if_lagging(STREAM_HIGH),
        "at the mark: not lagging"
    );
    assert!(!rs.is_blocked());
    assert!(rs.pause_if_lagging(STREAM_HIGH + 1));
    assert!(rs.is_blocked());
    assert!(rs.resume(), "drained: read again");
    assert!(!rs.resume(), "once");
    // Its server lost: the client reads again, the rest is dropped.
    rs.pause();
    assert!(!rs.server_lost(server(2)), "another connection");
    assert!(rs.server_lost(server(1)));
    assert_eq!(rs.server(), None);
    // Bytes dropped never pause the client.
    assert!(!rs.pause_if_lagging(usize::MAX));
}

#[test]
fn a_script_is_held_until_its_key_then_fed_first() {
    let data = b"*5\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n";
    let (head, m, mut input) = start(data);
    let mut rs = ReqStream::held(m, &data[..head.req.len]);
    assert_eq!(rs.feed(0), FeedStep::Pass(head.req.len), "held: the head");
    // Held up to the key and through it.
    assert_eq!(rs.next(&mut input), ReqAction::Route(b"k".to_vec()));
    assert_eq!(input.bytes(), b"$1\r\nv\r\n");
    let held = rs.held_mut().map_or(0, |h| h.len());
    assert_eq!(
        held,
        data.len() - 7,
        "everything before what follows the key"
    );
    rs.routed(Some(server(3)));
    assert_eq!(rs.next(&mut input), ReqAction::FeedHeld(server(3)));
    assert_eq!(
        rs.feed(STREAM_HIGH),
        FeedStep::Full,
        "no room on the server"
    );
    assert_eq!(rs.feed(STREAM_HIGH - 5), FeedStep::Pass(5));
    while let FeedStep::Pass(n) = rs.feed(0) {
        rs.held_mut().unwrap().consume(n);
    }
    assert_eq!(rs.feed(0), FeedStep::Done);
    assert_eq!(rs.next(&mut input), ReqAction::Forward(7));
    input.consume(7);
    assert_eq!(rs.next(&mut input), ReqAction::Done(Some(server(3))));
}

#[test]
fn a_script_whose_key_finds_no_server_is_dropped() {
    let data = b"*5\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n";
    let (head, m, mut input) = start(data);
    let mut rs = ReqStream::held(m, &data[..head.req.len]);
    assert_eq!(rs.next(&mut input), ReqAction::Route(b"k".to_vec()));
    rs.routed(None);
    assert!(rs.held_mut().is_none(), "the held bytes dropped");
    assert_eq!(rs.feed(0), FeedStep::Done);
    assert_eq!(rs.next(&mut input), ReqAction::Forward(7));
    input.consume(7);
    assert_eq!(rs.next(&mut input), ReqAction::Done(None));
}

#[test]
fn a_bad_numkeys_is_refused_and_the_rest_dropped() {
    let data = b"*4\r\n$4\r\nEVAL\r\n$10\r\nreturn 1;;\r\n$1\r\n0\r\n$1\r\nx\r\n";
    let (head, m, mut input) = start(data);
    let mut rs = ReqStream::held(m, &data[..head.req.len]);
    let ReqAction::Refused(reply) = rs.next(&mut input) else {
        panic!("refused");
    };
    assert!(reply.starts_with(b"-ERR EVAL with numkeys 0"));
    assert!(rs.held_mut().is_none());
    assert_eq!(input.bytes(), b"$1\r\nx\r\n", "refused bytes consumed");
    assert_eq!(rs.next(&mut input), ReqAction::Forward(7));
    input.consume(7);
    assert_eq!(rs.next(&mut input), ReqAction::Done(None));
}

#[test]
fn an_mset_goes_pair_by_pair_on_a_connection_per_server() {
    let data = b"*7\r\n$4\r\nMSET\r\n$1\r\na\r\n$10\r\n0123456789\r\n$1\r\nb\r\n$1\r\nx\r\n$2\r\ncc\r\n$9\r\nyyyyyyyyy\r\n";
    let (head, m, mut input) = start(data);
    let (slot, pairs) = ReqStream::pairs_slot(&head);
    assert_eq!(pairs, 3);
    let multi = slot.multi.as_ref().unwrap();
    assert_eq!((multi.frags.len(), multi.remaining), (3, 3));
    assert_eq!(multi.frags[2].keys, vec![2]);
    assert_eq!(multi.mode, MultiMode::Split);
    let mut rs = ReqStream::pairs(m, 7);
    assert_eq!(rs.pairs_seq(), Some(7));
    assert_eq!(rs.pairs_unsent(), 0..3);
    let ReqAction::Pair(p) = rs.next(&mut input) else {
        panic!("pair 0");
    };
    assert_eq!((p.index, p.large), (0, true));
    assert_eq!(&input.bytes()[p.key.clone()], b"a");
    assert_eq!(rs.pairs_unsent(), 1..3);
    input.consume(p.len);
    // Its value streams to the pair's server.
    rs.routed(Some(server(1)));
    rs.set_pair_conn(0, server(1));
    assert_eq!(rs.next(&mut input), ReqAction::Forward(12));
    input.consume(12);
    assert_eq!(rs.next(&mut input), ReqAction::PairEnd(server(1)));
    assert_eq!(rs.server(), None);
    let ReqAction::Pair(p) = rs.next(&mut input) else {
        panic!("pair 1");
    };
    assert_eq!((p.index, p.large), (1, false));
    input.consume(p.len);
    let ReqAction::Pair(p) = rs.next(&mut input) else {
        panic!("pair 2");
    };
    assert_eq!((p.index, p.large), (2, true));
    input.consume(p.len);
    // No server for its value (it failed): the value is dropped, and a
    // pair end without a server asks nothing.
    assert_eq!(rs.next(&mut input), ReqAction::Forward(11));
    input.consume(11);
    assert_eq!(rs.next(&mut input), ReqAction::Done(None));
    // One connection per server, the last one opened.
    assert_eq!(rs.pair_conn(0), Some(server(1)));
    assert_eq!(rs.pair_conn(1), None);
    rs.set_pair_conn(0, server(2));
    assert_eq!(rs.pair_conn(0), Some(server(2)));
}

#[test]
fn a_request_not_sent_pair_by_pair_has_no_pair_state() {
    let (_, m, _) = start(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123");
    let mut rs = ReqStream::single(m, None);
    assert_eq!(rs.pairs_seq(), None);
    assert_eq!(rs.pairs_unsent(), 0..0);
    rs.set_pair_conn(0, server(1));
    assert_eq!(rs.pair_conn(0), None);
    assert_eq!(rs.feed(0), FeedStep::Done, "nothing held");
}
