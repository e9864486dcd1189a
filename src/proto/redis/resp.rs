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

/// The number of the header line `<kind><n>\r\n` at the front of `buf`
/// (an array's `*n`, a push's `>n`, a bulk's `$n`, an integer's `:n`) and
/// what follows that line; `None` for another kind or a malformed line.
pub fn header(buf: &[u8], kind: u8) -> Option<(i64, &[u8])> {
    let rest = buf.strip_prefix(&[kind])?;
    let nl = memchr::memchr(b'\n', rest)?;
    let n = parse_int(rest[..nl].strip_suffix(b"\r")?)?;
    Some((n, &rest[nl + 1..]))
}

/// The bulk string at the front of `buf`: its payload and what follows the
/// payload (its `\r\n` first); `None` for a null bulk, another kind, or a
/// payload not all there.
pub fn bulk(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (n, rest) = header(buf, b'$')?;
    let n = usize::try_from(n).ok()?;
    Some((rest.get(..n)?, &rest[n..]))
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

/// One reply walked as its bytes arrive, for passing it on in pieces: the
/// values still owed (a count, as in [`scan_value`], so nesting costs
/// nothing) and the bytes left of the bulk or blob body being passed.
/// Agrees with [`parse_response`] on where a reply ends and on what is an
/// error, however the reply is cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyCursor {
    /// Values still expected before the reply is complete.
    pending: u64,
    /// Bytes left of the current bulk or blob body, its CRLF included.
    body: usize,
    /// Bytes of the reply consumed so far.
    pos: usize,
}

impl Default for ReplyCursor {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyCursor {
    /// A cursor at the start of a reply.
    pub fn new() -> Self {
        ReplyCursor {
            pending: 1,
            body: 0,
            pos: 0,
        }
    }

    /// Bytes of the reply consumed so far.
    pub fn consumed(&self) -> usize {
        self.pos
    }

    /// Whether the whole reply has been consumed.
    pub fn is_done(&self) -> bool {
        self.pending == 0 && self.body == 0
    }

    /// Consume what `input` (the bytes after those already consumed) holds
    /// of the reply: every whole header line and as much of a bulk body as
    /// is there; a header line not yet complete is left. Returns the bytes
    /// consumed and whether the reply is now complete; the bytes after it
    /// are not looked at.
    pub fn advance(&mut self, input: &[u8]) -> Result<(usize, bool), ResponseError> {
        let mut at = 0;
        while !self.is_done() {
            if self.body > 0 {
                let avail = input.len() - at;
                let n = if avail >= self.body {
                    let end = at + self.body;
                    if &input[end - 2..end] != b"\r\n" {
                        return Err(err("bulk string not terminated by CRLF"));
                    }
                    self.body
                } else {
                    // The body's CRLF is consumed whole, once checked.
                    avail.min(self.body - 2)
                };
                if n == 0 {
                    break;
                }
                self.body -= n;
                self.pos += n;
                at += n;
                continue;
            }
            let Some(&kind) = input.get(at) else {
                break;
            };
            let rest = &input[at + 1..];
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                break;
            };
            if nl == 0 || rest[nl - 1] != b'\r' {
                return Err(err("reply line not terminated by CRLF"));
            }
            let line = &rest[..nl - 1];
            let len = 1 + nl + 1;
            match kind {
                b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
                    if kind == b':' && parse_int(line).is_none() {
                        return Err(err("invalid integer reply"));
                    }
                    self.pending -= 1;
                }
                b'$' | b'!' | b'=' => {
                    let n = parse_int(line).ok_or_else(|| err("invalid bulk length"))?;
                    if n != -1 || kind != b'$' {
                        let n = usize::try_from(n).map_err(|_| err("negative bulk length"))?;
                        let body = n
                            .checked_add(2)
                            .filter(|&b| {
                                (self.pos + len)
                                    .checked_add(b)
                                    .is_some_and(|e| e <= isize::MAX as usize)
                            })
                            .ok_or_else(|| err("bulk length too large"))?;
                        self.body = body;
                    }
                    self.pending -= 1;
                }
                b'*' | b'~' | b'>' | b'%' | b'|' => {
                    let n = parse_int(line).ok_or_else(|| err("invalid aggregate length"))?;
                    if n == -1 && (kind == b'*' || kind == b'%') {
                        self.pending -= 1;
                    } else {
                        let n = u64::try_from(n).map_err(|_| err("negative aggregate length"))?;
                        let items = if kind == b'%' || kind == b'|' {
                            n.checked_mul(2)
                        } else {
                            Some(n)
                        };
                        // An attribute annotates the value after it.
                        let done = u64::from(kind != b'|');
                        self.pending = items
                            .and_then(|i| (self.pending - done).checked_add(i))
                            .ok_or_else(|| err("aggregate length too large"))?;
                    }
                }
                b'?' | b';' | b'.' => return Err(err("streamed RESP3 replies are not supported")),
                other => {
                    return Err(ResponseError(format!(
                        "unexpected reply type byte 0x{other:02x}"
                    )))
                }
            }
            self.pos += len;
            at += len;
        }
        Ok((at, self.is_done()))
    }
}

