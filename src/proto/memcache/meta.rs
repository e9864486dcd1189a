//! memcached meta protocol (`mg`, `ms`, `md`, `ma`, `mn`, `me`): request
//! framing, quiet-mode rewriting and reply framing.
//!
//! Requests are routed by their key token as written. With the `b` flag
//! the key is base64 and is hashed in its encoded form, so a `b` key is
//! placed like the text key spelled as its base64 encoding, not like its
//! decoded bytes.
//!
//! Flags are checked by the server (its replies to bad flags pass through);
//! the proxy itself rejects only what would put the byte stream out of
//! step: a missing or over-long key, an `ms` with a bad data length, too
//! many tokens or a data block not ended by `\r\n`, each answered as
//! memcached answers it.

use std::ops::Range;

use memchr::memchr;

use super::num::safe_strtol;
use super::text_request::{command_line, Tokens};
use super::{McOp, KEY_MAX_LENGTH, MAX_LINE};
use crate::proto::{Keys, Limits, Local, Op, Parse, Request, RequestError, Response};
use crate::proto::{ResponseError, Route};

/// Meta command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaCmd {
    /// `mg <key> <flags>*`
    Get,
    /// `ms <key> <datalen> <flags>*` + data
    Set,
    /// `md <key> <flags>*`
    Delete,
    /// `ma <key> <flags>*`
    Arith,
    /// `mn` (answered by the proxy)
    Noop,
    /// `me <key>`
    Debug,
}

impl MetaCmd {
    /// The command word.
    pub fn name(self) -> &'static str {
        match self {
            MetaCmd::Get => "mg",
            MetaCmd::Set => "ms",
            MetaCmd::Delete => "md",
            MetaCmd::Arith => "ma",
            MetaCmd::Noop => "mn",
            MetaCmd::Debug => "me",
        }
    }

    fn from_word(w: &[u8]) -> Option<MetaCmd> {
        Some(match w {
            b"mg" => MetaCmd::Get,
            b"ms" => MetaCmd::Set,
            b"md" => MetaCmd::Delete,
            b"ma" => MetaCmd::Arith,
            b"mn" => MetaCmd::Noop,
            b"me" => MetaCmd::Debug,
            _ => return None,
        })
    }

    /// Index of the first flag token (0 = command word).
    fn first_flag(self) -> usize {
        if self == MetaCmd::Set {
            3
        } else {
            2
        }
    }
}

/// Whether `buf` starts with a meta command word (possibly incomplete).
pub fn looks_like_meta(buf: &[u8]) -> bool {
    match buf {
        [b'm', c, rest @ ..] if b"gsdane".contains(c) => {
            matches!(rest.first(), None | Some(b' ' | b'\r' | b'\n'))
        }
        _ => false,
    }
}

/// Most real tokens memcached accepts in an `ms` line before answering
/// "options flags too long" (without reading the data block).
const MS_MAX_TOKENS: usize = 19;

/// Longest base64 form of a key of [`KEY_MAX_LENGTH`] bytes.
const B64_KEY_MAX: usize = KEY_MAX_LENGTH.div_ceil(3) * 4;

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";
const BAD_KEY_ENCODING: &[u8] = b"CLIENT_ERROR error decoding key\r\n";

/// The key as the server stores it: with the `b` flag the client sends it
/// base64-encoded (padded, standard alphabet, as memcached decodes it).
fn decode_key(encoded: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .filter(|k| !k.is_empty())
}

/// The bytes a meta request is placed by: the decoded key when the request
/// carries the `b` flag (so `mg Zm9v b` and `get foo` reach the same
/// server, as they reach the same item in memcached), else `None` and the
/// key as written is used.
pub fn binary_key(cmd: MetaCmd, bytes: &[u8], key: std::ops::Range<usize>) -> Option<Vec<u8>> {
    let nl = memchr(b'\n', bytes)?;
    let line = command_line(bytes, nl);
    Tokens::new(line)
        .skip(cmd.first_flag())
        .any(|r| line[r.start] == b'b')
        .then(|| decode_key(bytes.get(key)?))
        .flatten()
}

fn fail(reply: &[u8], skip: usize) -> RequestError {
    RequestError {
        reply: reply.to_vec(),
        skip,
        close: false,
        forward: None,
    }
}

/// A meta command line's tokens (memcached reads at most 24).
type Toks = smallvec::SmallVec<[Range<usize>; 24]>;

