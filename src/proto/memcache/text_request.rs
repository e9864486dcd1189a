//! Text protocol requests: framing and the validation memcached itself does
//! before touching data, so the proxy answers malformed input exactly as a
//! memcached server would and stays in step with the client's byte stream.

use std::ops::Range;

use memchr::memchr;
use smallvec::SmallVec;

use super::num::{safe_strtol, safe_strtoul, safe_strtoull};
use super::refused::{refuse, Refused};
use super::{McOp, VERSION};
use crate::proto::{Keys, Limits, Local, Op, Parse, Request, RequestError, Route};

/// Longest key memcached accepts.
pub const KEY_MAX_LENGTH: usize = 250;

/// Longest command line (bytes before its `\n`) accepted for anything but a
/// retrieval; like memcached, a longer line closes the connection.
pub const MAX_LINE: usize = 2048;

/// Leading spaces memcached tolerates before a long retrieval line.
const MAX_LEADING_SPACES: usize = 100;

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_DELETE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
const BAD_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
const BAD_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const TOO_LARGE: &[u8] = super::refused::TOO_LARGE;

/// Space-separated tokens of a command line, as byte ranges of the line.
#[derive(Debug, Clone)]
pub(crate) struct Tokens<'a> {
    line: &'a [u8],
    pos: usize,
}

impl<'a> Tokens<'a> {
    pub(crate) fn new(line: &'a [u8]) -> Self {
        Tokens { line, pos: 0 }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let line = self.line;
        while self.pos < line.len() && line[self.pos] == b' ' {
            self.pos += 1;
        }
        if self.pos >= line.len() {
            return None;
        }
        let start = self.pos;
        // A token is short (a command, a key, a number): a plain scan costs
        // less than a vector search's set-up.
        let rest = &line[start..];
        self.pos += rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        Some(start..self.pos)
    }
}

/// The part of `buf[..nl]` memcached reads as the command: one trailing
/// `\r` removed (when the line has more than that byte), and everything from
/// the first NUL on ignored (memcached handles the line as a C string).
pub(crate) fn command_line(buf: &[u8], nl: usize) -> &[u8] {
    let mut end = nl;
    if end > 1 && buf[end - 1] == b'\r' {
        end -= 1;
    }
    if let Some(z) = memchr(0, &buf[..end]) {
        end = z;
    }
    &buf[..end]
}

/// A line longer than [`MAX_LINE`] is kept only if it starts (after at most
/// 100 spaces) with a retrieval command and a space.
fn long_line_allowed(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    if spaces > MAX_LEADING_SPACES {
        return false;
    }
    let rest = &buf[spaces..];
    [&b"get "[..], b"gets ", b"gat ", b"gats "]
        .iter()
        .any(|p| rest.starts_with(p))
}

/// Upper bound on a retrieval line: `max_keys` keys of the longest size.
fn max_retrieval_line(limits: &Limits) -> usize {
    limits
        .max_keys
        .saturating_add(2)
        .saturating_mul(KEY_MAX_LENGTH + 1)
        .saturating_add(MAX_LINE)
}

fn line_too_long(buf: &[u8], len: usize, limits: &Limits) -> bool {
    len > MAX_LINE && (!long_line_allowed(buf) || len > max_retrieval_line(limits))
}

fn fail(reply: &[u8], skip: usize, noreply: bool) -> RequestError {
    RequestError {
        reply: if noreply { Vec::new() } else { reply.to_vec() },
        skip,
        close: false,
        forward: None,
    }
}

fn close() -> RequestError {
    RequestError {
        reply: Vec::new(),
        skip: 0,
        close: true,
        forward: None,
    }
}

/// An unknown command whose last token starts with `HTTP/` (`GET /
/// HTTP/1.0`): memcached closes the connection without a reply, so a
/// browser or an HTTP request smuggled to the port gets nothing back. Like
/// memcached, the last token is the 23rd when the line has more.
fn looks_like_http(line: &[u8]) -> bool {
    Tokens::new(line)
        .take(23)
        .last()
        .is_some_and(|r| line[r].starts_with(b"HTTP/"))
}

