//! The arguments of one request, framed and read without allocation:
//! RESP arrays of bulk strings and inline commands (redis-server's rules
//! and limits), and the unknown-command reply that quotes them.

use super::inline::{unescape, Tokens, Unbalanced};
use super::reply::push_line;
use super::resp::parse_int;
use crate::proto::Limits;
use std::ops::Range;

/// Longest count line or inline command redis-server accepts.
pub(super) const INLINE_MAX: usize = 64 * 1024;
/// Most arguments accepted in one request.
pub(super) const MAX_ARGS: usize = 1024 * 1024;
/// Most arguments redis-server reads from a client that has not
/// authenticated to a server that requires it.
pub(super) const PRE_AUTH_MAX_ARGS: usize = 10;
/// Longest bulk string redis-server reads from such a client.
pub(super) const PRE_AUTH_MAX_BULK: usize = 16384;

/// One argument of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// Where the argument's bytes are in the request.
    pub range: Range<usize>,
    /// `range` is exactly the argument's value. Only an inline argument with
    /// escapes or inner quotes is not exact; [`Args::value`] interprets it.
    pub exact: bool,
}

/// Why a request cannot be parsed (yet).
#[derive(Debug)]
pub(crate) enum Stop {
    /// More input needed; the input must reach this length (0 if unknown).
    Incomplete(usize),
    /// Unrecoverable framing error: this reply, then close.
    Protocol(Vec<u8>),
}

pub(super) fn protocol(what: &str) -> Stop {
    let mut out = Vec::with_capacity(32 + what.len());
    out.extend_from_slice(b"-ERR Protocol error: ");
    out.extend_from_slice(what.as_bytes());
    out.extend_from_slice(b"\r\n");
    Stop::Protocol(out)
}

#[derive(Debug)]
pub(super) enum Kind<'a> {
    Multibulk { remaining: usize },
    Inline { tokens: Tokens<'a>, next: usize },
}

/// The arguments of one request, in order. Empty arrays (`*0`, `*-1`) and
/// blank inline lines before the request are skipped as redis-server skips
/// them; they count in the request's length.
#[derive(Debug)]
pub struct Args<'a> {
    pub(super) buf: &'a [u8],
    pub(super) kind: Kind<'a>,
    pub(super) pos: usize,
    pub(super) max_value: usize,
    pub(super) pre_auth: bool,
}

