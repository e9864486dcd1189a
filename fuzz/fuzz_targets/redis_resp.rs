//! Fuzzes the Redis RESP codec (client requests and server replies).
//!
//! Invariants, beyond "no panic on any input":
//! - a parsed request or reply never claims more bytes than it was given;
//! - parsing is split-invariant: every proper prefix of a message parses as
//!   `Incomplete` (with a hint no larger than the message) or, for a request
//!   the parser rejects, as the same error; a stream of messages parses the
//!   same however it is cut;
//! - a streamed request's head (`stream_head`) agrees with the whole-request
//!   parser: the head, its large argument and the arguments left, once
//!   completed, parse as one request with the same keys (an MSET head
//!   streamed pair by pair, or a script held before its key, with a key per
//!   pair or the key that follows); a pair framed by `stream_pair` is the
//!   pair the whole-request parser reads;
//! - the GET/SET shortcut (`proto/redis/fast.rs`) answers as the general
//!   parser wherever it answers, and so does the reply shortcut (bulk
//!   strings, nil, short simple strings) of `parse_response`;
//! - the reply cursor (`ReplyCursor`), fed a reply cut anywhere, ends it
//!   where `parse_response` does, or fails with the same error;
//! - a multi-key request's fragments re-parse as whole requests that carry
//!   exactly the keys they were built from, in order, and the merge of any
//!   fragment replies is one whole reply;
//! - the merge of servers' replies to a broadcast (DBSIZE, KEYS, PUBSUB,
//!   ...) of replies that parse is one whole reply, or none.

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::redis::{
    merge_responses, parse_request, parse_response, stream_arg, stream_head, stream_pair,
    whole_arg, write_fragment, Pair, ReplyCursor, StreamHead, StreamKind,
};
use walnut::proto::{Limits, Parse, Request, RequestError, Response, ResponseError, Route};

/// Messages looked at per input: enough to cover pipelines, bounded cost.
const MAX_MESSAGES: usize = 8;

type Parsed = Result<Parse<Request>, RequestError>;

/// The bytes the request at the start of `buf` accounts for, or None when it
/// is incomplete or closes the connection.
fn consumed(res: &Parsed, buf: &[u8]) -> Option<usize> {
    match res {
        Ok(Parse::Done(r)) => {
            assert!(
                r.len > 0 && r.len <= buf.len(),
                "len {} of {}",
                r.len,
                buf.len()
            );
            for k in &r.keys {
                assert!(k.start <= k.end && k.end <= r.len);
            }
            Some(r.len)
        }
        Ok(Parse::Incomplete { hint }) => {
            assert!(
                *hint == 0 || *hint > buf.len(),
                "hint {hint} for {} bytes",
                buf.len()
            );
            None
        }
        Err(e) => {
            assert!(!e.reply.is_empty());
            if e.close {
                return None;
            }
            assert!(e.skip > 0 && e.skip <= buf.len());
            Some(e.skip)
        }
    }
}

fn check_prefixes(buf: &[u8], need: usize, full: &Parsed, cuts: &[usize], limits: &Limits) {
    for &cut in cuts {
        let cut = cut % need;
        match parse_request(&buf[..cut], limits) {
            Ok(Parse::Incomplete { hint }) => assert!(hint <= need, "hint {hint} > {need}"),
            Err(e) if matches!(full, Err(f) if *f == e) => {}
            other => panic!("prefix {cut} of {need}: {other:?}, whole: {full:?}"),
        }
    }
}

