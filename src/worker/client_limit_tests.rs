//! Tests of a client's output limit (`client_limit.rs`): a `Client` on
//! one end of a socket pair, no worker, its replies written out and held
//! in chunks.

use super::*;
use crate::net::Stream;
use crate::proto::redis::local::Session;
use crate::proto::{Limits, Parse, Protocol};
use crate::worker::conn::{BufPool, Fragment, Multi, MultiMode};
use crate::worker::spool::Spool;
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

fn held(n: usize) -> Box<Spool> {
    let mut s = Spool::default();
    s.push(&vec![b'x'; n]);
    Box::new(s)
}

#[test]
fn output_is_over_its_limit_only_past_it_and_never_without_one() {
    let mut c = client();
    let mut bufs = BufPool::default();
    c.queue_output(&[b'x'; 100], &mut bufs);
    assert_eq!(c.output_over(100), None, "at the limit");
    assert_eq!(c.output_over(99), Some(100));
    assert_eq!(c.output_over(0), None, "0: no limit");
}

#[test]
fn replies_held_in_chunks_count_with_the_output() {
    let mut c = client();
    let mut bufs = BufPool::default();
    c.queue_output(&[b'x'; 10], &mut bufs);
    // A reply held for a slot, and one for a fragment of a split read.
    c.push_reply(ReplySlot {
        held: Some(held(50)),
        ..ReplySlot::default()
    });
    let mget = b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n";
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(mget, &Limits::default()) else {
        panic!("parses");
    };
    c.push_reply(ReplySlot {
        multi: Some(Box::new(Multi {
            req,
            bytes: mget.to_vec(),
            frags: vec![
                Fragment {
                    held: Some(held(40)),
                    ..Fragment::default()
                },
                Fragment::default(),
            ],
            remaining: 1,
            error: None,
            mode: MultiMode::Split,
        })),
        ..ReplySlot::default()
    });
    assert_eq!(c.output_over(50), None, "the output alone is within");
    assert_eq!(c.kept_over(100), None, "10 + 50 + 40 kept: at the limit");
    assert_eq!(c.kept_over(99), Some(100));
    assert_eq!(c.kept_over(0), None, "0: no limit");
}