impl<'a> Args<'a> {
    /// The arguments of a request already accepted by [`parse_request`]
    /// (`req` is exactly its bytes).
    pub fn new(req: &'a [u8]) -> Args<'a> {
        let limits = Limits {
            max_value: usize::MAX,
            max_keys: usize::MAX,
            pre_auth: false,
        };
        Args::frame(req, &limits).unwrap_or(Args {
            buf: req,
            kind: Kind::Multibulk { remaining: 0 },
            pos: 0,
            max_value: 0,
            pre_auth: false,
        })
    }

    /// Finds where the request at the start of `buf` begins and what kind
    /// it is.
    pub(crate) fn frame(buf: &'a [u8], limits: &Limits) -> Result<Args<'a>, Stop> {
        let mut pos = 0;
        loop {
            let Some(&first) = buf.get(pos) else {
                return Err(Stop::Incomplete(0));
            };
            if first == b'*' {
                let (n, after) = count_line(buf, pos, "too big mbulk count string")?;
                let n = n.ok_or_else(|| protocol("invalid multibulk length"))?;
                if n <= 0 {
                    pos = after;
                    continue;
                }
                let max_args = limits.max_keys.saturating_mul(2).saturating_add(1);
                let n = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= MAX_ARGS && n <= max_args)
                    .ok_or_else(|| protocol("invalid multibulk length"))?;
                if limits.pre_auth && n > PRE_AUTH_MAX_ARGS {
                    return Err(protocol("unauthenticated multibulk length"));
                }
                return Ok(Args {
                    buf,
                    kind: Kind::Multibulk { remaining: n },
                    pos: after,
                    max_value: limits.max_value,
                    pre_auth: limits.pre_auth,
                });
            }
            let Some(nl) = memchr::memchr(b'\n', &buf[pos..]).map(|i| pos + i) else {
                if buf.len() - pos > INLINE_MAX {
                    return Err(protocol("too big inline request"));
                }
                return Err(Stop::Incomplete(0));
            };
            if nl - pos > INLINE_MAX {
                return Err(protocol("too big inline request"));
            }
            let end = if nl > pos && buf[nl - 1] == b'\r' {
                nl - 1
            } else {
                nl
            };
            let tokens = Tokens::new(buf, pos, end);
            let mut peek = Tokens::new(buf, pos, end);
            match peek.next_token() {
                Err(Unbalanced) => return Err(protocol("unbalanced quotes in request")),
                Ok(None) => pos = nl + 1,
                Ok(Some(_)) => {
                    return Ok(Args {
                        buf,
                        kind: Kind::Inline {
                            tokens,
                            next: nl + 1,
                        },
                        pos,
                        max_value: limits.max_value,
                        pre_auth: limits.pre_auth,
                    })
                }
            }
        }
    }

    /// The next argument, `Ok(None)` after the last.
    pub(crate) fn next_arg(&mut self) -> Result<Option<Arg>, Stop> {
        match &mut self.kind {
            Kind::Inline { tokens, .. } => match tokens.next_token() {
                Ok(t) => Ok(t.map(|t| Arg {
                    range: t.range,
                    exact: t.exact,
                })),
                Err(Unbalanced) => Err(protocol("unbalanced quotes in request")),
            },
            Kind::Multibulk { remaining } => {
                if *remaining == 0 {
                    return Ok(None);
                }
                let buf = self.buf;
                let Some(&c) = buf.get(self.pos) else {
                    return Err(Stop::Incomplete(0));
                };
                if c != b'$' {
                    let mut out = b"-ERR Protocol error: expected '$', got '".to_vec();
                    out.push(c);
                    out.extend_from_slice(b"'\r\n");
                    return Err(Stop::Protocol(out));
                }
                let (n, start) = count_line(buf, self.pos, "too big bulk count string")?;
                let n = n
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= self.max_value && n <= isize::MAX as usize / 2)
                    .ok_or_else(|| protocol("invalid bulk length"))?;
                if self.pre_auth && n > PRE_AUTH_MAX_BULK {
                    return Err(protocol("unauthenticated bulk length"));
                }
                let end = start + n;
                if end + 2 > buf.len() {
                    return Err(Stop::Incomplete(end + 2));
                }
                // Like redis-server, the two bytes after the value are taken
                // as its CRLF without looking at them.
                self.pos = end + 2;
                *remaining -= 1;
                Ok(Some(Arg {
                    range: start..end,
                    exact: true,
                }))
            }
        }
    }

    /// Arguments of an array not read yet (0 for an inline command, whose
    /// count is not known before it is read).
    pub(crate) fn left(&self) -> usize {
        match &self.kind {
            Kind::Multibulk { remaining } => *remaining,
            Kind::Inline { .. } => 0,
        }
    }

    /// Where the request ends; meaningful once every argument was read.
    pub(crate) fn end(&self) -> usize {
        match &self.kind {
            Kind::Inline { next, .. } => *next,
            Kind::Multibulk { .. } => self.pos,
        }
    }

    /// The value of `arg` into `out`: its bytes, with an inline argument's
    /// quotes and escapes interpreted.
    pub fn value(&self, arg: &Arg, out: &mut Vec<u8>) {
        let raw = self.buf.get(arg.range.clone()).unwrap_or_default();
        if arg.exact {
            out.extend_from_slice(raw);
        } else {
            unescape(raw, out);
        }
    }
}

impl Iterator for Args<'_> {
    type Item = Arg;
    fn next(&mut self) -> Option<Arg> {
        self.next_arg().ok().flatten()
    }
}