fn check_fragments(bytes: &[u8], req: &Request, limits: &Limits) {
    let even: Vec<usize> = (0..req.keys.len()).step_by(2).collect();
    let odd: Vec<usize> = (1..req.keys.len()).step_by(2).collect();
    let mut frags = Vec::new();
    for idx in [&even, &odd] {
        let mut out = Vec::new();
        write_fragment(bytes, req, idx, &mut out);
        if !idx.is_empty() {
            match parse_request(&out, limits) {
                Ok(Parse::Done(f)) => {
                    assert_eq!(f.len, out.len());
                    assert_eq!(f.route, Route::Multi);
                    let got: Vec<&[u8]> = f.keys.iter().map(|k| &out[k.clone()]).collect();
                    let want: Vec<&[u8]> =
                        idx.iter().map(|&i| &bytes[req.keys[i].clone()]).collect();
                    if req.keys.iter().all(|k| !bytes[k.clone()].contains(&b'"')) {
                        assert_eq!(got, want, "fragment keys");
                    }
                }
                other => panic!("fragment {out:?} parses as {other:?}"),
            }
        }
        frags.push(out);
    }
    // Replies of any shape merge into exactly one reply.
    let samples: [&[u8]; 4] = [b"+OK\r\n", b":3\r\n", b"*1\r\n$1\r\nv\r\n", b"-ERR x\r\n"];
    for a in samples {
        for b in samples {
            let mut out = Vec::new();
            merge_responses(bytes, req, &[(&even, a), (&odd, b)], &mut out);
            assert!(
                matches!(parse_response(&out), Ok(Parse::Done(r)) if r.len == out.len()),
                "merge of {a:?} and {b:?}: {out:?}"
            );
        }
    }
    // Well-formed MGET-like replies, one value per key.
    let reply_for = |n: usize| {
        let mut r = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            r.extend_from_slice(format!("$1\r\n{}\r\n", i % 10).as_bytes());
        }
        r
    };
    let (ra, rb) = (reply_for(even.len()), reply_for(odd.len()));
    let mut out = Vec::new();
    merge_responses(bytes, req, &[(&even, &ra), (&odd, &rb)], &mut out);
    assert!(matches!(parse_response(&out), Ok(Parse::Done(r)) if r.len == out.len()));
}

fn check_requests(data: &[u8], limits: &Limits) {
    let cut_seed = data.first().copied().unwrap_or(0) as usize;
    let mut at = 0;
    for _ in 0..MAX_MESSAGES {
        let buf = &data[at..];
        let full = parse_request(buf, limits);
        let Some(need) = consumed(&full, buf) else {
            return;
        };
        check_prefixes(
            buf,
            need,
            &full,
            &[0, 1, need / 2, need - 1, cut_seed],
            limits,
        );
        if let Ok(Parse::Done(req)) = &full {
            // MSETNX (one server or none) and blocking commands are
            // forwarded whole, never split.
            let whole = matches!(
                req.op,
                walnut::proto::Op::Redis(r) if matches!(
                    r.class,
                    walnut::proto::redis::CmdClass::OneServer
                        | walnut::proto::redis::CmdClass::Blocking
                )
            );
            if req.route == Route::Multi && !whole {
                check_fragments(&buf[..req.len], req, limits);
            }
        }
        at += need;
    }
}

/// Smallest argument streamed in this target (small, so inputs reach it).
const STREAM_THRESHOLD: usize = 8;

fn check_stream_head(data: &[u8], limits: &Limits) {
    if let Ok(Some((start, n))) = stream_arg(data, limits) {
        assert!(start <= data.len() && n <= limits.max_value);
    }
    check_stream_pair(data, limits);
    if let Ok(Some((v, len))) = whole_arg(data, limits) {
        assert!(v.start <= v.end && v.end + 2 == len && len <= data.len());
    }
    let Some(h) = stream_head(data, limits, STREAM_THRESHOLD) else {
        return;
    };
    if h.kind == StreamKind::Pairs {
        return check_pairs_head(data, limits, &h);
    }
    let head = h.req.len;
    assert!(head <= data.len());
    assert!(h.body >= STREAM_THRESHOLD + 2 && h.body - 2 <= limits.max_value);
    for k in &h.req.keys {
        assert!(k.start <= k.end && k.end <= head);
    }
    let mut whole = data[..head].to_vec();
    whole.resize(head + h.body - 2, b'v');
    whole.extend_from_slice(b"\r\n");
    let spool = h.kind == StreamKind::Spool;
    if spool {
        // A script before its key: no key yet; numkeys 1 makes one.
        assert!(h.req.keys.is_empty() && h.args_left >= 2);
        whole.extend_from_slice(b"$1\r\n1\r\n");
    }
    for _ in usize::from(spool)..h.args_left.min(64) {
        whole.extend_from_slice(b"$1\r\na\r\n");
    }
    if h.args_left > 64 {
        return;
    }
    match parse_request(&whole, limits) {
        Ok(Parse::Done(r)) => {
            assert_eq!(r.len, whole.len(), "completed streamed request");
            let got: Vec<&[u8]> = r.keys.iter().map(|k| &whole[k.clone()]).collect();
            let want: Vec<&[u8]> = h.req.keys.iter().map(|k| &whole[k.clone()]).collect();
            if spool {
                assert_eq!(got, vec![&b"a"[..]], "the key after a held script");
            } else {
                assert_eq!(got, want, "keys of the streamed head");
            }
            assert_eq!(r.op, h.req.op);
        }
        other => panic!("completed streamed request parses as {other:?}"),
    }
}

