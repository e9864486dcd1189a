//! Text protocol replies from a server: framing per operation, so the data
//! path knows where each reply ends and whether it is an error.

use std::ops::Range;

use memchr::memchr;

use super::McOp;
use crate::proto::{Parse, Response, ResponseError};

/// Longest reply line (values excluded) before the server is deemed broken.
const MAX_REPLY_LINE: usize = 8192;

/// Shortest possible end of a retrieval reply: `END\n`.
const END_LEN: usize = 4;

/// The line starting at `pos`: its content (without `\r\n` or `\n`) and the
/// offset just past it, or `None` if its end has not arrived.
fn read_line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, ResponseError> {
    let rest = buf.get(pos..).unwrap_or_default();
    match memchr(b'\n', rest) {
        Some(i) if i > MAX_REPLY_LINE => Err(ResponseError("memcached reply line too long".into())),
        Some(i) => {
            let mut line = &rest[..i];
            if let [head @ .., b'\r'] = line {
                line = head;
            }
            Ok(Some((line, pos + i + 1)))
        }
        None if rest.len() > MAX_REPLY_LINE => {
            Err(ResponseError("memcached reply line too long".into()))
        }
        None => Ok(None),
    }
}

/// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`.
pub(crate) fn is_error_line(line: &[u8]) -> bool {
    fn word(line: &[u8], w: &[u8]) -> bool {
        line.starts_with(w) && matches!(line.get(w.len()), None | Some(b' '))
    }
    word(line, b"ERROR") || word(line, b"CLIENT_ERROR") || word(line, b"SERVER_ERROR")
}

fn all_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// A `VALUE <key> <flags> <bytes> [<cas>]` line: the key's range within
/// the line and the data length.
pub(crate) fn value_header(line: &[u8]) -> Option<(Range<usize>, usize)> {
    // One pass over the line, each field read where it starts: this runs
    // once per value of every reply.
    let rest = line.strip_prefix(b"VALUE ")?;
    let key_len = memchr::memchr(b' ', rest).filter(|&n| n > 0)?;
    let (_flags, at) = digit_field(rest, key_len + 1, 10)?;
    let (bytes, at) = digit_field(rest, at + 1, 10)?;
    if at < rest.len() {
        let (_cas, end) = digit_field(rest, at + 1, 20)?;
        if end != rest.len() {
            return None;
        }
    }
    Some((6..6 + key_len, bytes as usize))
}

/// The field of 1 to `max` digits at `from` of `s`, ending at a space or at
/// the end of `s`: its value (wrapping past u64, for a `cas` of 20 digits)
/// and where it ends.
#[inline]
fn digit_field(s: &[u8], from: usize, max: usize) -> Option<(u64, usize)> {
    let field = s.get(from..)?;
    let len = field.iter().position(|&b| b == b' ').unwrap_or(field.len());
    let digits = &field[..len];
    if digits.is_empty() || len > max {
        return None;
    }
    let mut v: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
    }
    Some((v, from + len))
}

/// One `VALUE` entry of a retrieval reply: the key's range and the range of
/// the whole entry (header line, data, `\r\n`) in the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueEntry {
    pub key: Range<usize>,
    pub entry: Range<usize>,
}

/// Outcome of walking a retrieval reply.
enum Walk {
    /// Reply complete at this length; `true` if it is an error reply.
    Done(usize, bool),
    /// More bytes needed: minimum total length.
    Incomplete(usize),
}

/// Walk the values of a retrieval reply, reporting each to `each`.
fn walk_values(buf: &[u8], mut each: impl FnMut(ValueEntry)) -> Result<Walk, ResponseError> {
    let mut pos = 0;
    loop {
        let Some((line, next)) = read_line(buf, pos)? else {
            return Ok(Walk::Incomplete((buf.len() + 1).max(pos + END_LEN)));
        };
        if line == b"END" {
            return Ok(Walk::Done(next, false));
        }
        if is_error_line(line) {
            return Ok(Walk::Done(next, true));
        }
        let Some((key, n)) = value_header(line) else {
            return Err(unexpected(line));
        };
        let end = next.saturating_add(n).saturating_add(2);
        if buf.len() < end {
            return Ok(Walk::Incomplete(end.saturating_add(END_LEN)));
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(ResponseError("memcached value not followed by CRLF".into()));
        }
        each(ValueEntry {
            key: pos + key.start..pos + key.end,
            entry: pos..end,
        });
        pos = end;
    }
}

/// The `VALUE` entries of a complete retrieval reply (none if it is an
/// error or does not parse).
pub(crate) fn value_entries(reply: &[u8]) -> Vec<ValueEntry> {
    let mut out = Vec::new();
    if for_each_value(reply, |e| out.push(e)) {
        out
    } else {
        Vec::new()
    }
}

/// Report each `VALUE` entry of a complete retrieval reply to `each`, in
/// order, with no list built; false (after reporting those before the
/// fault) if the reply is an error or does not parse.
#[inline]
pub(crate) fn for_each_value(reply: &[u8], each: impl FnMut(ValueEntry)) -> bool {
    matches!(walk_values(reply, each), Ok(Walk::Done(_, false)))
}

fn unexpected(line: &[u8]) -> ResponseError {
    let shown: String = String::from_utf8_lossy(&line[..line.len().min(64)]).into();
    ResponseError(format!("unexpected memcached reply: {shown:?}"))
}

