//! Table tests for the meta protocol read from
//! `tests/vectors/memcache/meta_{requests,responses}.txt`, with the split
//! property of [`super::binary_vectors`].

use super::binary_vectors::{reply_op, run_table, unescape};

#[test]
fn meta_request_vectors() {
    let text = include_str!("../../../tests/vectors/memcache/meta_requests.txt");
    assert!(run_table(text, unescape, reply_op) >= 20);
}

#[test]
fn meta_response_vectors() {
    let text = include_str!("../../../tests/vectors/memcache/meta_responses.txt");
    assert!(run_table(text, unescape, reply_op) >= 8);
}
