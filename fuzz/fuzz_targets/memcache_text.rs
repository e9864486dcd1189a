//! Fuzzes the memcached text codec (client requests and server replies).
//!
//! Invariants, beyond "no panic on any input":
//! - a parsed request or reply never claims more bytes than it was given
//!   (an error may ask to skip more: the rest of a refused data block);
//! - parsing is split-invariant: every proper prefix of a message parses as
//!   `Incomplete` (hint no larger than the message) or as the same error,
//!   over a pipeline of several messages;
//! - a multi-key retrieval's fragments re-parse as whole requests with the
//!   keys they were built from, in order; merging any fragment replies never
//!   panics and well-formed ones give one reply closed by `END`;
//! - the `get <key>` shortcut answers as the general text parser wherever
//!   it answers.

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::memcache::McOp;
use walnut::proto::memcache::{merge_responses, parse_request, parse_response, write_fragment};
use walnut::proto::{Limits, Op, Parse, Request, RequestError, Route};

const MAX_MESSAGES: usize = 8;

const OPS: [McOp; 19] = [
    McOp::Get,
    McOp::Gets,
    McOp::Gat,
    McOp::Gats,
    McOp::Set,
    McOp::Add,
    McOp::Replace,
    McOp::Append,
    McOp::Prepend,
    McOp::Cas,
    McOp::Delete,
    McOp::Incr,
    McOp::Decr,
    McOp::Touch,
    McOp::Version,
    McOp::Quit,
    McOp::FlushAll,
    McOp::Verbosity,
    McOp::Stats,
];

type Parsed = Result<Parse<Request>, RequestError>;

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
            assert!(*hint > buf.len(), "hint {hint} for {} bytes", buf.len());
            None
        }
        Err(e) if e.close => None,
        Err(e) => {
            assert!(e.skip > 0);
            Some(e.skip)
        }
    }
}

fn check_prefixes(buf: &[u8], need: usize, full: &Parsed, cuts: &[usize], limits: &Limits) {
    for &cut in cuts {
        let cut = (cut % need).min(buf.len());
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
    let mut replies = Vec::new();
    for idx in [&even, &odd] {
        let mut out = Vec::new();
        write_fragment(bytes, req, idx, &mut out);
        if !idx.is_empty() {
            match parse_request(&out, limits) {
                Ok(Parse::Done(f)) => {
                    assert_eq!(f.len, out.len());
                    assert_eq!(f.op, req.op);
                    let got: Vec<&[u8]> = f.keys.iter().map(|k| &out[k.clone()]).collect();
                    let want: Vec<&[u8]> =
                        idx.iter().map(|&i| &bytes[req.keys[i].clone()]).collect();
                    assert_eq!(got, want, "fragment keys");
                }
                other => panic!("fragment {out:?} parses as {other:?}"),
            }
        }
        // A well-formed reply: a value for every key, then END.
        let mut reply = Vec::new();
        for &i in idx.iter() {
            reply.extend_from_slice(b"VALUE ");
            reply.extend_from_slice(&bytes[req.keys[i].clone()]);
            reply.extend_from_slice(b" 0 1 7\r\nx\r\n");
        }
        reply.extend_from_slice(b"END\r\n");
        replies.push(reply);
    }
    let op = match req.op {
        Op::Mc(op) => op,
        Op::Redis(_) => unreachable!("memcached parser gave a Redis op"),
    };
    let mut out = Vec::new();
    merge_responses(
        bytes,
        req,
        &[(&even, &replies[0]), (&odd, &replies[1])],
        &mut out,
    );
    assert!(out.ends_with(b"END\r\n"), "merged {out:?}");
    assert!(
        matches!(parse_response(&out, op), Ok(Parse::Done(r)) if r.len == out.len()),
        "merged {out:?}"
    );
    // Garbage and error replies merge without a panic.
    let junk: [&[u8]; 3] = [
        b"SERVER_ERROR out of memory\r\n",
        b"VALUE",
        b"END\r\nEND\r\n",
    ];
    for j in junk {
        let mut out = Vec::new();
        merge_responses(bytes, req, &[(&even, j), (&odd, &replies[1])], &mut out);
    }
}

fn check_requests(data: &[u8], limits: &Limits) {
    let cut_seed = data.first().copied().unwrap_or(0) as usize;
    let mut at = 0;
    for _ in 0..MAX_MESSAGES {
        let buf = &data[at.min(data.len())..];
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
            if req.route == Route::Multi {
                check_fragments(&buf[..req.len], req, limits);
            }
        }
        at += need;
        if at >= data.len() {
            return;
        }
    }
}

fn check_responses(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let op = OPS[sel as usize % OPS.len()];
    let mut at = 0;
    for _ in 0..MAX_MESSAGES {
        let buf = &rest[at..];
        let r = match parse_response(buf, op) {
            Ok(Parse::Done(r)) => r,
            Ok(Parse::Incomplete { hint }) => {
                assert!(
                    hint > buf.len(),
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
            match parse_response(&buf[..cut], op) {
                Ok(Parse::Incomplete { hint }) => assert!(hint <= r.len),
                other => panic!("{op:?} reply prefix {cut} of {}: {other:?}", r.len),
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
    check_responses(data);
    for max_keys in [64, 0] {
        let limits = Limits { max_keys, ..limits };
        assert!(
            walnut::proto::memcache::get_shortcut_agrees(data, &limits),
            "{data:?}"
        );
    }
});
