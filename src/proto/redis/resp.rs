//! RESP2/RESP3 scanning: integers as redis-server reads them, and replies of
//! any type and nesting depth, without recursion and without allocation.

use crate::proto::{Parse, Response, ResponseError};

/// Parses a decimal integer the way redis-server does (`string2ll`): an
/// optional `-`, no `+`, no leading zeros, no spaces, at most 20 bytes.
pub fn parse_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i128).wrapping_neg() as i64)
        }
    } else {
        i64::try_from(v).ok()
    }
}

fn err(msg: &str) -> ResponseError {
    ResponseError(msg.to_string())
}

/// Outcome of scanning one reply value starting at some offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// The value ends at this offset (exclusive).
    End(usize),
    /// More input is needed; the input must reach at least this length
    /// (0 when unknown).
    Incomplete(usize),
}

/// Scans one complete reply value starting at `start`, however deeply
/// nested. Aggregates only add to a count of values still expected, so no
/// stack is needed.
pub(crate) fn scan_value(buf: &[u8], start: usize) -> Result<Scan, ResponseError> {
    let mut pos = start;
    // Values still expected before the reply is complete.
    let mut pending: u64 = 1;
    while pending > 0 {
        let Some(&kind) = buf.get(pos) else {
            return Ok(Scan::Incomplete(0));
        };
        let rest = &buf[pos + 1..];
        let Some(nl) = memchr::memchr(b'\n', rest) else {
            return Ok(Scan::Incomplete(0));
        };
        if nl == 0 || rest[nl - 1] != b'\r' {
            return Err(err("reply line not terminated by CRLF"));
        }
        let line = &rest[..nl - 1];
        let next = pos + 1 + nl + 1;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
                if kind == b':' && parse_int(line).is_none() {
                    return Err(err("invalid integer reply"));
                }
                pos = next;
                pending -= 1;
            }
            b'$' | b'!' | b'=' => {
                let n = parse_int(line).ok_or_else(|| err("invalid bulk length"))?;
                if n == -1 && kind == b'$' {
                    pos = next;
                } else {
                    let n = usize::try_from(n).map_err(|_| err("negative bulk length"))?;
                    let end = next
                        .checked_add(n)
                        .and_then(|e| e.checked_add(2))
                        .filter(|&e| e <= isize::MAX as usize)
                        .ok_or_else(|| err("bulk length too large"))?;
                    if end > buf.len() {
                        return Ok(Scan::Incomplete(end));
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(err("bulk string not terminated by CRLF"));
                    }
                    pos = end;
                }
                pending -= 1;
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = parse_int(line).ok_or_else(|| err("invalid aggregate length"))?;
                pos = next;
                if n == -1 && (kind == b'*' || kind == b'%') {
                    pending -= 1;
                    continue;
                }
                let n = u64::try_from(n).map_err(|_| err("negative aggregate length"))?;
                let items = if kind == b'%' || kind == b'|' {
                    n.checked_mul(2)
                } else {
                    Some(n)
                };
                // An attribute (`|`) precedes the value it annotates: it does
                // not count as that value.
                let done = u64::from(kind != b'|');
                pending = items
                    .and_then(|i| (pending - done).checked_add(i))
                    .ok_or_else(|| err("aggregate length too large"))?;
            }
            b'?' | b';' | b'.' => return Err(err("streamed RESP3 replies are not supported")),
            other => {
                return Err(ResponseError(format!(
                    "unexpected reply type byte 0x{other:02x}"
                )))
            }
        }
    }
    Ok(Scan::End(pos))
}

/// The header of a bulk string reply (`$<len>\r\n`) at the start of
/// `buf`: its length and the value's length. `None` when `buf` does not
/// start with a whole, valid header of a non-null bulk string.
pub fn bulk_header(buf: &[u8]) -> Option<(usize, usize)> {
    if buf.first() != Some(&b'$') {
        return None;
    }
    let nl = memchr::memchr(b'\n', buf)?;
    if nl < 2 || buf[nl - 1] != b'\r' {
        return None;
    }
    let n = usize::try_from(parse_int(&buf[1..nl - 1])?).ok()?;
    Some((nl + 1, n))
}

/// Parses one server reply of any RESP2 or RESP3 type at the start of `buf`.
///
/// `Incomplete { hint }` gives the total length the input must reach when a
/// bulk string is known to extend beyond it. An error reply (`-` or the
/// RESP3 blob error `!`) sets `is_error`.
pub fn parse_response(buf: &[u8]) -> Result<Parse<Response>, ResponseError> {
    match scan_value(buf, 0)? {
        Scan::End(len) => Ok(Parse::Done(Response {
            len,
            is_error: matches!(buf.first(), Some(b'-' | b'!')),
        })),
        Scan::Incomplete(hint) => Ok(Parse::Incomplete { hint }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_like_string2ll() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-1"), Some(-1));
        assert_eq!(parse_int(b"123"), Some(123));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"+1",
            b"01",
            b"-0",
            b"-",
            b"1x",
            b" 1",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"111111111111111111111",
        ] {
            assert_eq!(parse_int(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let depth = 1_000_000;
        let mut buf = b"*1\r\n".repeat(depth);
        buf.extend_from_slice(b":1\r\n");
        let r = parse_response(&buf).unwrap();
        assert_eq!(
            r,
            Parse::Done(Response {
                len: buf.len(),
                is_error: false
            })
        );
        assert_eq!(
            parse_response(&buf[..buf.len() - 1]).unwrap(),
            Parse::Incomplete { hint: 0 }
        );
    }

    #[test]
    fn bulk_headers() {
        assert_eq!(bulk_header(b"$5\r\nhello\r\n"), Some((4, 5)));
        assert_eq!(bulk_header(b"$3000000\r\nab"), Some((10, 3_000_000)));
        assert_eq!(bulk_header(b"$-1\r\n"), None);
        assert_eq!(bulk_header(b"$12"), None);
        assert_eq!(bulk_header(b"+OK\r\n"), None);
        assert_eq!(bulk_header(b"$1x\r\n"), None);
    }

    #[test]
    fn bulk_hint() {
        assert_eq!(
            parse_response(b"$10\r\nabc").unwrap(),
            Parse::Incomplete { hint: 17 }
        );
        assert_eq!(
            parse_response(b"*2\r\n:1\r\n$3\r\nab").unwrap(),
            Parse::Incomplete { hint: 17 }
        );
    }
}
