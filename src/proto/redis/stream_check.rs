//! The invariant that ties a streamed request to the whole-request parser,
//! shared by the `redis_stream` fuzz target and the unit tests: a request
//! read in chunks, started as the data path starts it ([`stream_head`] once
//! [`parse_request`] finds it incomplete past the threshold) and passed
//! through a [`StreamMachine`], sends what the request parsed whole would,
//! or fails with the same error.
//!
//! Precisely, for the request at the start of `data`:
//! * parsed whole as a request routed by one key: the head, the held bytes
//!   and the bytes forwarded are the request's bytes, and the key it is
//!   routed by (the head's, or the one [`StreamStep::Route`] names) is the
//!   request's first key;
//! * parsed whole as an MSET: one pair per key, in order, each
//!   `MSET key value` (its value completed by the bytes forwarded) with the
//!   request's key and value;
//! * refused whole with an error reply that keeps the connection: refused
//!   with the same reply, the request's bytes all read. Two refusals are
//!   the streamed path's alone: an EVAL with numkeys 0 (its script is not
//!   held without a key) and the proxy's key count limit (an MSET streamed
//!   pair by pair has no such limit);
//! * a protocol error: the same error;
//! * incomplete: neither done nor failed, every step within the input.

use super::{parse_request, stream_head, Args, StreamHead, StreamKind, StreamMachine, StreamStep};
use crate::proto::{Limits, Parse, Request, RequestError};

/// What a streamed request did.
#[derive(Debug, Default)]
struct Trace {
    /// Bytes sent to the request's server (its head first).
    sent: Vec<u8>,
    /// The key the request was routed by.
    key: Option<Vec<u8>>,
    /// MSET pairs: key and the bytes sent for it.
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    refused: Option<Vec<u8>>,
    failed: Option<Vec<u8>>,
    done: bool,
    /// Bytes of the input accounted for.
    at: usize,
}

/// The size of the next chunk read, from the fuzz input's `steps`.
fn chunk(steps: &[u8], i: &mut usize) -> usize {
    let s = steps.get(*i % steps.len().max(1)).copied().unwrap_or(1);
    *i += 1;
    usize::from(s % 64) + 1
}

/// Checks the invariant above for the request at the start of `data`, read
/// in chunks whose sizes come from `steps`. Panics when it does not hold;
/// returns whether the request was streamed.
#[doc(hidden)]
pub fn check(data: &[u8], steps: &[u8], limits: &Limits, threshold: usize) -> bool {
    let mut i = 0;
    let mut have = 0;
    let head = loop {
        if have == data.len() {
            return false;
        }
        have = (have + chunk(steps, &mut i)).min(data.len());
        match parse_request(&data[..have], limits) {
            Ok(Parse::Incomplete { hint }) if hint > threshold => {
                if let Some(head) = stream_head(&data[..have], limits, threshold) {
                    break head;
                }
            }
            Ok(Parse::Incomplete { .. }) => {}
            _ => return false,
        }
    };
    let trace = run(data, have, &head, limits, threshold, steps, &mut i);
    compare(data, &head, &trace, &parse_request(data, limits));
    true
}

