//! Fuzzes the memcached binary protocol codec: no panic on any input, a
//! parsed message never claims more bytes than given, parsing is
//! split-invariant (a prefix parses as incomplete or as the same outcome),
//! and the quiet-request rewrite keeps the request's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::memcache::{
    keep_reply, parse_request, parse_response, rewrite_reply, write_request, McOp,
};
use walnut::proto::{Limits, Parse};

fn check_request(data: &[u8], limits: &Limits) {
    let full = parse_request(data, limits);
    let need = match &full {
        Ok(Parse::Done(r)) => {
            assert!(r.len <= data.len() && r.len > 0);
            for k in &r.keys {
                assert!(k.start <= k.end && k.end <= r.len);
            }
            let mut out = Vec::new();
            write_request(r, &data[..r.len], &mut out);
            assert_eq!(out.len(), r.len);
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
    let (Some(&opcode), Some(&o)) = (data.get(1), data.get(15)) else {
        return;
    };
    for op in [opcode, opcode | 0x08, opcode & 0x1f] {
        let op = McOp::Bin {
            opcode: op,
            opaque: u32::from(o),
        };
        if let Ok(Parse::Done(r)) = parse_response(data, op) {
            assert!(r.len <= data.len() && r.len >= 24);
            let reply = &data[..r.len];
            let _ = keep_reply(op, reply);
            if let Some(v) = rewrite_reply(op, reply) {
                assert_eq!(v.len(), reply.len());
            }
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
    let mut bin = Vec::with_capacity(data.len() + 1);
    bin.push(0x80);
    bin.extend_from_slice(data);
    check_request(&bin, &limits);
    check_response(data);
});