/// Parses one server reply of any RESP2 or RESP3 type at the start of `buf`.
///
/// `Incomplete { hint }` gives the total length the input must reach when a
/// bulk string is known to extend beyond it. An error reply (`-` or the
/// RESP3 blob error `!`) sets `is_error`.
pub fn parse_response(buf: &[u8]) -> Result<Parse<Response>, ResponseError> {
    let scan = match scan_common(buf) {
        Some(scan) => scan,
        None => scan_value(buf, 0)?,
    };
    match scan {
        Scan::End(len) => Ok(Parse::Done(Response {
            len,
            is_error: matches!(buf.first(), Some(b'-' | b'!')),
            values: 0,
        })),
        Scan::Incomplete(hint) => Ok(Parse::Incomplete { hint }),
    }
}

/// Digits a bulk length may have on the shortcut; longer ones (and any
/// other doubt) go to `scan_value`.
const COMMON_DIGITS: usize = 10;
/// Bytes a simple string may have on the shortcut (`+OK`, `+QUEUED`).
const COMMON_LINE: usize = 16;

/// The replies most requests get, a bulk string (or nil) and a short
/// simple string, scanned without the general loop: written by hand
/// because they are one per request on the reply path (about a hundred
/// instructions less than `scan_value`'s per reply). `None` whenever the
/// answer is anything but a definite end or a known missing length, so
/// every other case, errors included, is `scan_value`'s
/// (`reply_shortcut_agrees`).
#[inline(always)]
fn scan_common(buf: &[u8]) -> Option<Scan> {
    match *buf.first()? {
        b'$' => {
            if buf.get(1) == Some(&b'-') {
                return (buf.get(..5)? == b"$-1\r\n").then_some(Scan::End(5));
            }
            let mut n = 0usize;
            let mut i = 1;
            loop {
                match *buf.get(i)? {
                    c @ b'0'..=b'9' if i <= COMMON_DIGITS => n = n * 10 + usize::from(c - b'0'),
                    b'\r' => break,
                    _ => return None,
                }
                i += 1;
            }
            // No digits, or a leading zero: scan_value's error.
            if i == 1 || (buf[1] == b'0' && i > 2) || *buf.get(i + 1)? != b'\n' {
                return None;
            }
            let end = i + 2 + n + 2;
            if end > buf.len() {
                return Some(Scan::Incomplete(end));
            }
            (&buf[end - 2..end] == b"\r\n").then_some(Scan::End(end))
        }
        b'+' => {
            // SET's answer, matched whole before the search for its end.
            if buf.get(..5) == Some(b"+OK\r\n") {
                return Some(Scan::End(5));
            }
            let nl = memchr::memchr(b'\n', buf.get(..COMMON_LINE.min(buf.len()))?)?;
            (nl >= 2 && buf[nl - 1] == b'\r').then_some(Scan::End(nl + 1))
        }
        _ => None,
    }
}