/// Parse one reply to a request of operation `op` at the start of `buf`.
///
/// Retrievals are `VALUE` entries closed by `END`; other commands answer one
/// line (`stats` several, closed by `END`). `ERROR`, `CLIENT_ERROR` and
/// `SERVER_ERROR` lines end any reply and set `is_error`. While a value's
/// data is in flight, `Incomplete::hint` covers at least that data and an
/// `END` line, so a large value is not scanned again on every read.
pub fn parse_response(buf: &[u8], op: McOp) -> Result<Parse<Response>, ResponseError> {
    if op.is_retrieval() {
        let mut values = 0u32;
        return Ok(
            match walk_values(buf, |_| values = values.saturating_add(1))? {
                Walk::Done(len, is_error) => Parse::Done(Response {
                    len,
                    is_error,
                    values,
                }),
                Walk::Incomplete(hint) => Parse::Incomplete { hint },
            },
        );
    }
    let mut pos = 0;
    loop {
        let Some((line, next)) = read_line(buf, pos)? else {
            return Ok(Parse::Incomplete {
                hint: buf.len() + 1,
            });
        };
        let done = |is_error| {
            Ok(Parse::Done(Response {
                len: next,
                is_error,
                values: 0,
            }))
        };
        if is_error_line(line) {
            return done(true);
        }
        let ok = match op {
            McOp::Set | McOp::Add | McOp::Replace | McOp::Append | McOp::Prepend | McOp::Cas => {
                matches!(line, b"STORED" | b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND")
            }
            McOp::Delete => matches!(line, b"DELETED" | b"NOT_FOUND"),
            McOp::Incr | McOp::Decr => {
                line == b"NOT_FOUND" || (all_digits(line) && line.len() <= 20)
            }
            McOp::Touch => matches!(line, b"TOUCHED" | b"NOT_FOUND"),
            McOp::FlushAll | McOp::Verbosity => line == b"OK",
            McOp::Version => line.starts_with(b"VERSION "),
            McOp::Stats => {
                if line == b"END" {
                    return done(false);
                }
                if line.starts_with(b"STAT ") {
                    pos = next;
                    continue;
                }
                false
            }
            _ => false,
        };
        if ok {
            return done(false);
        }
        return Err(unexpected(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retrieval reply's `VALUE` entries are counted as it is parsed
    /// (the hits), up to an error line that ends it; other replies carry 0.
    #[test]
    fn retrieval_replies_count_their_values() {
        let values = |r: &[u8], op| match parse_response(r, op) {
            Ok(Parse::Done(rsp)) => rsp.values,
            other => panic!("{r:?}: {other:?}"),
        };
        assert_eq!(values(b"END\r\n", McOp::Get), 0);
        assert_eq!(values(b"VALUE a 0 1\r\nx\r\nEND\r\n", McOp::Get), 1);
        let two = b"VALUE a 0 1\r\nx\r\nVALUE b 0 3 7\r\nEND\r\nEND\r\n";
        assert_eq!(values(two, McOp::Gets), 2);
        assert_eq!(
            values(b"VALUE a 0 1\r\nx\r\nSERVER_ERROR out\r\n", McOp::Get),
            1
        );
        assert_eq!(values(b"STORED\r\n", McOp::Set), 0);
    }

    /// The header parser as first written (split on spaces): the oracle.
    fn value_header_split(line: &[u8]) -> Option<(Range<usize>, usize)> {
        let rest = line.strip_prefix(b"VALUE ")?;
        let mut parts = rest.split(|&b| b == b' ');
        let key = parts.next().filter(|k| !k.is_empty())?;
        let flags = parts.next().filter(|f| all_digits(f) && f.len() <= 10)?;
        let bytes = parts.next().filter(|b| all_digits(b) && b.len() <= 10)?;
        if let Some(cas) = parts.next() {
            if !all_digits(cas) || cas.len() > 20 {
                return None;
            }
        }
        if parts.next().is_some() {
            return None;
        }
        let _ = flags;
        let n = std::str::from_utf8(bytes).ok()?.parse::<usize>().ok()?;
        Some((6..6 + key.len(), n))
    }

    #[test]
    fn value_header_agrees_with_the_split_parser() {
        let lines: [&[u8]; 16] = [
            b"VALUE a 0 1",
            b"VALUE key 12 100 5",
            b"VALUE a 0",
            b"VALUE a x 1",
            b"VALUE a 0 1 2 3",
            b"VALUE  0 1",
            b"VALUE a 0 99999999999",
            b"VALUE a 0 1 ",
            b"VALUE a  0 1",
            b"VALUE a 4294967295 9999999999 18446744073709551615",
            b"VALUE a 0 1 184467440737095516159",
            b"VALUE a 00 01",
            b"VALUE a",
            b"VALUE ",
            b"VALUE a 0 1x",
            b"VALUEa 0 1",
        ];
        for line in lines {
            assert_eq!(value_header(line), value_header_split(line), "{line:?}");
        }
    }

    #[test]
    fn big_value_hint() {
        let mut r = b"VALUE k 0 100000\r\n".to_vec();
        r.extend_from_slice(&[b'x'; 1000]);
        assert_eq!(
            parse_response(&r, McOp::Get).unwrap(),
            Parse::Incomplete {
                hint: 18 + 100_002 + 4
            }
        );
    }

    #[test]
    fn entries() {
        let r = b"VALUE a 0 1\r\nx\r\nVALUE bb 5 2 7\r\nyy\r\nEND\r\n";
        let e = value_entries(r);
        assert_eq!(e.len(), 2);
        assert_eq!(&r[e[1].key.clone()], b"bb");
        assert_eq!(&r[e[1].entry.clone()], b"VALUE bb 5 2 7\r\nyy\r\n");
    }

    #[test]
    fn header_rejects_junk() {
        assert!(value_header(b"VALUE a 0").is_none());
        assert!(value_header(b"VALUE a x 1").is_none());
        assert!(value_header(b"VALUE a 0 1 2 3").is_none());
        assert!(value_header(b"VALUE  0 1").is_none());
        assert!(value_header(b"VALUE a 0 99999999999").is_none());
    }
}