fn command(word: &[u8]) -> Option<McOp> {
    Some(match word {
        // `bget` is an undocumented alias of `get` memcached still accepts.
        b"get" | b"bget" => McOp::Get,
        b"gets" => McOp::Gets,
        b"gat" => McOp::Gat,
        b"gats" => McOp::Gats,
        b"set" => McOp::Set,
        b"add" => McOp::Add,
        b"replace" => McOp::Replace,
        b"append" => McOp::Append,
        b"prepend" => McOp::Prepend,
        b"cas" => McOp::Cas,
        b"delete" => McOp::Delete,
        b"incr" => McOp::Incr,
        b"decr" => McOp::Decr,
        b"touch" => McOp::Touch,
        b"version" => McOp::Version,
        b"quit" => McOp::Quit,
        b"flush_all" => McOp::FlushAll,
        b"verbosity" => McOp::Verbosity,
        b"stats" => McOp::Stats,
        _ => return None,
    })
}

/// `get <key>\r\n`, the request a cache sees most, read without the
/// tokenizer: written by hand because it is one per request on the
/// request path (about two hundred instructions less than the general
/// parser's per request at 16 B keys). `None` for anything else (other
/// spacing, `\n` alone, a NUL, a key over [`KEY_MAX_LENGTH`], no key room),
/// which the general parser answers; where it answers, it answers as that
/// parser does (`get_shortcut_agrees`).
#[inline(always)]
pub(super) fn single_get(buf: &[u8], limits: &Limits) -> Option<Request> {
    let rest = buf.strip_prefix(b"get ")?;
    let n = rest
        .iter()
        .take(KEY_MAX_LENGTH + 1)
        .position(|&b| matches!(b, b'\r' | b' ' | b'\n' | 0))?;
    if n == 0 || rest[n] != b'\r' || rest.get(n + 1) != Some(&b'\n') || limits.max_keys == 0 {
        return None;
    }
    let mut keys = Keys::new();
    keys.push(4..4 + n);
    Some(Request {
        len: 4 + n + 2,
        op: Op::Mc(McOp::Get),
        keys,
        route: Route::Single,
        noreply: false,
    })
}

/// Whether the `get` shortcut answers as the general text parser wherever
/// it answers (for the fuzz target and the tests).
pub fn get_shortcut_agrees(buf: &[u8], limits: &Limits) -> bool {
    match single_get(buf, limits) {
        None => true,
        Some(fast) => parse_request(buf, limits) == Ok(Parse::Done(fast)),
    }
}

