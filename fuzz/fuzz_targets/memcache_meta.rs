//! Fuzzes the memcached meta protocol codec: no panic on any input, a
//! parsed message never claims more bytes than given, parsing is
//! split-invariant, and the quiet rewrite yields a request that parses as
//! the same command without the quiet flag.

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::memcache::meta::looks_like_meta;
use walnut::proto::memcache::{keep_reply, parse_request, parse_response, write_request, McOp};
use walnut::proto::{Limits, Op, Parse};

fn check_request(data: &[u8], limits: &Limits) {
    let full = parse_request(data, limits);
    let need = match &full {
        Ok(Parse::Done(r)) => {
            assert!(r.len <= data.len() && r.len > 0);
            for k in &r.keys {
                assert!(k.start <= k.end && k.end <= r.len);
            }
            if let Op::Mc(McOp::Meta { cmd, quiet: true }) = r.op {
                let mut out = Vec::new();
                write_request(r, &data[..r.len], &mut out);
                assert!(out.len() < r.len);
                match parse_request(&out, limits) {
                    Ok(Parse::Done(again)) => {
                        assert_eq!(again.len, out.len());
                        assert_eq!(again.op, Op::Mc(McOp::Meta { cmd, quiet: false }));
                    }
                    other => panic!("rewritten request: {other:?}"),
                }
            }
            r.len
        }
        Ok(Parse::Incomplete { hint }) => {
            assert!(*hint > data.len());
            return;
        }
        Err(e) => {
            if e.close {
                return;
            }
            assert!(e.skip > 0);
            e.skip.min(data.len())
        }
    };
    for cut in [0, need / 2, need.saturating_sub(1)] {
        let cut = cut.min(need.saturating_sub(1));
        match parse_request(&data[..cut], limits) {
            Ok(Parse::Incomplete { hint }) => assert!(hint > cut),
            other => assert_eq!(other, full, "prefix {cut} of {need}"),
        }
    }
}

fn check_response(data: &[u8]) {
    use walnut::proto::memcache::MetaCmd::*;
    for cmd in [Get, Set, Delete, Arith, Debug] {
        let op = McOp::Meta { cmd, quiet: true };
        if let Ok(Parse::Done(r)) = parse_response(data, op) {
            assert!(r.len <= data.len() && r.len > 0);
            let _ = keep_reply(op, &data[..r.len]);
            for cut in [0, r.len / 2, r.len - 1] {
                assert!(matches!(
                    parse_response(&data[..cut], op),
                    Ok(Parse::Incomplete { .. }) | Err(_)
                ));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_value: 4096,
        max_keys: 64,
        pre_auth: false,
    };
    let mut meta = b"m".to_vec();
    meta.extend_from_slice(data);
    if looks_like_meta(&meta) {
        check_request(&meta, &limits);
    }
    check_response(data);
});