/// An MSET head streamed pair by pair: completed with small pairs, it
/// parses as one MSET with a key per pair.
fn check_pairs_head(data: &[u8], limits: &Limits, h: &StreamHead) {
    let head = h.req.len;
    assert!(head <= data.len());
    assert_eq!(h.body, 0);
    assert!(h.args_left >= 2 && h.args_left % 2 == 0);
    assert!(h.req.keys.is_empty() && h.req.route == Route::Multi);
    if h.args_left > 64 {
        return;
    }
    let mut whole = data[..head].to_vec();
    for _ in 0..h.args_left {
        whole.extend_from_slice(b"$1\r\na\r\n");
    }
    match parse_request(&whole, limits) {
        Ok(Parse::Done(r)) => {
            assert_eq!(r.len, whole.len(), "completed MSET");
            assert_eq!(r.keys.len(), h.args_left / 2);
            assert_eq!(r.op, h.req.op);
        }
        other => panic!("completed MSET parses as {other:?}"),
    }
}

/// One MSET pair framed by `stream_pair` is the pair the whole-request
/// parser reads from `MSET` followed by the same bytes.
fn check_stream_pair(data: &[u8], limits: &Limits) {
    let Ok(Some(pair)) = stream_pair(data, limits, STREAM_THRESHOLD) else {
        return;
    };
    let mut whole = b"*3\r\n$4\r\nMSET\r\n".to_vec();
    let off = whole.len();
    let (key, value) = match pair {
        Pair::Small { key, value, len } => {
            assert!(key.end <= value.start && value.end + 2 <= len && len <= data.len());
            assert!(value.len() < STREAM_THRESHOLD);
            whole.extend_from_slice(&data[..len]);
            (key, Some(value))
        }
        Pair::Large { key, head, body } => {
            assert!(key.end < head && head <= data.len());
            assert!(body >= STREAM_THRESHOLD + 2 && body - 2 <= limits.max_value);
            whole.extend_from_slice(&data[..head]);
            whole.resize(off + head + body - 2, b'v');
            whole.extend_from_slice(b"\r\n");
            (key, None)
        }
    };
    match parse_request(&whole, limits) {
        Ok(Parse::Done(r)) => {
            assert_eq!(r.len, whole.len(), "a pair is one MSET's arguments");
            assert_eq!(r.keys.len(), 1);
            assert_eq!(&whole[r.keys[0].clone()], &data[key]);
            if let Some(v) = value {
                let got = walnut::proto::redis::Args::new(&whole)
                    .nth(2)
                    .map(|a| a.range);
                assert_eq!(got.map(|g| &whole[g]), Some(&data[v]));
            }
        }
        other => panic!("MSET of one framed pair parses as {other:?}"),
    }
}