/// Reads the `*N` / `$N` line at `pos`. Like redis-server, it ends at the
/// first CR and the byte after it is skipped unseen.
#[inline]
pub(super) fn count_line(
    buf: &[u8],
    pos: usize,
    too_big: &str,
) -> Result<(Option<i64>, usize), Stop> {
    // Nearly every count is a few plain digits (`*3`, `$100`): read them in
    // one pass, without a search for the CR and a second pass to parse.
    // Anything else (a sign, a leading zero, a long or unfinished line)
    // takes the general path below, which gives the same answer.
    let digits = &buf[(pos + 1).min(buf.len())..];
    if let Some(b'1'..=b'9') = digits.first() {
        let mut n: i64 = 0;
        for (i, &b) in digits.iter().take(19).enumerate() {
            match b {
                b'0'..=b'9' if i < 18 => n = n * 10 + i64::from(b - b'0'),
                b'\r' if pos + 1 + i + 2 <= buf.len() => return Ok((Some(n), pos + 1 + i + 2)),
                _ => break,
            }
        }
    }
    count_line_slow(buf, pos, too_big)
}

/// [`count_line`] for any line.
#[cold]
fn count_line_slow(buf: &[u8], pos: usize, too_big: &str) -> Result<(Option<i64>, usize), Stop> {
    let Some(cr) = memchr::memchr(b'\r', &buf[pos..]).map(|i| pos + i) else {
        if buf.len() - pos > INLINE_MAX {
            return Err(protocol(too_big));
        }
        return Err(Stop::Incomplete(0));
    };
    if cr + 2 > buf.len() {
        return Err(Stop::Incomplete(cr + 2));
    }
    Ok((parse_int(&buf[pos + 1..cr]), cr + 2))
}

/// redis-server's reply to an unknown command: its name and the start of
/// its arguments, each cut at a NUL byte, about 128 bytes in all.
pub(crate) fn unknown_command(req: &[u8]) -> Vec<u8> {
    let mut args = Args::new(req);
    let mut vals: Vec<Vec<u8>> = Vec::new();
    let mut v = Vec::new();
    while let Some(arg) = args.next() {
        v.clear();
        args.value(&arg, &mut v);
        let cut = memchr::memchr(0, &v).unwrap_or(v.len());
        vals.push(v[..cut].to_vec());
        if vals.len() > 1 && vals[1..].iter().map(|a| a.len() + 3).sum::<usize>() >= 128 {
            break;
        }
    }
    let mut line = b"unknown command '".to_vec();
    if let Some(name) = vals.first() {
        line.extend_from_slice(&name[..name.len().min(128)]);
    }
    line.extend_from_slice(b"', with args beginning with: ");
    let mut shown = 0usize;
    for a in vals.iter().skip(1) {
        if shown >= 128 {
            break;
        }
        let take = a.len().min(128 - shown);
        let before = line.len();
        line.push(b'\'');
        line.extend_from_slice(&a[..take]);
        line.extend_from_slice(b"' ");
        shown += line.len() - before;
    }
    let mut out = b"-ERR ".to_vec();
    push_line(&line, &mut out);
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digits-only fast path answers as the general one, line by line
    /// and at every cut of the input.
    #[test]
    fn count_line_fast_path_agrees() {
        let lines: [&[u8]; 14] = [
            b"*3\r\n",
            b"$100\r\n",
            b"$0\r\n",
            b"$03\r\n",
            b"$-1\r\n",
            b"*+3\r\n",
            b"$123456789012345678\r\n",
            b"$1234567890123456789\r\n",
            b"$12345678901234567890\r\n",
            b"$99999999999999999999\r\n",
            b"$1a\r\n",
            b"$1\r",
            b"$\r\n",
            b"$12\n\r\n",
        ];
        for line in lines {
            for cut in 1..=line.len() {
                let buf = &line[..cut];
                let fast = count_line(buf, 0, "big");
                let slow = count_line_slow(buf, 0, "big");
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{buf:?}");
            }
        }
    }

    #[test]
    fn unknown_like_redis() {
        assert_eq!(
            unknown_command(b"xyz a b\r\n"),
            b"-ERR unknown command 'xyz', with args beginning with: 'a' 'b' \r\n".to_vec()
        );
        assert_eq!(
            unknown_command(b"*1\r\n$1\r\n\0\r\n"),
            b"-ERR unknown command '', with args beginning with: \r\n".to_vec()
        );
        let long = format!("xyz {} b\r\n", "a".repeat(200));
        let want = format!(
            "-ERR unknown command 'xyz', with args beginning with: '{}' \r\n",
            "a".repeat(128)
        );
        assert_eq!(unknown_command(long.as_bytes()), want.into_bytes());
    }
}