/// memcached closes the connection on a line over [`MAX_LINE`] bytes.
fn close() -> RequestError {
    RequestError {
        reply: Vec::new(),
        skip: 0,
        close: true,
        forward: None,
    }
}

/// Parse one meta request at the start of `buf` (see the module docs).
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
    let Some(nl) = memchr(b'\n', buf) else {
        if buf.len() > MAX_LINE {
            return Err(close());
        }
        return Ok(Parse::Incomplete {
            hint: buf.len() + 1,
        });
    };
    if nl > MAX_LINE {
        return Err(close());
    }
    let line_len = nl + 1;
    let line = command_line(buf, nl);
    let toks: Toks = Tokens::new(line).collect();
    let Some(cmd) = toks
        .first()
        .and_then(|w| MetaCmd::from_word(&line[w.clone()]))
    else {
        return Err(fail(ERROR, line_len));
    };
    let mk = |len: usize, keys: Keys, route: Route, quiet: bool| Request {
        len,
        op: Op::Mc(McOp::Meta { cmd, quiet }),
        keys,
        route,
        noreply: false,
    };
    if cmd == MetaCmd::Noop {
        return Ok(Parse::Done(mk(
            line_len,
            Keys::new(),
            Route::Local(Local::Reply(b"MN\r\n"[..].into())),
            false,
        )));
    }
    let Some(key) = toks.get(1).cloned() else {
        return Err(fail(ERROR, line_len));
    };
    let flags = toks.get(cmd.first_flag()..).unwrap_or_default();
    let b64 = has_flag(line, flags, b'b');
    check_key(&line[key.clone()], b64, line_len)?;
    let bad_key = b64 && decode_key(&line[key.clone()]).is_none();
    let quiet = cmd != MetaCmd::Debug && has_flag(line, flags, b'q');
    let mut keys = Keys::new();
    keys.push(key);
    if cmd != MetaCmd::Set {
        if bad_key {
            return Err(fail(BAD_KEY_ENCODING, line_len));
        }
        return Ok(Parse::Done(mk(line_len, keys, Route::Single, quiet)));
    }
    Ok(
        match set_length(buf, line, line_len, &toks, bad_key, limits)? {
            Parse::Done(total) => Parse::Done(mk(total, keys, Route::Single, quiet)),
            Parse::Incomplete { hint } => Parse::Incomplete { hint },
        },
    )
}

/// One of the flag tokens starts with `c`.
fn has_flag(line: &[u8], flags: &[Range<usize>], c: u8) -> bool {
    flags.iter().any(|r| line.get(r.start) == Some(&c))
}

/// A key too long (a base64 one, `b64`, may be longer) is refused, and so
/// is a key holding CR (memcached takes it): once the proxy drops a quiet
/// flag after it, the CR would read as the line's end.
fn check_key(key: &[u8], b64: bool, line_len: usize) -> Result<(), RequestError> {
    let key_max = if b64 { B64_KEY_MAX } else { KEY_MAX_LENGTH };
    if key.len() > key_max || memchr(b'\r', key).is_some() {
        return Err(fail(BAD_FORMAT, line_len));
    }
    Ok(())
}

/// `ms`: the bytes of its line and data block, once they are all there.
fn set_length(
    buf: &[u8],
    line: &[u8],
    line_len: usize,
    toks: &Toks,
    bad_key: bool,
    limits: &Limits,
) -> Result<Parse<usize>, RequestError> {
    if toks.len() > MS_MAX_TOKENS {
        return Err(fail(TOO_LONG, line_len));
    }
    let vlen = toks
        .get(2)
        .and_then(|r| safe_strtol(&line[r.clone()]))
        .and_then(|v| usize::try_from(v).ok());
    if bad_key {
        // memcached swallows the data block after this error.
        let block = vlen.filter(|&v| v <= limits.max_value).map_or(0, |v| v + 2);
        let total = line_len + block;
        if buf.len() < total {
            return Ok(Parse::Incomplete { hint: total });
        }
        return Err(fail(BAD_KEY_ENCODING, total));
    }
    let Some(vlen) = vlen else {
        return Err(fail(BAD_FORMAT, line_len));
    };
    let total = line_len.saturating_add(vlen).saturating_add(2);
    if vlen > limits.max_value {
        // memcached unlinks the old item whatever the mode (see too_large).
        return Err(super::refused::refuse(
            super::refused::Refused::Meta,
            line_len,
            toks[1].clone(),
            total,
            false,
        ));
    }
    if buf.len() < total {
        return Ok(Parse::Incomplete { hint: total });
    }
    if &buf[total - 2..total] != b"\r\n" {
        return Err(fail(BAD_CHUNK, total));
    }
    Ok(Parse::Done(total))
}