/// Parse one text protocol request at the start of `buf`.
///
/// Replies to client errors are those of memcached 1.6, including when it
/// keeps the connection: a rejected command line is skipped alone (its data
/// block, if any, is then read as commands, as memcached does), a too large
/// value is skipped with its data block, and a data block not followed by
/// `\r\n` is skipped as `<bytes> + 2` bytes. `noreply` silences those
/// replies as it does in memcached. A line over [`MAX_LINE`] bytes that is
/// not a retrieval closes the connection without a reply.
///
/// `RequestError::skip` may exceed `buf.len()` (a too large value is
/// rejected before its data arrives): the data path discards the rest as it
/// comes in.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
    let Some(nl) = memchr(b'\n', buf) else {
        if line_too_long(buf, buf.len(), limits) {
            return Err(close());
        }
        return Ok(Parse::Incomplete {
            hint: buf.len() + 1,
        });
    };
    if line_too_long(buf, nl, limits) {
        return Err(close());
    }
    let line_len = nl + 1;
    let line = command_line(buf, nl);
    let mut toks = Tokens::new(line);
    let op = command_word(line, line_len, &mut toks)?;
    if op.is_retrieval() {
        return retrieval(line, line_len, toks, op, limits).map(Parse::Done);
    }
    let mut kept = Kept::new();
    let cmd = CommandLine::new(line, line_len, op, toks, &mut kept);
    match op {
        McOp::Set | McOp::Add | McOp::Replace | McOp::Append | McOp::Prepend | McOp::Cas => {
            storage(buf, &cmd, limits)
        }
        McOp::Delete => delete(&cmd).map(Parse::Done),
        McOp::Incr | McOp::Decr | McOp::Touch => incr_decr_touch(&cmd).map(Parse::Done),
        McOp::FlushAll => flush_all(&cmd).map(Parse::Done),
        McOp::Verbosity => verbosity(&cmd).map(Parse::Done),
        McOp::Version => {
            let reply = format!("VERSION {VERSION}\r\n").into_bytes();
            Ok(Parse::Done(
                cmd.local(Route::Local(Local::Reply(reply.into())), false),
            ))
        }
        McOp::Quit => Ok(Parse::Done(
            cmd.local(Route::Local(Local::Quit(Vec::new())), false),
        )),
        McOp::Stats => Ok(Parse::Done(cmd.local(Route::Local(Local::Stats), false))),
        _ => Err(fail(ERROR, line_len, false)),
    }
}

/// The command a line starts with: `ERROR` for a word memcached does not
/// know (or one shorter than two bytes), the connection closed for what
/// looks like HTTP.
#[inline]
fn command_word(line: &[u8], line_len: usize, toks: &mut Tokens<'_>) -> Result<McOp, RequestError> {
    let cmd = match toks.next() {
        Some(r) if r.len() >= 2 => r,
        _ => return Err(fail(ERROR, line_len, false)),
    };
    let Some(op) = command(&line[cmd]) else {
        if looks_like_http(line) {
            return Err(close());
        }
        return Err(fail(ERROR, line_len, false));
    };
    Ok(op)
}

/// A command line other than a retrieval, its tokens counted as memcached
/// counts them.
struct CommandLine<'a> {
    line: &'a [u8],
    /// Bytes of the line with its `\n`.
    len: usize,
    op: McOp,
    /// The first tokens after the command word (see [`Self::new`]).
    args: &'a [Range<usize>],
    /// memcached's `ntokens`: real tokens plus the terminal one.
    nt: usize,
    /// The last token is `noreply`.
    noreply: bool,
}

/// Tokens kept after the command word: memcached counts at most 23 tokens
/// plus a terminal one, and every command here wants fewer than 8, so
/// keeping 8 is enough to decide.
type Kept = SmallVec<[Range<usize>; 8]>;

impl<'a> CommandLine<'a> {
    /// `toks` is past the command word; the tokens kept go to `args`, which
    /// the caller owns so that nothing of that size is moved.
    #[inline(always)]
    fn new(line: &'a [u8], len: usize, op: McOp, toks: Tokens<'a>, args: &'a mut Kept) -> Self {
        let mut n = 1;
        for r in toks {
            n += 1;
            if args.len() < 8 {
                args.push(r);
            }
        }
        let mut cmd = CommandLine {
            line,
            len,
            op,
            args,
            nt: n.min(23) + 1,
            noreply: false,
        };
        cmd.noreply = n >= 2 && cmd.tok(n - 1) == b"noreply";
        cmd
    }

