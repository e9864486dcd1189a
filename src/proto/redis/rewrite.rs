//! A Redis request rewritten in place: its keys shortened at the front (a
//! prefix route's `strip`), each bulk string's length fixed.

use crate::proto::{Limits, Parse};

/// Cut the first `cut(key)` bytes off each key of the Redis request
/// written at `out[start..]`, fixing each bulk length (an inline
/// command's keys are bare words). A request that does not parse is left
/// as it is.
pub fn cut_key_heads(out: &mut Vec<u8>, start: usize, cut: impl Fn(&[u8]) -> usize) {
    let limits = Limits {
        max_value: usize::MAX,
        max_keys: usize::MAX,
        pre_auth: false,
    };
    let Ok(Parse::Done(req)) = super::parse_request(&out[start..], &limits) else {
        return;
    };
    let cuts: Vec<(std::ops::Range<usize>, usize)> = req
        .keys
        .iter()
        .map(|r| {
            let range = r.start + start..r.end + start;
            let n = cut(&out[range.clone()]);
            (range, n)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    if cuts.is_empty() {
        return;
    }
    let mut rebuilt = Vec::with_capacity(out.len() - start);
    let mut at = start;
    for (range, n) in cuts {
        // RESP: `$<len>\r\n` right before the key; inline: a bare word.
        let header = out[at..range.start]
            .strip_suffix(b"\r\n")
            .and_then(|h| memchr::memrchr(b'$', h).map(|d| at + d));
        match header {
            Some(h) => {
                rebuilt.extend_from_slice(&out[at..h]);
                rebuilt.extend_from_slice(format!("${}\r\n", range.len() - n).as_bytes());
            }
            None => rebuilt.extend_from_slice(&out[at..range.start]),
        }
        rebuilt.extend_from_slice(&out[range.start + n..range.end]);
        at = range.end;
    }
    rebuilt.extend_from_slice(&out[at..]);
    out.truncate(start);
    out.extend_from_slice(&rebuilt);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_user(key: &[u8]) -> usize {
        if key.starts_with(b"user:") {
            5
        } else {
            0
        }
    }

    #[test]
    fn keys_cut_and_lengths_fixed() {
        let mut out = b"junk".to_vec();
        out.extend_from_slice(
            b"*5\r\n$4\r\nMSET\r\n$6\r\nuser:1\r\n$6\r\nuser:1\r\n$5\r\nother\r\n$1\r\nv\r\n",
        );
        cut_key_heads(&mut out, 4, cut_user);
        // Only keys: MSET's value "user:1" stays.
        assert_eq!(
            out,
            b"junk*5\r\n$4\r\nMSET\r\n$1\r\n1\r\n$6\r\nuser:1\r\n$5\r\nother\r\n$1\r\nv\r\n"
        );
        let mut inline = b"GET user:42\r\n".to_vec();
        cut_key_heads(&mut inline, 0, cut_user);
        assert_eq!(inline, b"GET 42\r\n");
        let mut long = b"*2\r\n$3\r\nGET\r\n$15\r\nuser:0123456789\r\n".to_vec();
        cut_key_heads(&mut long, 0, cut_user);
        assert_eq!(long, b"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n");
        let mut partial = b"*2\r\n$3\r\nGET\r\n$6\r\nuser".to_vec();
        cut_key_heads(&mut partial, 0, cut_user);
        assert_eq!(partial, b"*2\r\n$3\r\nGET\r\n$6\r\nuser");
    }
}