/// Write a meta request as the server gets it: in quiet mode every flag
/// token starting with `q` is removed (the server then answers every
/// request and [`keep_reply`] drops what `q` suppresses).
pub fn write_request(cmd: MetaCmd, quiet: bool, bytes: &[u8], out: &mut Vec<u8>) {
    let nl = memchr(b'\n', bytes);
    let Some(nl) = nl.filter(|_| quiet) else {
        out.extend_from_slice(bytes);
        return;
    };
    let line = command_line(bytes, nl);
    let mut copied = 0;
    for (i, r) in Tokens::new(line).enumerate() {
        if i >= cmd.first_flag() && line[r.start] == b'q' {
            // Drop the token and the space before it.
            let from = r.start.saturating_sub(1).max(copied);
            out.extend_from_slice(&bytes[copied..from]);
            copied = r.end;
        }
    }
    out.extend_from_slice(&bytes[copied..]);
}

/// Whether a server reply reaches the client: quiet `mg` drops `EN`, quiet
/// `ms`/`md`/`ma` drop `HD`; everything else is kept.
pub fn keep_reply(cmd: MetaCmd, quiet: bool, reply: &[u8]) -> bool {
    if !quiet {
        return true;
    }
    let code: &[u8] = match cmd {
        MetaCmd::Get => b"EN",
        MetaCmd::Set | MetaCmd::Delete | MetaCmd::Arith => b"HD",
        MetaCmd::Noop | MetaCmd::Debug => return true,
    };
    !(reply.starts_with(code) && matches!(reply.get(2), Some(b' ' | b'\r' | b'\n')))
}

fn unexpected(line: &[u8]) -> ResponseError {
    let shown = String::from_utf8_lossy(&line[..line.len().min(64)]).into_owned();
    ResponseError(format!("unexpected memcached meta reply: {shown:?}"))
}