    /// Token `i` (the command word is 0); empty past the ones kept.
    #[inline]
    fn tok(&self, i: usize) -> &'a [u8] {
        let line = self.line;
        self.args.get(i - 1).map_or(&b""[..], |r| &line[r.clone()])
    }

    #[inline]
    fn key_too_long(&self) -> bool {
        self.tok(1).len() > KEY_MAX_LENGTH
    }

    /// The request of `len` bytes, routed by its key (token 1).
    #[inline]
    fn single(&self, len: usize, noreply: bool) -> Request {
        let mut keys = Keys::new();
        if let Some(r) = self.args.first() {
            keys.push(r.clone());
        }
        Request {
            len,
            op: Op::Mc(self.op),
            keys,
            route: Route::Single,
            noreply,
        }
    }

    /// The request without keys, routed by `route`.
    fn local(&self, route: Route, noreply: bool) -> Request {
        Request {
            len: self.len,
            op: Op::Mc(self.op),
            keys: Keys::new(),
            route,
            noreply,
        }
    }
}

/// `set`/`add`/`replace`/`append`/`prepend`/`cas`: the command line and its
/// data block.
#[inline]
fn storage(
    buf: &[u8],
    cmd: &CommandLine<'_>,
    limits: &Limits,
) -> Result<Parse<Request>, RequestError> {
    let (line_len, noreply) = (cmd.len, cmd.noreply);
    let cas = cmd.op == McOp::Cas;
    let base = if cas { 7 } else { 6 };
    if cmd.nt != base && cmd.nt != base + 1 {
        return Err(fail(ERROR, line_len, false));
    }
    if cmd.key_too_long() {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    }
    let (Some(_flags), Some(_exptime), Some(vlen)) = (
        safe_strtoul(cmd.tok(2)),
        safe_strtol(cmd.tok(3)),
        safe_strtol(cmd.tok(4)),
    ) else {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    };
    if cas && safe_strtoull(cmd.tok(5)).is_none() {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    }
    let Ok(vlen) = usize::try_from(vlen) else {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    };
    if vlen > (i32::MAX - 2) as usize {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    }
    let total = line_len + vlen + 2;
    if vlen > limits.max_value {
        if cmd.op == McOp::Set {
            let key = cmd.args.first().cloned().unwrap_or_default();
            return Err(refuse(Refused::Text, line_len, key, total, noreply));
        }
        return Err(fail(TOO_LARGE, total, noreply));
    }
    if buf.len() < total {
        return Ok(Parse::Incomplete { hint: total });
    }
    if &buf[total - 2..total] != b"\r\n" {
        return Err(fail(BAD_CHUNK, total, noreply));
    }
    Ok(Parse::Done(cmd.single(total, noreply)))
}

/// `delete <key> [0] [noreply]`: memcached still takes a hold time of 0.
fn delete(cmd: &CommandLine<'_>) -> Result<Request, RequestError> {
    let (nt, line_len, noreply) = (cmd.nt, cmd.len, cmd.noreply);
    if !(3..=5).contains(&nt) {
        return Err(fail(ERROR, line_len, false));
    }
    let mut noreply_set = false;
    if nt > 3 {
        let hold_is_zero = cmd.tok(2) == b"0";
        noreply_set = noreply;
        let valid = (nt == 4 && (hold_is_zero || noreply)) || (nt == 5 && hold_is_zero && noreply);
        if !valid {
            return Err(fail(BAD_DELETE, line_len, noreply));
        }
    }
    if cmd.key_too_long() {
        return Err(fail(BAD_FORMAT, line_len, noreply_set));
    }
    Ok(cmd.single(line_len, noreply_set))
}

/// `incr`/`decr <key> <delta>` and `touch <key> <exptime>`.
fn incr_decr_touch(cmd: &CommandLine<'_>) -> Result<Request, RequestError> {
    let (line_len, noreply) = (cmd.len, cmd.noreply);
    if cmd.nt != 4 && cmd.nt != 5 {
        return Err(fail(ERROR, line_len, false));
    }
    if cmd.key_too_long() {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    }
    if cmd.op == McOp::Touch {
        if safe_strtol(cmd.tok(2)).is_none() {
            return Err(fail(BAD_EXPTIME, line_len, noreply));
        }
    } else if safe_strtoull(cmd.tok(2)).is_none() {
        return Err(fail(BAD_DELTA, line_len, noreply));
    }
    Ok(cmd.single(line_len, noreply))
}

