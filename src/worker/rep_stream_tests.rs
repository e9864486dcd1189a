//! `RepStream` on real reply bytes, without sockets: which replies stream,
//! where their pieces go, when the server pauses, is let go, or its reply
//! moved out of the way, when a client is stalled.

use super::*;
use crate::proto::redis::{Cmd, RedisOp};
use crate::proto::Op;
use mio::Token;
use std::time::Duration;

fn op(name: &[u8]) -> Op {
    let cmd = Cmd::lookup(name).expect("a command");
    Op::Redis(RedisOp {
        cmd,
        class: cmd.class(),
    })
}

fn client() -> ClientRef {
    ClientRef::new(Token(4), 40)
}

#[test]
fn only_large_values_and_aggregates_stream() {
    let big = STREAM_THRESHOLD + 1;
    assert!(streams(b"$1048577\r\n", big + 6));
    assert!(streams(b"*3\r\n", big), "an aggregate declared large");
    assert!(!streams(b"$5\r\n", 11), "small");
    assert!(!streams(b"-ERR", big), "errors stay whole");
    assert!(!streams(b"+OK", big), "one line");
    assert!(!streams(b"", big));
    // Many small elements already here: large by what arrived.
    let mut many = b"*100000\r\n".to_vec();
    many.resize(STREAM_THRESHOLD, b'x');
    assert!(streams(&many, 0));
    many.pop();
    assert!(!streams(&many, 0));
}

#[test]
fn a_reply_passes_at_the_head_and_is_held_elsewhere() {
    let pass = hold_for(3, None, None, true).expect("streams");
    assert!(pass.is_none(), "the head of its client's replies: passed");
    let held = hold_for(3, None, None, false)
        .expect("streams")
        .expect("held");
    assert_eq!((held.seq, held.frag), (3, None));
    let mget = Some((MultiMode::Split, op(b"MGET")));
    let frag = hold_for(3, Some(1), mget, true)
        .expect("streams")
        .expect("held");
    assert_eq!((frag.seq, frag.frag), (3, Some(1)));
    // Other fragments carry no values: buffered whole.
    assert!(hold_for(3, Some(1), Some((MultiMode::Split, op(b"DEL"))), true).is_none());
    assert!(hold_for(3, Some(1), None, true).is_none());
}

#[test]
fn a_passed_reply_pauses_its_server_while_the_client_lags() {
    let t = Instant::now();
    let mut rs = RepStream::new(client(), None, t);
    assert_eq!(rs.dest(), Dest::Pass(client()));
    let reply = b"$10\r\n0123456789\r\n";
    assert_eq!(rs.advance(&reply[..3], t), Ok(None), "an unfinished header");
    assert_eq!(rs.advance(&reply[..9], t), Ok(Some((9, false))));
    assert!(!rs.pause_if_lagging(STREAM_HIGH, false), "at the mark");
    assert!(rs.pause_if_lagging(STREAM_HIGH + 1, false));
    assert!(rs.is_blocked());
    assert_eq!(rs.paused_for(), Some(Some(client())));
    assert_eq!(rs.stalled(t + STREAM_STALL), None, "not yet");
    assert_eq!(
        rs.stalled(t + STREAM_STALL + Duration::from_millis(1)),
        Some(client())
    );
    rs.progressed(t + STREAM_STALL);
    assert_eq!(
        rs.stalled(t + STREAM_STALL + Duration::from_millis(1)),
        None
    );
    assert!(rs.unblock(false));
    assert!(!rs.unblock(false), "once");
    assert_eq!(rs.advance(&reply[9..], t), Ok(Some((8, true))));
    assert!(
        !rs.pause_if_lagging(usize::MAX, true),
        "the last piece never pauses"
    );
    let (passed, c, hold) = rs.end();
    assert_eq!((passed, c), (17, Some(client())));
    assert!(hold.is_none());
}

#[test]
fn a_malformed_reply_is_an_error() {
    let mut rs = RepStream::new(client(), None, Instant::now());
    assert!(rs.advance(b"*2\r\n?x\r\n", Instant::now()).is_err());
}

#[test]
fn a_paused_reply_moves_out_of_the_way_into_a_hold() {
    let t = Instant::now();
    let mut rs = RepStream::new(client(), None, t);
    assert_eq!(rs.paused_for(), None, "not paused");
    assert!(rs.pause_if_lagging(STREAM_HIGH + 1, false));
    rs.spool_rest(Some(9));
    assert!(!rs.is_blocked(), "read on");
    assert_eq!(rs.dest(), Dest::Hold(client()));
    assert_eq!(rs.paused_for(), None, "held: never paused again");
    assert_eq!(rs.keep(b"abc", 0, 0), None);
    let (_, _, hold) = rs.end();
    let hold = hold.expect("held");
    assert_eq!((hold.seq, hold.frag, hold.spool.len()), (9, None, 3));
    // Its client gone: read on, nothing held.
    let mut rs = RepStream::new(client(), None, t);
    assert!(rs.pause_if_lagging(STREAM_HIGH + 1, false));
    rs.spool_rest(None);
    assert!(!rs.is_blocked());
    assert_eq!(rs.dest(), Dest::Pass(client()));
}

#[test]
fn a_held_reply_is_bounded_by_its_clients_output_limit() {
    let t = Instant::now();
    let mut rs = RepStream::new(client(), Some(Hold::new(2, None)), t);
    assert_eq!(rs.dest(), Dest::Hold(client()));
    assert_eq!(rs.keep(&[b'x'; 60], 40, 100), None, "at the limit");
    assert_eq!(rs.keep(b"y", 40, 100), Some(101), "past it");
    assert_eq!(rs.dest(), Dest::Drop, "the rest is dropped");
    assert_eq!(rs.keep(b"z", 0, 100), None, "nothing held any more");
    // No limit.
    let mut rs = RepStream::new(client(), Some(Hold::new(2, None)), t);
    assert_eq!(rs.keep(&[b'x'; 1000], 1 << 30, 0), None);
}

#[test]
fn a_client_gone_or_half_answered() {
    let t = Instant::now();
    let mut rs = RepStream::new(client(), None, t);
    assert!(rs.pause_if_lagging(STREAM_HIGH + 1, false));
    assert!(rs.unblock(true), "its client went away");
    assert_eq!(rs.dest(), Dest::Drop);
    // A connection lost before any byte passed: the client gets the error.
    let rs = RepStream::new(client(), None, t);
    assert_eq!(rs.half_answered(), None);
    let mut rs = RepStream::new(client(), None, t);
    assert_eq!(rs.advance(b"$10\r\n01", t), Ok(Some((7, false))));
    assert_eq!(rs.half_answered(), Some(client()));
    // Held: its slot gets the error.
    let mut rs = RepStream::new(client(), Some(Hold::new(2, None)), t);
    assert_eq!(rs.advance(b"$10\r\n01", t), Ok(Some((7, false))));
    assert_eq!(rs.half_answered(), None);
    let mut rs = RepStream::new(client(), None, t);
    rs.drop_client();
    assert_eq!(rs.dest(), Dest::Drop);
}
