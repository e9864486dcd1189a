//! memcached text codec on arbitrary bytes: no panic, lengths within the
//! input, and a prefix of the input parses as `Incomplete` or as the same
//! outcome as the whole input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::memcache::{
    merge_responses, parse_request, parse_response, write_fragment, McOp,
};
use walnut::proto::{Limits, Parse, Route};

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

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, input)) = data.split_first() else {
        return;
    };
    let split = if input.is_empty() {
        0
    } else {
        usize::from(ctl) * 7 % input.len()
    };
    let limits = Limits {
        max_value: 4096,
        max_keys: 64,
    };

    let full = parse_request(input, &limits);
    match &full {
        Ok(Parse::Done(req)) => {
            assert!(req.len > 0 && req.len <= input.len());
            for k in &req.keys {
                assert!(k.start < k.end && k.end <= req.len);
            }
            if req.route == Route::Multi {
                let idx: Vec<usize> = (0..req.keys.len()).collect();
                let mut frag = Vec::new();
                write_fragment(input, req, &idx, &mut frag);
                assert!(matches!(
                    parse_request(&frag, &Limits::default()),
                    Ok(Parse::Done(_))
                ));
                let mut out = Vec::new();
                merge_responses(input, req, &[(&idx, input)], &mut out);
            }
        }
        Ok(Parse::Incomplete { hint }) => assert!(*hint > input.len()),
        Err(e) => assert!(e.close || e.skip > 0),
    }
    match parse_request(&input[..split], &limits) {
        Ok(Parse::Incomplete { hint }) => assert!(hint > split),
        other => assert_eq!(other, full),
    }

    let op = OPS[usize::from(ctl) % OPS.len()];
    let full = parse_response(input, op);
    match &full {
        Ok(Parse::Done(r)) => assert!(r.len > 0 && r.len <= input.len()),
        Ok(Parse::Incomplete { hint }) => assert!(*hint > input.len()),
        Err(_) => {}
    }
    match parse_response(&input[..split], op) {
        Ok(Parse::Incomplete { hint }) => assert!(hint > split),
        Ok(done) => assert_eq!(Ok(done), full),
        // A broken prefix can only belong to a broken whole.
        Err(_) => assert!(full.is_err()),
    }
});