/// `flush_all [delay] [noreply]`, sent to every server.
fn flush_all(cmd: &CommandLine<'_>) -> Result<Request, RequestError> {
    let (line_len, noreply) = (cmd.len, cmd.noreply);
    if !(2..=4).contains(&cmd.nt) {
        return Err(fail(ERROR, line_len, false));
    }
    let plain = if noreply { 3 } else { 2 };
    if cmd.nt != plain && safe_strtol(cmd.tok(1)).is_none() {
        return Err(fail(BAD_EXPTIME, line_len, noreply));
    }
    Ok(cmd.local(Route::Broadcast, noreply))
}

/// `verbosity <level> [noreply]`, answered by the proxy.
fn verbosity(cmd: &CommandLine<'_>) -> Result<Request, RequestError> {
    let (line_len, noreply) = (cmd.len, cmd.noreply);
    if cmd.nt != 3 && cmd.nt != 4 {
        return Err(fail(ERROR, line_len, false));
    }
    if safe_strtoul(cmd.tok(1)).is_none() {
        return Err(fail(BAD_FORMAT, line_len, noreply));
    }
    let reply: &'static [u8] = if noreply { b"" } else { b"OK\r\n" };
    Ok(cmd.local(Route::Local(Local::Reply(reply.into())), noreply))
}

/// Keys a multi-get gets room for when it outgrows the inline two.
const MULTI_GET_ROOM: usize = 16;