/// Feeds the machine as the data path does, reading more when it asks.
fn run(
    data: &[u8],
    mut have: usize,
    head: &StreamHead,
    limits: &Limits,
    threshold: usize,
    steps: &[u8],
    i: &mut usize,
) -> Trace {
    let mut m = StreamMachine::new(head, *limits, threshold);
    let mut t = Trace {
        at: head.req.len,
        ..Trace::default()
    };
    let mut held = Vec::new();
    match head.kind {
        StreamKind::Single => {
            t.sent.extend_from_slice(&data[..head.req.len]);
            t.key = head.req.keys.first().map(|k| data[k.clone()].to_vec());
        }
        StreamKind::Spool => held.extend_from_slice(&data[..head.req.len]),
        StreamKind::Pairs => {}
    }
    let mut large = false;
    loop {
        let input = &data[t.at..have];
        let step = m.step(input);
        let used = match &step {
            StreamStep::Forward(n) | StreamStep::Hold(n) => *n,
            StreamStep::Route { len, .. }
            | StreamStep::Refuse { len, .. }
            | StreamStep::Pair { len, .. } => *len,
            _ => 0,
        };
        assert!(used <= input.len(), "{step:?} past {} bytes", input.len());
        match step {
            StreamStep::More if have == data.len() => return t,
            StreamStep::More => have = (have + chunk(steps, i)).min(data.len()),
            StreamStep::Forward(n) => {
                assert!(n > 0);
                if large {
                    let pair = t.pairs.last_mut().expect("a pair");
                    pair.1.extend_from_slice(&input[..n]);
                } else if t.refused.is_none() {
                    t.sent.extend_from_slice(&input[..n]);
                }
            }
            StreamStep::Hold(n) => {
                assert!(n > 0 && m.holding());
                held.extend_from_slice(&input[..n]);
            }
            StreamStep::Route { key, len } => {
                assert!(key.end + 2 == len && t.key.is_none());
                held.extend_from_slice(&input[..len]);
                t.key = Some(input[key].to_vec());
                t.sent.append(&mut held);
            }
            StreamStep::Refuse { reply, .. } => t.refused = Some(reply),
            StreamStep::Pair {
                index,
                key,
                cmd,
                large: l,
                ..
            } => {
                assert_eq!(index, t.pairs.len());
                t.pairs.push((input[key].to_vec(), cmd));
                large = l;
            }
            StreamStep::PairEnd => {
                assert!(large);
                large = false;
            }
            StreamStep::Done => {
                t.done = true;
                return t;
            }
            StreamStep::Fail(reply) => {
                t.failed = Some(reply);
                return t;
            }
        }
        t.at += used;
    }
}

/// The trace against the whole-request parser's verdict on `data`.
fn compare(
    data: &[u8],
    head: &StreamHead,
    t: &Trace,
    whole: &Result<Parse<Request>, RequestError>,
) {
    match whole {
        Ok(Parse::Incomplete { .. }) => {
            assert!(!t.done && t.failed.is_none(), "incomplete whole: {t:?}");
        }
        Err(e) if e.close => assert_eq!(t.failed.as_ref(), Some(&e.reply), "protocol error"),
        Err(e) => {
            let too_many = e.reply.starts_with(b"-ERR too many keys");
            assert!(t.done, "refused whole ({:?}): {t:?}", lossy(&e.reply));
            assert_eq!(t.at, e.skip, "bytes read");
            if too_many && head.kind == StreamKind::Pairs {
                assert!(t.refused.is_none());
            } else {
                assert_eq!(t.refused.as_ref(), Some(&e.reply), "refusal");
            }
        }
        Ok(Parse::Done(req)) => {
            assert!(t.done && t.failed.is_none(), "whole request: {t:?}");
            assert_eq!(t.at, req.len, "bytes read");
            if let Some(r) = &t.refused {
                // numkeys 0: routed keyless whole, refused streamed.
                assert!(req.keys.is_empty() && head.kind == StreamKind::Spool);
                assert!(r.ends_with(b"is not supported by the proxy\r\n"));
                return;
            }
            if head.kind == StreamKind::Pairs {
                return compare_pairs(data, req, t);
            }
            assert_eq!(t.sent, &data[..req.len], "bytes sent");
            let want = req.keys.first().map(|k| &data[k.clone()]);
            assert_eq!(t.key.as_deref(), want, "routing key");
        }
    }
}

/// Each pair sent is `MSET key value` of the request's next pair.
fn compare_pairs(data: &[u8], req: &Request, t: &Trace) {
    let whole: Vec<&[u8]> = Args::new(&data[..req.len])
        .skip(1)
        .map(|a| &data[a.range])
        .collect();
    assert_eq!(t.pairs.len() * 2, whole.len(), "pairs");
    for (i, (key, sent)) in t.pairs.iter().enumerate() {
        let args: Vec<&[u8]> = Args::new(sent).map(|a| &sent[a.range]).collect();
        assert_eq!(args.len(), 3, "pair {i}: {:?}", lossy(sent));
        assert!(args[0].eq_ignore_ascii_case(b"MSET"));
        assert_eq!(key.as_slice(), whole[2 * i], "pair {i} key");
        assert_eq!(args[1], whole[2 * i], "pair {i} key sent");
        assert_eq!(args[2], whole[2 * i + 1], "pair {i} value");
        let any = Limits {
            max_value: usize::MAX,
            ..Limits::default()
        };
        match parse_request(sent, &any) {
            Ok(Parse::Done(r)) => assert_eq!(r.len, sent.len()),
            other => panic!("pair {i} parses as {other:?}"),
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
