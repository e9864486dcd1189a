//! Tests of when a client is read and parsed (`client_flow.rs`): a
//! `Client` on one end of a socket pair, no worker; refused requests are
//! real protocol bytes through the parser.

use super::*;
use crate::net::Stream;
use crate::proto::redis::local::Session;
use crate::proto::{Limits, Protocol};
use crate::worker::conn::ReplySlot;
use mio::Token;
use std::time::Instant;

fn client() -> Client {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    Client::new(
        Stream::Unix(sock),
        1,
        0,
        Session::new(1, None, false),
        Instant::now(),
    )
}

const CARRY: usize = 1000;

#[test]
fn read_now_unless_held_and_notes_what_is_left_unread() {
    let mut c = client();
    assert!(c.read_now(None, false));
    assert!(!c.must_read_again());
    // Paused by client_max_inflight: left in the socket, read again once
    // the pause ends.
    c.end_pass(0, 0, true);
    assert!(!c.read_now(None, false));
    assert!(!c.must_read_again(), "paused: not yet");
    assert!(c.resume_if_drained(4, 1 << 20));
    assert!(c.must_read_again());
    assert!(c.read_now(None, false));
    assert!(!c.must_read_again());
    // A later parse (not a read) ends a pause: the worker must read, for
    // edge-triggered epoll will not report those bytes again.
    c.end_pass(0, 0, true);
    assert!(!c.read_now(None, false));
    c.end_pass(13, 0, false);
    assert!(c.must_read_again());
    assert!(c.read_now(None, false));
    assert!(!c.must_read_again());
    // Closing (a QUIT queued): nothing more is read, even at a hang-up.
    c.close_after_replies();
    assert!(!c.read_now(None, true));
}

#[test]
fn handing_over_leaves_input_for_the_successor_unless_the_peer_left() {
    let mut c = client();
    assert!(!c.read_now(Some(CARRY), false));
    assert!(c.read_now(Some(CARRY), true), "hung up: read to the end");
    assert!(!c.parse_now(Some(CARRY)));
    // A request larger than a handover carries is read and served here.
    c.end_pass(CARRY + 1, 0, false);
    assert!(c.stays_for_handover(CARRY));
    assert!(c.read_now(Some(CARRY), false));
    assert!(c.parse_now(Some(CARRY)));
    assert!(!c.stays_for_handover(CARRY + 1));
}

#[test]
fn a_too_large_value_is_refused_and_its_data_swallowed_as_it_comes() {
    let limits = Limits {
        max_value: 10,
        ..Limits::default()
    };
    let input = b"set k 0 0 100\r\n0123456789";
    let err = match Protocol::Memcache.parse_request(input, &limits) {
        Err(e) => e,
        Ok(p) => panic!("accepted: {p:?}"),
    };
    assert!(!err.close);
    let mut pass = InputPass::default();
    assert!(!pass.skip_refused(err.skip, input.len()), "parsing stops");
    assert_eq!(pass.off, input.len());
    assert_eq!(pass.swallow, 15 + 100 + 2 - input.len());
    // The rest arrives: swallowed, and parsing goes on after it.
    let mut c = client();
    c.end_pass(pass.need, pass.swallow, pass.paused);
    assert_eq!(c.swallow(), 92);
    assert!(!c.parse_now(None), "nothing in the input yet");
    assert_eq!(c.swallow(), 92);
}

#[test]
fn an_unknown_command_skips_its_line_and_parsing_goes_on() {
    let input = b"bogus\r\nget k\r\n";
    let err = match Protocol::Memcache.parse_request(input, &Limits::default()) {
        Err(e) => e,
        Ok(p) => panic!("accepted: {p:?}"),
    };
    let mut pass = InputPass::default();
    assert!(pass.skip_refused(err.skip, input.len()));
    assert_eq!(&input[pass.off..], b"get k\r\n");
    assert_eq!(pass.swallow, 0);
    // A skip of nothing still moves on one byte.
    let mut pass = InputPass::default();
    assert!(pass.skip_refused(0, 3));
    assert_eq!(pass.off, 1);
}

#[test]
fn pauses_at_max_inflight_and_while_a_streamed_request_waits() {
    let mut c = client();
    for _ in 0..3 {
        c.push_reply(ReplySlot::default());
    }
    assert!(!c.must_pause(4));
    assert!(c.must_pause(3));
    // A streamed request goes alone: it waits for the earlier replies.
    c.go_solo();
    assert!(c.must_pause(4));
    for _ in 0..3 {
        c.pop_head();
    }
    assert!(!c.must_pause(4), "every earlier reply is written");
    assert!(!c.must_pause(4), "and it no longer waits");
}

