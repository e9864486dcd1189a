//! Fuzzes the Redis RESP codec: no panic on any input, a parsed message
//! never claims more bytes than given, and parsing is split-invariant (a
//! prefix parses as incomplete, or as the same result).

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::redis::{merge_responses, parse_request, parse_response, write_fragment};
use walnut::proto::{Limits, Parse, Route};

fn check_request(data: &[u8], limits: &Limits) {
    let full = parse_request(data, limits);
    let need = match &full {
        Ok(Parse::Done(r)) => {
            assert!(r.len <= data.len() && r.len > 0);
            for k in &r.keys {
                assert!(k.start <= k.end && k.end <= r.len);
            }
            r.len
        }
        Ok(Parse::Incomplete { .. }) => return,
        Err(e) => {
            assert!(!e.reply.is_empty());
            if e.close {
                return;
            }
            assert!(e.skip <= data.len() && e.skip > 0);
            e.skip
        }
    };
    // Every shorter prefix is incomplete or fails the same way.
    for cut in [0, need / 2, need.saturating_sub(1)] {
        match parse_request(&data[..cut.min(need - 1)], limits) {
            Ok(Parse::Incomplete { hint }) => assert!(hint <= need),
            other => panic!("prefix {cut} of {need}: {other:?}"),
        }
    }
    // Splitting and merging a parsed multi-key request never panics.
    if let Ok(Parse::Done(req)) = &full {
        if req.route == Route::Multi {
            let bytes = &data[..req.len];
            let even: Vec<usize> = (0..req.keys.len()).step_by(2).collect();
            let odd: Vec<usize> = (1..req.keys.len()).step_by(2).collect();
            let mut a = Vec::new();
            let mut b = Vec::new();
            write_fragment(bytes, req, &even, &mut a);
            write_fragment(bytes, req, &odd, &mut b);
            for (idx, frag) in [(&even, &a), (&odd, &b)] {
                if idx.is_empty() {
                    continue;
                }
                assert!(
                    matches!(parse_request(frag, limits), Ok(Parse::Done(r)) if r.len == frag.len())
                );
            }
            let mut out = Vec::new();
            merge_responses(bytes, req, &[(&even, data), (&odd, &a)], &mut out);
            assert!(matches!(parse_response(&out), Ok(Parse::Done(r)) if r.len == out.len()));
        }
    }
}

fn check_response(data: &[u8]) {
    if let Ok(Parse::Done(r)) = parse_response(data) {
        assert!(r.len <= data.len() && r.len > 0);
        for cut in [0, r.len / 2, r.len - 1] {
            match parse_response(&data[..cut]) {
                Ok(Parse::Incomplete { hint }) => assert!(hint <= r.len),
                Err(_) => {}
                other => panic!("prefix {cut} of {}: {other:?}", r.len),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_value: 4096,
        max_keys: 64,
    };
    check_request(data, &limits);
    check_response(data);
});
