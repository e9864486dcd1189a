//! Fuzzes a streamed Redis request as a whole: the request (after a few
//! bytes that set the streaming threshold and the sizes of the chunks it
//! arrives in) is read chunk by chunk, started as the data path starts it,
//! and passed through `StreamMachine`; what it sends, holds, routes by,
//! refuses or fails with is checked against the whole-request parser
//! (`walnut::proto::redis::stream_check`, where the invariant is spelled
//! out).
//!
//! Input: byte 0 sets the threshold (1..=16), byte 1 the number of chunk
//! sizes that follow (1..=8), then the chunk sizes, then the request.

#![no_main]

use libfuzzer_sys::fuzz_target;
use walnut::proto::redis::stream_check;
use walnut::proto::Limits;

fuzz_target!(|data: &[u8]| {
    let [t, n, rest @ ..] = data else {
        return;
    };
    let n = usize::from(n % 8) + 1;
    if rest.len() < n {
        return;
    }
    let (steps, request) = rest.split_at(n);
    let limits = Limits {
        max_value: 4096,
        max_keys: 8,
        pre_auth: false,
    };
    stream_check::check(request, steps, &limits, usize::from(t % 16) + 1);
});