/// Feeds `buf` to a reply cursor in pieces whose sizes come from `steps`
/// (cycled), the unconsumed rest kept in front of the next piece as a
/// connection's input keeps it. The bytes consumed and whether the reply
/// ended.
fn cursor_feed(buf: &[u8], steps: &[u8]) -> Result<(usize, bool), ResponseError> {
    let mut cur = ReplyCursor::new();
    let (mut start, mut end) = (0, 0);
    let mut i = 0;
    loop {
        let step = steps
            .get(i % steps.len().max(1))
            .map_or(1, |&s| usize::from(s % 32) + 1);
        i += 1;
        end = (end + step).min(buf.len());
        let (n, done) = cur.advance(&buf[start..end])?;
        assert!(n <= end - start);
        start += n;
        assert_eq!(cur.consumed(), start);
        if done || end == buf.len() {
            return Ok((start, done));
        }
    }
}

fn check_cursor(buf: &[u8], whole: &Result<Parse<Response>, ResponseError>, steps: &[u8]) {
    let one = [0u8];
    for steps in [steps, &one[..]] {
        let got = cursor_feed(buf, steps);
        match (whole, &got) {
            (Ok(Parse::Done(r)), Ok((n, true))) => assert_eq!(r.len, *n, "cursor end"),
            (Ok(Parse::Incomplete { .. }), Ok((n, false))) => assert!(*n <= buf.len()),
            (Err(a), Err(b)) => assert_eq!(a, b, "cursor error"),
            _ => panic!("cursor {got:?}, whole parser {whole:?}"),
        }
    }
}

fn check_responses(data: &[u8]) {
    let mut at = 0;
    for _ in 0..MAX_MESSAGES {
        let buf = &data[at..];
        assert!(walnut::proto::redis::reply_shortcut_agrees(buf), "{buf:?}");
        let whole = parse_response(buf);
        check_cursor(buf, &whole, data);
        let r = match whole {
            Ok(Parse::Done(r)) => r,
            Ok(Parse::Incomplete { hint }) => {
                assert!(
                    hint == 0 || hint > buf.len(),
                    "reply hint {hint} for {} bytes",
                    buf.len()
                );
                return;
            }
            Err(_) => return,
        };
        assert!(r.len > 0 && r.len <= buf.len());
        for cut in [0, 1, r.len / 2, r.len - 1] {
            let cut = cut % r.len;
            match parse_response(&buf[..cut]) {
                Ok(Parse::Incomplete { hint }) => assert!(hint <= r.len),
                other => panic!("reply prefix {cut} of {}: {other:?}", r.len),
            }
        }
        at += r.len;
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_value: 4096,
        max_keys: 64,
        pre_auth: false,
    };
    check_requests(data, &limits);
    check_shortcut(data);
    check_stream_head(data, &limits);
    check_responses(data);
    check_broadcast_merge(data);
});

/// The GET/SET shortcut answers as the general parser, under limits that
/// reach its refusals (a short max_value, pre-auth bulk lengths).
fn check_shortcut(data: &[u8]) {
    for (max_value, pre_auth) in [(4096, false), (4, false), (1 << 20, true)] {
        let limits = Limits {
            max_value,
            max_keys: 64,
            pre_auth,
        };
        assert!(walnut::proto::redis::shortcut_agrees(data, &limits), "{data:?}");
    }
}

/// Two replies cut from the input, merged as every broadcast command's.
fn check_broadcast_merge(data: &[u8]) {
    let Ok(Parse::Done(a)) = parse_response(data) else {
        return;
    };
    let (first, rest) = data.split_at(a.len);
    let second = match parse_response(rest) {
        Ok(Parse::Done(b)) => &rest[..b.len],
        _ => first,
    };
    for name in ["DBSIZE", "KEYS", "RANDOMKEY", "INFO", "PUBSUB"] {
        if let Some(out) = walnut::proto::redis::keyspace::merge(name, &[first, second]) {
            match parse_response(&out) {
                Ok(Parse::Done(r)) => assert_eq!(r.len, out.len(), "{name}: {out:?}"),
                other => panic!("{name} merged into {out:?}: {other:?}"),
            }
        }
    }
}
