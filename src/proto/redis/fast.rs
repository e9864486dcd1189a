//! `GET key` and `SET key value` as RESP arrays, the requests that make up
//! most of a cache's traffic, recognised by their first bytes without the
//! general scan (argument framing, command lookup, key specs, route
//! checks). The answer is exactly the general parser's (a unit test and
//! the `redis_resp` fuzz target hold them to it); anything else, or either
//! of them incomplete, goes the general way.

use super::args::{count_line, PRE_AUTH_MAX_BULK};
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
#[inline]
fn bulk(buf: &[u8], pos: usize, limits: &Limits) -> Option<Range<usize>> {
    let (n, start) = count_line(buf, pos, "").ok()?;
    let n = usize::try_from(n?).ok()?;
    if n > limits.max_value || n > isize::MAX as usize / 2 {
        return None;
    }
    if limits.pre_auth && n > PRE_AUTH_MAX_BULK {
        return None;
    }
    let end = start.checked_add(n)?;
    // Like the general parser, the two bytes after the value are its CRLF
    // unseen.
    (end + 2 <= buf.len()).then_some(start..end)
}

/// Whether the shortcut, where it answers for `buf`, answers as the
/// general parser does (the fuzz target's and the tests' invariant).
#[doc(hidden)]
pub fn shortcut_agrees(buf: &[u8], limits: &Limits) -> bool {
    match get_or_set(buf, limits) {
        None => true,
        Some(fast) => matches!(
            super::request::scan_general(buf, limits),
            Ok(crate::proto::Parse::Done(g)) if g == fast
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Parse, RequestError};

    fn general(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
        super::super::request::scan_general(buf, limits)
    }

    fn limits(max_value: usize, max_keys: usize, pre_auth: bool) -> Limits {
        Limits {
            max_value,
            max_keys,
            pre_auth,
        }
    }

    /// Every input the fast path answers gets the same answer from the
    /// general parser.
    fn agree(buf: &[u8], l: &Limits) -> bool {
        shortcut_agrees(buf, l)
            && get_or_set(buf, l)
                .is_none_or(|f| matches!(general(buf, l), Ok(Parse::Done(g)) if g == f))
    }

    #[test]
    fn plain_get_and_set() {
        let l = limits(1 << 20, 1000, false);
        let r = get_or_set(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\nrest", &l).unwrap();
        assert_eq!(r.len, 22);
        assert_eq!(r.keys.first(), Some(&(17..20)));
        let r = get_or_set(b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$2\r\nab\r\n", &l).unwrap();
        assert_eq!(r.len, 28);
        assert_eq!(r.keys.first(), Some(&(17..18)));
        for buf in [
            &b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n"[..],
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nab\r\n",
            b"*3\r\n$3\r\nset\r\n$0\r\n\r\n$0\r\n\r\n",
        ] {
            assert!(agree(buf, &l));
            assert!(get_or_set(buf, &l).is_some());
        }
    }

    #[test]
    fn others_go_the_general_way() {
        let l = limits(1 << 20, 1000, false);
        for buf in [
            &b"*2\r\n$3\r\nGet\r\n$3\r\nfoo\r\n"[..],
            b"*3\r\n$3\r\nGET\r\n$3\r\nfoo\r\n$1\r\nx\r\n",
            b"*2\r\n$3\r\nSET\r\n$3\r\nfoo\r\n",
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n",
            b"*2\r\n$3\r\nGET\r\n$3\r\nfo",
            b"*2\r\n$3\r\nGET\r\n$-1\r\n",
            b"*2\r\n$3\r\nGET\r\n$03\r\nfoo\r\n",
            b"*2\r\n$3\r\nGET\r\n:3\r\nfoo\r\n",
        ] {
            assert!(agree(buf, &l), "{:?}", String::from_utf8_lossy(buf));
        }
        assert!(get_or_set(b"*2\r\n$3\r\nGet\r\n$3\r\nfoo\r\n", &l).is_none());
        assert!(get_or_set(b"*2\r\n$3\r\nGET\r\n$3\r\nfo", &l).is_none());
        // Limits: a key over max_value, a pre-auth bulk over 16 KiB.
        assert!(get_or_set(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n", &limits(2, 10, false)).is_none());
        let mut big = b"*2\r\n$3\r\nGET\r\n$16385\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'k', 16385));
        big.extend_from_slice(b"\r\n");
        assert!(get_or_set(&big, &limits(1 << 20, 10, true)).is_none());
        assert!(get_or_set(&big, &limits(1 << 20, 10, false)).is_some());
    }

    /// Mutations of GET and SET requests, cut and changed byte by byte,
    /// under several limits: wherever the fast path answers, the general
    /// parser answers the same.
    #[test]
    fn agrees_with_the_general_parser() {
        let seeds: [&[u8]; 3] = [
            b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n*1\r\n$4\r\nPING\r\n",
            b"*3\r\n$3\r\nset\r\n$2\r\nab\r\n$5\r\nhello\r\n",
            b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$10\r\n0123456789\r\n",
        ];
        let all = [
            limits(1 << 20, 1000, false),
            limits(1 << 20, 1000, true),
            limits(4, 1000, false),
            limits(1 << 20, 0, false),
            limits(2, 1, false),
        ];
        let alphabet = b"*$\r\n0123-GETSetx";
        let mut checked = 0;
        for seed in seeds {
            for cut in 0..=seed.len() {
                let buf = &seed[..cut];
                for l in &all {
                    assert!(agree(buf, l), "{:?}", String::from_utf8_lossy(buf));
                }
            }
            for i in 0..seed.len() {
                for &b in alphabet {
                    let mut buf = seed.to_vec();
                    buf[i] = b;
                    for l in &all {
                        assert!(agree(&buf, l), "{:?}", String::from_utf8_lossy(&buf));
                        checked += usize::from(get_or_set(&buf, l).is_some());
                    }
                }
            }
        }
        assert!(checked > 100);
    }
}