/// Whether the shortcut of `parse_response` answers as `scan_value` does
/// wherever it answers (for the fuzz target and the tests).
pub fn reply_shortcut_agrees(buf: &[u8]) -> bool {
    match scan_common(buf) {
        None => true,
        Some(fast) => scan_value(buf, 0) == Ok(fast),
    }
}

/// A RESP value, as much of it as the proxy's own replies need (cluster
/// slot maps, Sentinel answers): integers, strings, arrays.
#[derive(Debug)]
pub(crate) enum Value<'a> {
    /// `:n`
    Int(i64),
    /// A simple or bulk string.
    Str(&'a [u8]),
    /// `*n` of values.
    Array(Vec<Value<'a>>),
    /// A null, a map, or another type read past.
    Other,
}

/// Parse one value at `buf[*at..]` (a whole reply is known to be there).
pub(crate) fn value<'a>(buf: &'a [u8], at: &mut usize, depth: u32) -> Option<Value<'a>> {
    if depth > 8 {
        return None;
    }
    let kind = *buf.get(*at)?;
    let eol = buf[*at..].windows(2).position(|w| w == b"\r\n")? + *at;
    let line = std::str::from_utf8(&buf[*at + 1..eol]).ok()?;
    *at = eol + 2;
    match kind {
        b':' => Some(Value::Int(line.parse().ok()?)),
        b'+' => Some(Value::Str(&buf[eol - line.len()..eol])),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some(Value::Other);
            }
            let n = n as usize;
            let s = buf.get(*at..*at + n)?;
            *at += n + 2;
            Some(Value::Str(s))
        }
        b'*' | b'%' => {
            let n: i64 = line.parse().ok()?;
            let n = if kind == b'%' { n * 2 } else { n };
            let mut items = Vec::with_capacity(n.clamp(0, 1024) as usize);
            for _ in 0..n.max(0) {
                items.push(value(buf, at, depth + 1)?);
            }
            Some(if kind == b'*' {
                Value::Array(items)
            } else {
                Value::Other
            })
        }
        b'_' => Some(Value::Other),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_and_bulks() {
        assert_eq!(header(b"*2\r\nrest", b'*'), Some((2, &b"rest"[..])));
        assert_eq!(header(b">3\r\n", b'>'), Some((3, &b""[..])));
        assert_eq!(header(b":-7\r\n:1\r\n", b':'), Some((-7, &b":1\r\n"[..])));
        assert_eq!(header(b"$-1\r\n", b'$'), Some((-1, &b""[..])));
        for bad in [
            &b"*2\r\n"[..],
            b"$",
            b"$2",
            b"$2\n",
            b"$x\r\n",
            b"$02\r\n",
            b"$ 2\r\n",
        ] {
            assert_eq!(header(bad, b'$'), None, "{bad:?}");
        }
        assert_eq!(
            bulk(b"$3\r\nabc\r\n:1\r\n"),
            Some((&b"abc"[..], &b"\r\n:1\r\n"[..]))
        );
        assert_eq!(bulk(b"$0\r\n\r\n"), Some((&b""[..], &b"\r\n"[..])));
        assert_eq!(bulk(b"$-1\r\n"), None);
        assert_eq!(bulk(b"$5\r\nab\r\n"), None);
        assert_eq!(bulk(b"+OK\r\n"), None);
    }

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
                is_error: false,
                values: 0,
            })
        );
        assert_eq!(
            parse_response(&buf[..buf.len() - 1]).unwrap(),
            Parse::Incomplete { hint: 0 }
        );
    }

    /// Replies of every type, nested, null, empty, annotated.
    fn sample_replies() -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = [
            &b"+OK\r\n"[..],
            b"-ERR wrong\r\n",
            b":-42\r\n",
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"$4\r\n\r\n\r\n\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\n",
            b"*2\r\n*2\r\n$1\r\na\r\n*0\r\n*1\r\n*1\r\n+x\r\n",
            b"%2\r\n$1\r\nk\r\n$3\r\nval\r\n+k2\r\n*1\r\n:1\r\n",
            b"%0\r\n",
            b"%-1\r\n",
            b"~2\r\n+a\r\n+b\r\n",
            b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n",
            b"_\r\n",
            b",3.14\r\n",
            b"#t\r\n",
            b"(12345678901234567890\r\n",
            b"!8\r\nERR blob\r\n",
            b"=15\r\ntxt:Some string\r\n",
            b"|1\r\n+ttl\r\n:3600\r\n$2\r\nok\r\n",
            b"*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n|0\r\n$1\r\nz\r\n",
            b"|1\r\n+a\r\n|1\r\n+b\r\n+c\r\n*1\r\n+d\r\n+e\r\n",
        ]
        .iter()
        .map(|r| r.to_vec())
        .collect();
        let mut big = b"*3\r\n$300\r\n".to_vec();
        big.extend((0..300).map(|i| (i % 256) as u8));
        big.extend_from_slice(b"\r\n%1\r\n$2\r\n\r\n\r\n$-1\r\n:0\r\n");
        v.push(big);
        v
    }

    /// The reply shortcut answers as `scan_value` for every prefix of every
    /// sample and of malformed bulk and simple strings, and answers at all
    /// for the replies it is for.
    #[test]
    fn reply_shortcut_agrees_with_the_scanner() {
        let mut all = sample_replies();
        for bad in [
            &b"$01\r\nx\r\n"[..],
            b"$\r\n",
            b"$5\r\nhelloXY",
            b"$5\rXhello\r\n",
            b"$-2\r\n",
            b"$-1\rX",
            b"$+5\r\nhello\r\n",
            b"$12345678901\r\n",
            b"$99999999999999999999\r\n",
            b"+\n",
            b"+OK\n",
            b"+a long simple string past the shortcut\r\n",
        ] {
            all.push(bad.to_vec());
        }
        for r in &all {
            for cut in 0..=r.len() {
                assert!(reply_shortcut_agrees(&r[..cut]), "{:?}", &r[..cut]);
            }
        }
        for r in [
            &b"$5\r\nhello\r\n"[..],
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"+OK\r\n",
        ] {
            assert_eq!(scan_common(r), Some(Scan::End(r.len())), "{r:?}");
        }
        assert_eq!(scan_common(b"$5\r\nhel"), Some(Scan::Incomplete(11)));
    }

    /// Feeds `data` cut at `cuts` the way a connection's input grows: what
    /// the cursor leaves unconsumed stays at the front of the next call.
    /// Returns the consumed total and whether the reply completed; checks
    /// that no more than a header line is ever left behind.
    fn feed(data: &[u8], cuts: &[usize]) -> Result<(usize, bool), ResponseError> {
        let mut cur = ReplyCursor::new();
        let mut start = 0;
        for &end in cuts.iter().chain(std::iter::once(&data.len())) {
            let (n, done) = cur.advance(&data[start..end])?;
            start += n;
            assert_eq!(cur.consumed(), start);
            if done {
                return Ok((start, true));
            }
            let left = &data[start..end];
            assert!(
                left.len() <= 2 || !left[1..].contains(&b'\n'),
                "a whole header line left: {left:?}"
            );
        }
        Ok((start, false))
    }

    fn whole(data: &[u8]) -> Result<(usize, bool), ResponseError> {
        match parse_response(data)? {
            Parse::Done(r) => Ok((r.len, true)),
            Parse::Incomplete { .. } => Ok((0, false)),
        }
    }

    fn agree(data: &[u8]) {
        let want = whole(data);
        let check = |got: Result<(usize, bool), ResponseError>, how: &str| match (&want, &got) {
            (Ok((n, true)), Ok((m, true))) => assert_eq!(n, m, "{how} {data:?}"),
            (Ok((_, false)), Ok((m, false))) => assert!(*m <= data.len()),
            (Err(a), Err(b)) => assert_eq!(a, b, "{how} {data:?}"),
            _ => panic!("{how} {data:?}: cursor {got:?}, whole {want:?}"),
        };
        check(feed(data, &[]), "whole");
        for cut in 0..=data.len() {
            check(feed(data, &[cut]), "one cut");
        }
        let every: Vec<usize> = (0..data.len()).collect();
        check(feed(data, &every), "byte by byte");
    }

    #[test]
    fn cursor_agrees_with_the_whole_parser() {
        for r in sample_replies() {
            assert!(matches!(whole(&r), Ok((n, true)) if n == r.len()), "{r:?}");
            agree(&r);
            // Every prefix: incomplete for both.
            for cut in 0..r.len() {
                agree(&r[..cut]);
            }
            // Followed by more: the cursor stops at the reply's end.
            let mut two = r.clone();
            two.extend_from_slice(b"+next\r\n");
            agree(&two);
        }
    }

    #[test]
    fn cursor_errors_like_the_whole_parser() {
        for bad in [
            &b"$3\r\nabcXY"[..],
            b"$3\r\nabc\rX",
            b"$3\r\nabc\n\r",
            b"*2\r\n$1\r\naXX$1\r\nb\r\n",
            b"$x\r\n",
            b"$-2\r\n",
            b"*-2\r\n",
            b"~-1\r\n",
            b"!-1\r\n",
            b":1.5\r\n",
            b"+OK\n",
            b"*1\r\n+OK\rX\n",
            b"?\r\n",
            b"*1\r\n.\r\n",
            b"x\r\n",
            b"*1\r\n\0\r\n",
            b"$9223372036854775807\r\n",
            b"*9223372036854775807\r\n*9223372036854775807\r\n*9223372036854775807\r\n",
            b"%9223372036854775807\r\n%9223372036854775807\r\n",
            b"|9223372036854775807\r\n|9223372036854775807\r\n",
        ] {
            assert!(whole(bad).is_err(), "{bad:?}");
            agree(bad);
        }
    }

    #[test]
    fn cursor_passes_a_large_body_in_pieces() {
        let n = 3_000_000;
        let mut r = format!("*2\r\n${n}\r\n").into_bytes();
        r.resize(r.len() + n, b'v');
        r.extend_from_slice(b"\r\n:1\r\n");
        let mut cur = ReplyCursor::new();
        // The header lines and all of the body but its CRLF.
        assert_eq!(
            cur.advance(&r[..r.len() - 5]).unwrap(),
            (r.len() - 6, false)
        );
        assert_eq!(
            cur.advance(&r[r.len() - 6..r.len() - 5]).unwrap(),
            (0, false)
        );
        assert_eq!(
            cur.advance(&r[r.len() - 6..r.len() - 2]).unwrap(),
            (2, false)
        );
        assert_eq!(cur.advance(&r[r.len() - 4..]).unwrap(), (4, true));
        assert_eq!(cur.consumed(), r.len());
        assert!(cur.is_done());
    }

    #[test]
    fn cursor_deep_nesting() {
        let depth = 100_000;
        let mut buf = b"*1\r\n".repeat(depth);
        buf.extend_from_slice(b":1\r\n");
        let mut cur = ReplyCursor::new();
        assert_eq!(
            cur.advance(&buf[..buf.len() - 1]).unwrap(),
            (buf.len() - 4, false)
        );
        assert_eq!(cur.advance(&buf[buf.len() - 4..]).unwrap(), (4, true));
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
