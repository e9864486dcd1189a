//! `GET key` and `SET key value` as RESP arrays, the requests that make up
//! most of a cache's traffic, recognised by their first bytes without the
//! general scan (argument framing, command lookup, key specs, route
//! checks). The answer is exactly the general parser's (`request::shortcut_agrees`,
//! checked by the tests of `request_tests.rs` and the `redis_resp` fuzz
//! target, holds them to it); anything else, or either
//! of them incomplete, goes the general way.

use super::args::PRE_AUTH_MAX_BULK;
use super::commands::{GET, SET};
use super::RedisOp;
use crate::proto::{Keys, Limits, Op, Request, Route};
use std::ops::Range;

/// `buf` starts with a whole `GET key` or `SET key value` (command name in
/// upper or lower case): the request the general parser returns for it.
#[inline]
pub(super) fn get_or_set(buf: &[u8], limits: &Limits) -> Option<Request> {
    // "*2\r\n$3\r\nGET\r\n" / "*3\r\n$3\r\nSET\r\n", then the key's "$".
    let head = buf.get(..14)?;
    if head[0] != b'*' || head[2..8] != *b"\r\n$3\r\n" || head[11..14] != *b"\r\n$" {
        return None;
    }
    let cmd = match (head[1], &head[8..11]) {
        (b'2', b"GET" | b"get") => GET,
        (b'3', b"SET" | b"set") => SET,
        _ => return None,
    };
    // The general parser's limits on the array and the name's length.
    if limits.max_keys == 0 || limits.max_value < 3 {
        return None;
    }
    let key = bulk(buf, 13, limits)?;
    let end = if cmd == SET {
        if buf.get(key.end + 2) != Some(&b'$') {
            return None;
        }
        bulk(buf, key.end + 2, limits)?.end
    } else {
        key.end
    };
    let mut keys = Keys::new();
    keys.push(key);
    Some(Request {
        len: end + 2,
        op: Op::Redis(RedisOp {
            cmd,
            class: cmd.class(),
        }),
        keys,
        route: Route::Single,
        noreply: false,
    })
}

/// The whole bulk string whose `$` is at `pos`, within the limits.
#[inline(always)]
fn bulk(buf: &[u8], pos: usize, limits: &Limits) -> Option<Range<usize>> {
    let (n, start) = bulk_len(buf, pos)?;
    if n > limits.max_value {
        return None;
    }
    if limits.pre_auth && n > PRE_AUTH_MAX_BULK {
        return None;
    }
    let end = start + n;
    // Like the general parser, the two bytes after the value are its CRLF
    // unseen.
    (end + 2 <= buf.len()).then_some(start..end)
}

/// Most digits of a length read here (a length under 10^9 fits any
/// `usize`); a longer one, over the default 512 MB limit anyway, is the
/// general parser's.
const LEN_DIGITS: usize = 9;

/// The length in the `$N` line at `pos`, and where the string starts:
/// the line's plain digits (no sign, no leading zero, at most
/// [`LEN_DIGITS`]) up to its CR, the byte after which is skipped unseen
/// as `count_line` does. `None` for anything else, left to the general
/// parser. (Written apart from `count_line`, which also reads signs and
/// the longest counts and says why it stops: about half its instructions,
/// twice per SET.)
#[inline(always)]
fn bulk_len(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let mut n = usize::from(buf.get(pos + 1)?.wrapping_sub(b'0'));
    if n > 9 {
        return None;
    }
    let mut i = pos + 2;
    if n == 0 {
        // `$0` alone: an empty string.
        return (*buf.get(i)? == b'\r' && i + 2 <= buf.len()).then_some((0, i + 2));
    }
    loop {
        let d = buf.get(i)?.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if i > pos + LEN_DIGITS {
            return None;
        }
        n = n * 10 + usize::from(d);
        i += 1;
    }
    (buf[i] == b'\r' && i + 2 <= buf.len()).then_some((n, i + 2))
}