/// `get`/`gets`/`gat`/`gats`: any number of keys (memcached reads long
/// lines in batches of tokens, which amounts to all of them).
fn retrieval(
    line: &[u8],
    line_len: usize,
    mut toks: Tokens<'_>,
    op: McOp,
    limits: &Limits,
) -> Result<Request, RequestError> {
    let mut first = toks.clone();
    if first.next().is_none() {
        return Err(fail(ERROR, line_len, false));
    }
    if op.has_exptime_arg() {
        let exptime = toks.next().map_or(&b""[..], |r| &line[r]);
        if safe_strtol(exptime).is_none() {
            return Err(fail(BAD_EXPTIME, line_len, false));
        }
    }
    let mut keys = Keys::new();
    for r in toks {
        if r.len() > KEY_MAX_LENGTH || keys.len() >= limits.max_keys {
            return Err(fail(BAD_FORMAT, line_len, false));
        }
        if keys.len() == keys.inline_size() {
            // A multi-get leaving the inline room: room for a typical one
            // at once, rather than doubling every few keys.
            keys.reserve(MULTI_GET_ROOM);
        }
        keys.push(r);
    }
    let route = match keys.len() {
        // `gat <exptime>` with no key: memcached answers an empty result.
        0 => Route::Local(Local::Reply(b"END\r\n"[..].into())),
        1 => Route::Single,
        _ => Route::Multi,
    };
    Ok(Request {
        len: line_len,
        op: Op::Mc(op),
        keys,
        route,
        noreply: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &[u8]) -> Result<Parse<Request>, RequestError> {
        parse_request(b, &Limits::default())
    }

    /// The `get <key>` shortcut answers as the general parser for every
    /// prefix of lines near its edges, and answers for the plain case.
    #[test]
    fn get_shortcut_agrees_with_the_parser() {
        let long = format!("get {}\r\n", "k".repeat(KEY_MAX_LENGTH));
        let longer = format!("get {}\r\n", "k".repeat(KEY_MAX_LENGTH + 1));
        let lines: [&[u8]; 14] = [
            b"get foo\r\n",
            b"get foo\n",
            b"get foo \r\n",
            b"get  foo\r\n",
            b"get foo bar\r\n",
            b"get \r\n",
            b"get fo\0o\r\n",
            b"get foo\rX\n",
            b"get foo\r\r\n",
            b"get foo\r\nget bar\r\n",
            b"gets foo\r\n",
            b"get\tfoo\r\n",
            long.as_bytes(),
            longer.as_bytes(),
        ];
        for limits in [
            Limits::default(),
            Limits {
                max_keys: 0,
                ..Limits::default()
            },
        ] {
            for line in lines {
                for cut in 0..=line.len() {
                    assert!(
                        get_shortcut_agrees(&line[..cut], &limits),
                        "{:?}",
                        &line[..cut]
                    );
                }
            }
        }
        let l = Limits::default();
        assert!(single_get(b"get foo\r\n", &l).is_some());
        assert!(single_get(long.as_bytes(), &l).is_some());
        assert!(single_get(longer.as_bytes(), &l).is_none());
    }

    #[test]
    fn get_many_keys() {
        let mut line = b"get".to_vec();
        for i in 0..5000 {
            line.extend_from_slice(format!(" key{i}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        let Ok(Parse::Done(r)) = parse(&line) else {
            panic!("not parsed")
        };
        assert_eq!(r.keys.len(), 5000);
        assert_eq!(&line[r.keys[4999].clone()], b"key4999");
        assert_eq!(r.route, Route::Multi);
        let limits = Limits {
            max_keys: 10,
            pre_auth: false,
            ..Limits::default()
        };
        let e = parse_request(&line[..line.len().min(2000)], &limits);
        assert!(matches!(e, Ok(Parse::Incomplete { .. })));
        let e = parse_request(b"get 1 2 3 4 5 6 7 8 9 10 11\r\n", &limits).unwrap_err();
        assert_eq!(e.reply, BAD_FORMAT);
        assert!(!e.close);
    }

    #[test]
    fn unterminated_lines_are_bounded() {
        let junk = vec![b'x'; MAX_LINE + 1];
        assert!(parse(&junk).unwrap_err().close);
        assert_eq!(
            parse(&junk[..MAX_LINE]).unwrap(),
            Parse::Incomplete { hint: MAX_LINE + 1 }
        );
        let mut get = b"get ".to_vec();
        get.resize(MAX_LINE + 2000, b'k');
        assert!(matches!(parse(&get), Ok(Parse::Incomplete { .. })));
        let limits = Limits {
            max_keys: 2,
            pre_auth: false,
            ..Limits::default()
        };
        assert!(parse_request(&get, &limits).unwrap_err().close);
    }

    #[test]
    fn http_requests_close_without_a_reply() {
        for line in [
            &b"GET / HTTP/1.0\r\n"[..],
            b"POST /x HTTP/1.1\r\n",
            b"xx HTTP/\r\n",
            b"HTTP/1.0\r\n",
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.close && e.reply.is_empty(), "{line:?}");
        }
        // Known commands, short command words, and HTTP/ beyond the 23rd
        // token get memcached's ordinary replies.
        let mut long = b"a b c d e f g h i j k l m n o p q r s t u v w x y z".to_vec();
        long.extend_from_slice(b" HTTP/1.0\r\n");
        for line in [
            &b"GET / http/1.0\r\n"[..],
            b"x HTTP/1.0\r\n",
            b"set HTTP/1.0\r\n",
            b"GET / HTTP/1.0 extra\r\n",
            &long,
        ] {
            let e = parse(line).unwrap_err();
            assert!(!e.close && e.reply == ERROR, "{line:?}");
        }
    }

    #[test]
    fn too_large_is_rejected_before_the_data() {
        let limits = Limits {
            max_value: 10,
            ..Limits::default()
        };
        let e = parse_request(b"add a 0 0 11\r\n", &limits).unwrap_err();
        assert_eq!(e.reply, TOO_LARGE);
        assert_eq!(e.skip, 14 + 13);
        let e = parse_request(b"add a 0 0 11 noreply\r\n", &limits).unwrap_err();
        assert!(e.reply.is_empty());
    }
}