/// Parse one meta reply at the start of `buf`: `VA <len> <flags>*` with its
/// data block, or one line (`HD`, `NF`, `NS`, `EX`, `EN`, `MN`, `ME ...`,
/// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`).
pub fn parse_response(buf: &[u8]) -> Result<Parse<Response>, ResponseError> {
    let Some(nl) = memchr(b'\n', buf) else {
        if buf.len() > 8192 {
            return Err(ResponseError("memcached reply line too long".into()));
        }
        return Ok(Parse::Incomplete {
            hint: buf.len() + 1,
        });
    };
    let mut line = &buf[..nl];
    if let [head @ .., b'\r'] = line {
        line = head;
    }
    let word_end = memchr(b' ', line).unwrap_or(line.len());
    let word = &line[..word_end];
    let done = |len, is_error| {
        Ok(Parse::Done(Response {
            len,
            is_error,
            values: 0,
        }))
    };
    match word {
        b"VA" => {
            let n = Tokens::new(line)
                .nth(1)
                .map(|r| &line[r])
                .filter(|t| !t.is_empty() && t.len() <= 10 && t.iter().all(u8::is_ascii_digit))
                .and_then(|t| std::str::from_utf8(t).ok()?.parse::<usize>().ok())
                .ok_or_else(|| unexpected(line))?;
            let total = nl + 1 + n + 2;
            if buf.len() < total {
                return Ok(Parse::Incomplete { hint: total });
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Err(ResponseError("memcached value not followed by CRLF".into()));
            }
            done(total, false)
        }
        b"HD" | b"NF" | b"NS" | b"EX" | b"EN" | b"MN" | b"ME" => done(nl + 1, false),
        b"ERROR" | b"CLIENT_ERROR" | b"SERVER_ERROR" => done(nl + 1, true),
        _ => Err(unexpected(line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &[u8]) -> Result<Parse<Request>, RequestError> {
        parse_request(b, &Limits::default())
    }

    fn done(b: &[u8]) -> Request {
        match parse(b) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn set_with_data_and_quiet_rewrite() {
        let b = b"ms key 2 T90 q O5\r\nhi\r\n";
        let r = done(b);
        assert_eq!(r.len, b.len());
        assert_eq!(&b[r.keys[0].clone()], b"key");
        assert_eq!(
            r.op,
            Op::Mc(McOp::Meta {
                cmd: MetaCmd::Set,
                quiet: true
            })
        );
        let mut out = Vec::new();
        write_request(MetaCmd::Set, true, b, &mut out);
        assert_eq!(out, b"ms key 2 T90 O5\r\nhi\r\n");
        out.clear();
        write_request(MetaCmd::Get, true, b"mg q v q\r\n", &mut out);
        assert_eq!(out, b"mg q v\r\n");
    }

    #[test]
    fn carriage_return_in_key_rejected() {
        for bad in [&b"md \r q\n"[..], b"mg a\rb v\r\n"] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.reply, BAD_FORMAT);
            assert_eq!(e.skip, bad.len());
        }
    }

    #[test]
    fn base64_keys() {
        let r = done(b"mg Zm9v b v\r\n");
        assert_eq!(
            binary_key(MetaCmd::Get, b"mg Zm9v b v\r\n", r.keys[0].clone()),
            Some(b"foo".to_vec())
        );
        assert_eq!(binary_key(MetaCmd::Get, b"mg Zm9v v\r\n", 3..7), None);
        for (bad, skip) in [
            (&b"mg Zm9 b v\r\n"[..], 12),
            (b"mg !!!! b\r\n", 11),
            (b"ms Zm9 2 b\r\nhi\r\n", 16),
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!((e.reply.as_slice(), e.skip), (BAD_KEY_ENCODING, skip));
        }
        assert!(matches!(
            parse(b"ms Zm9 2 b\r\nh"),
            Ok(Parse::Incomplete { hint: 16 })
        ));
    }

    #[test]
    fn errors_as_memcached() {
        assert_eq!(parse(b"mg\r\n").unwrap_err().reply, ERROR);
        let mut long = b"mg ".to_vec();
        long.extend_from_slice(&[b'k'; 251]);
        long.extend_from_slice(b" v\r\n");
        assert_eq!(parse(&long).unwrap_err().reply, BAD_FORMAT);
        assert_eq!(parse(b"ms k xx\r\nhi\r\n").unwrap_err().skip, 9);
        let e = parse(b"ms k 2\r\nhiX\r\n").unwrap_err();
        assert_eq!((e.reply.as_slice(), e.skip), (BAD_CHUNK, 12));
        let many = b"ms k 2 a b c d e f g h i j k l m n o p r\r\nhi\r\n";
        assert_eq!(parse(many).unwrap_err().reply, TOO_LONG);
        let limits = Limits {
            max_value: 1,
            ..Limits::default()
        };
        let e = parse_request(b"ms k 2\r\n", &limits).unwrap_err();
        assert_eq!((e.reply.is_empty(), e.skip), (true, 12));
        assert!(e.forward.is_some(), "the key is deleted");
    }

    #[test]
    fn noop_is_local() {
        let r = done(b"mn\r\n");
        assert_eq!(r.route, Route::Local(Local::Reply(b"MN\r\n"[..].into())));
    }

    #[test]
    fn quiet_keep() {
        assert!(!keep_reply(MetaCmd::Get, true, b"EN\r\n"));
        assert!(keep_reply(MetaCmd::Get, true, b"HD\r\n"));
        assert!(keep_reply(MetaCmd::Get, false, b"EN\r\n"));
        assert!(!keep_reply(MetaCmd::Delete, true, b"HD O1\r\n"));
        assert!(keep_reply(MetaCmd::Delete, true, b"NF\r\n"));
        assert!(keep_reply(MetaCmd::Set, true, b"CLIENT_ERROR x\r\n"));
    }

    #[test]
    fn replies() {
        let r = b"VA 2 t90\r\nhi\r\n";
        assert_eq!(
            parse_response(r).unwrap(),
            Parse::Done(Response {
                len: r.len(),
                is_error: false,
                values: 0,
            })
        );
        for cut in 0..r.len() {
            assert!(matches!(
                parse_response(&r[..cut]),
                Ok(Parse::Incomplete { .. })
            ));
        }
        assert!(matches!(
            parse_response(b"CLIENT_ERROR bad\r\n"),
            Ok(Parse::Done(Response { is_error: true, .. }))
        ));
        assert!(parse_response(b"STORED\r\n").is_err());
        assert!(parse_response(b"VA x\r\n").is_err());
    }
}