#[test]
fn after_a_read_a_client_gone_while_blocked_is_closed() {
    let mut c = client();
    let conn = ServerRef {
        token: Token(7),
        id: 3,
    };
    c.block_on(Vec::new(), conn);
    assert_eq!(c.after_read(|_| true), AfterRead::Keep, "still there");
    c.set_eof();
    assert_eq!(
        c.after_read(|r| r == conn),
        AfterRead::Close { error: false }
    );
    assert_eq!(
        c.after_read(|_| false),
        AfterRead::Keep,
        "its server is gone"
    );
}

#[test]
fn finished_once_every_reply_is_in_and_written() {
    let mut c = client();
    assert!(!c.finished(), "open");
    c.push_reply(ReplySlot::default());
    c.set_eof();
    assert!(!c.finished(), "a reply is owed");
    c.pop_head();
    assert!(c.finished());
    let mut c = client();
    c.close_after_replies();
    assert!(c.finished());
}

#[test]
fn a_settled_read_of_a_moved_key_lets_its_client_go_on() {
    let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    let Ok(crate::proto::Parse::Done(req)) =
        Protocol::Redis.parse_request(bytes, &Limits::default())
    else {
        panic!("request parses");
    };
    let mut c = client();
    assert_eq!(c.read_settled(0, true), None, "no gate");
    let seq = c.next_seq();
    c.push_reply(ReplySlot::default());
    // Asked of old owners 2 then 1, then the new owner 0; the second
    // asked (1) answered.
    c.slot_mut(seq).expect("slot").retry = Some(Box::new(crate::worker::conn::Retry {
        req: req.clone(),
        bytes: bytes[..].into(),
        replicas: [2, 1, 0].into_iter().collect(),
        next: 2,
        on_miss: true,
        learns: true,
        pull_on_miss: false,
    }));
    c.hold_for_read();
    assert_eq!(c.read_settled(seq + 1, true), None, "another slot's answer");
    assert!(!c.parse_now(None), "held");
    let settled = c.read_settled(seq, true).expect("settled");
    assert_eq!(settled.found_at, Some((2, false)), "found on an old owner");
    assert!(!settled.parse_on, "nothing sent meanwhile");
    assert!(c.parse_now(None), "it goes on");
    assert_eq!(c.read_settled(seq, true), None, "once");
    // A miss everywhere teaches nothing; input sent meanwhile is parsed.
    c.hold_for_read();
    c.rbuf.extend(b"*1\r\n$4\r\nPING\r\n");
    let settled = c.read_settled(seq, false).expect("settled");
    assert_eq!((settled.found_at, settled.parse_on), (None, true));
}

#[test]
fn a_refused_request_is_logged_with_its_error_and_first_bytes() {
    let c = client();
    let input = [b'x'; 100];
    let line = c
        .bad_request("cache", b"ERROR unknown command\r\n", &input)
        .to_string();
    let head = "x".repeat(64);
    assert_eq!(
        line,
        format!(
            "client unix of pool 'cache': bad request: ERROR unknown command (it began \"{head}\")"
        )
    );
    let line = c
        .bad_request("cache", b"-ERR syntax\r\n", b"a\r\n")
        .to_string();
    assert!(
        line.ends_with("bad request: -ERR syntax (it began \"a\\r\\n\")"),
        "{line}"
    );
}

#[test]
fn a_streamed_requests_start_leaves_the_pass_as_it_went() {
    use crate::worker::stream::StreamStart;
    let pass = |start| {
        let mut p = InputPass {
            off: 10,
            need: 5000,
            ..InputPass::default()
        };
        p.stream_start(40, start);
        (p.off, p.need, p.paused, p.streamed)
    };
    assert_eq!(
        pass(StreamStart::Started),
        (50, 0, false, true),
        "its head used"
    );
    assert_eq!(
        pass(StreamStart::Wait),
        (10, 0, true, false),
        "reading pauses"
    );
    assert_eq!(
        pass(StreamStart::No),
        (10, 5000, false, false),
        "gathered whole"
    );
}

#[test]
fn a_refused_request_queues_its_error_unless_another_is_routed_in_its_place() {
    let refused =
        |input: &[u8], limits: &Limits| match Protocol::Memcache.parse_request(input, limits) {
            Err(e) => e,
            Ok(p) => panic!("accepted: {p:?}"),
        };
    let mut c = client();
    let input = b"bogus\r\nget k\r\n";
    let first = c.next_seq();
    assert!(c
        .refuse(refused(input, &Limits::default()), "cache", input)
        .is_none());
    let slot = c.slot(first).expect("its error is owed");
    assert!(slot.ready && slot.out == b"ERROR\r\n" && !slot.close_after);
    // A value too large: the key's delete goes in its place, nothing is
    // queued for it here.
    let limits = Limits {
        max_value: 10,
        ..Limits::default()
    };
    let input = b"set k 0 0 100\r\n0123456789";
    let forward = c.refuse(refused(input, &limits), "cache", input);
    assert!(forward.is_some_and(|r| r.len <= input.len()));
    assert_eq!(c.next_seq(), first + 1, "no slot for it");
}
