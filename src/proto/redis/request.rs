//! Request framing and routing: arrays of bulk strings and inline commands,
//! scanned once without allocation.

use super::args::{count_line, protocol, Arg, Args, Kind, Stop, PRE_AUTH_MAX_BULK};
use super::commands::{Cmd, CmdClass, KeySpec};
use super::reply;
use super::resp::parse_int;
use super::RedisOp;
use crate::proto::{Keys, Limits, Local, Op, Parse, Request, RequestError, Route};
use std::ops::Range;

/// How a streamed request goes to its servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// One server: the head, then the large argument and the arguments
    /// after it as they arrive.
    Single,
    /// MSET, one `MSET key value` per pair as each pair arrives (see
    /// [`stream_pair`]): the head is the array count and the command name,
    /// `body` is 0 and `args_left` counts every key and value.
    Pairs,
    /// EVAL-like (`script numkeys key ...`) with the large argument before
    /// the key: no key yet, the large argument and the arguments up to the
    /// key are held until the key is read (see [`super::StreamMachine`]).
    Spool,
}

/// A request whose bulk argument is too large to buffer whole: what the
/// data path needs to forward it as it arrives (see [`stream_head`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHead {
    /// The request with its routing; `len` is the length of the head: every
    /// byte up to the first byte of the large argument's value.
    pub req: Request,
    /// Bytes of the large argument still to pass: its value and CRLF.
    pub body: usize,
    /// Arguments after the large one (framed and checked as they pass).
    pub args_left: usize,
    /// Single server or pair by pair.
    pub kind: StreamKind,
}

/// One key-value pair of an MSET streamed pair by pair, at the start of the
/// client's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pair {
    /// Key and value both there: the pair is `len` bytes.
    Small {
        /// The key.
        key: Range<usize>,
        /// The value.
        value: Range<usize>,
        /// Bytes of the pair.
        len: usize,
    },
    /// A value of at least the threshold: the key and the value's header
    /// are the first `head` bytes; the value and its CRLF (`body` bytes)
    /// follow.
    Large {
        /// The key.
        key: Range<usize>,
        /// Bytes up to the value's first byte.
        head: usize,
        /// Bytes of the value and its CRLF.
        body: usize,
    },
}

/// The next key-value pair of an MSET streamed pair by pair:
/// `Ok(None)` until the key and the value's header (and a value below
/// `threshold` whole) are there; the protocol error to reply otherwise
/// (the connection is then closed, as redis-server does).
pub fn stream_pair(buf: &[u8], limits: &Limits, threshold: usize) -> Result<Option<Pair>, Vec<u8>> {
    let mut args = Args {
        buf,
        kind: Kind::Multibulk { remaining: 2 },
        pos: 0,
        max_value: limits.max_value,
        pre_auth: limits.pre_auth,
    };
    let step = |r: Result<Option<Arg>, Stop>| match r {
        Ok(a) => Ok(a),
        Err(Stop::Incomplete(_)) => Ok(None),
        Err(Stop::Protocol(reply)) => Err(reply),
    };
    let Some(key) = step(args.next_arg())? else {
        return Ok(None);
    };
    let at = args.pos;
    match stream_arg(&buf[at..], limits)? {
        None => return Ok(None),
        Some((_, n)) if limits.pre_auth && n > PRE_AUTH_MAX_BULK => {
            return Err(b"-ERR Protocol error: unauthenticated bulk length\r\n".to_vec())
        }
        Some((header, n)) if n >= threshold => {
            return Ok(Some(Pair::Large {
                key: key.range,
                head: at + header,
                body: n + 2,
            }))
        }
        Some(_) => {}
    }
    Ok(step(args.next_arg())?.map(|value| Pair::Small {
        key: key.range,
        value: value.range,
        len: args.pos,
    }))
}

/// The head of an EVAL-like request (`script numkeys key ...`) whose
/// argument of at least `threshold` bytes is incomplete: the script
/// (before the key: [`StreamKind::Spool`]) or an argument after the key
/// (`numkeys` valid: [`StreamKind::Single`]).
fn eval_head(mut args: Args<'_>, cmd: Cmd, threshold: usize) -> Option<StreamHead> {
    let Kind::Multibulk { remaining } = args.kind else {
        return None;
    };
    let argc = remaining + 1;
    let buf = args.buf;
    let mut keys = Keys::new();
    let mut numkeys = None;
    let mut idx = 1usize;
    loop {
        let at = args.pos;
        match args.next_arg() {
            Ok(Some(arg)) => {
                if idx == 2 {
                    numkeys = parse_int(&buf[arg.range.clone()]);
                }
                if idx == 3 {
                    keys.push(arg.range);
                }
                idx += 1;
            }
            Err(Stop::Incomplete(hint)) if hint > 0 => {
                let (n, start) = count_line(buf, at, "").ok()?;
                let n = usize::try_from(n?).ok()?;
                if n < threshold || start + n + 2 != hint {
                    return None;
                }
                let Kind::Multibulk { remaining } = args.kind else {
                    return None;
                };
                let kind = match idx {
                    // The script, with room for numkeys and a key.
                    1 if argc >= 4 => StreamKind::Spool,
                    i if i >= 4 && eval_numkeys(numkeys, argc, cmd.name()).is_ok() => {
                        StreamKind::Single
                    }
                    _ => return None,
                };
                if kind == StreamKind::Spool {
                    keys.clear();
                }
                return Some(single_head(cmd, keys, start, n, remaining, kind));
            }
            _ => return None,
        }
    }
}

/// The error reply redis-server (or the proxy, for 0 when streamed) gives an EVAL-like
/// command of `argc` arguments whose `numkeys` argument parses as
/// `numkeys`; `Ok` when it has at least one key.
pub fn eval_numkeys(numkeys: Option<i64>, argc: usize, name: &str) -> Result<(), Vec<u8>> {
    match numkeys {
        None => Err(reply::err_line("value is not an integer or out of range")),
        Some(n) if n < 0 => Err(reply::err_line("Number of keys can't be negative")),
        Some(n) if n > argc as i64 - 3 => Err(reply::err_line(
            "Number of keys can't be greater than number of args",
        )),
        // A keyless script is sent to the pool's keyless server when it is
        // buffered whole (`scan`); one streamed (1 MB or more, held until
        // its key arrives) needs a key.
        Some(0) => Err(reply::err_line(&format!(
            "{name} with numkeys 0 and a script of 1 MB or more is not supported by the proxy"
        ))),
        Some(_) => Ok(()),
    }
}

/// One whole bulk argument at the start of `buf` (a request being
/// streamed): `Ok(Some((value, len)))` with the value's range and the
/// argument's length, `Ok(None)` until it is all there, or the protocol
/// error to reply.
pub fn whole_arg(buf: &[u8], limits: &Limits) -> Result<Option<(Range<usize>, usize)>, Vec<u8>> {
    let mut args = Args {
        buf,
        kind: Kind::Multibulk { remaining: 1 },
        pos: 0,
        max_value: limits.max_value,
        pre_auth: limits.pre_auth,
    };
    match args.next_arg() {
        Ok(a) => Ok(a.map(|a| (a.range, args.pos))),
        Err(Stop::Incomplete(_)) => Ok(None),
        Err(Stop::Protocol(reply)) => Err(reply),
    }
}

/// The head of an MSET (`first`: its command name, read) whose argument
/// of at least `threshold` bytes is incomplete: streamed pair by pair. An
/// MSET of the wrong arity is not: buffered whole, it gets redis-server's
/// error as any other.
fn pairs_head(mut args: Args<'_>, cmd: Cmd, threshold: usize) -> Option<StreamHead> {
    let Kind::Multibulk { remaining } = args.kind else {
        return None;
    };
    if remaining < 2 || remaining % 2 != 0 {
        return None;
    }
    let len = args.pos;
    let buf = args.buf;
    loop {
        let at = args.pos;
        match args.next_arg() {
            Ok(Some(_)) => {}
            Err(Stop::Incomplete(hint)) if hint > 0 => {
                let (n, start) = count_line(buf, at, "").ok()?;
                let n = usize::try_from(n?).ok()?;
                if n < threshold || start + n + 2 != hint {
                    return None;
                }
                return Some(StreamHead {
                    req: Request {
                        len,
                        op: Op::Redis(RedisOp {
                            cmd,
                            class: cmd.class(),
                        }),
                        keys: Keys::new(),
                        route: Route::Multi,
                        noreply: false,
                    },
                    body: 0,
                    args_left: remaining,
                    kind: StreamKind::Pairs,
                });
            }
            _ => return None,
        }
    }
}

/// A request at the start of `buf` that `parse_request` found incomplete
/// because a bulk argument of at least `threshold` bytes is not all there:
/// when its command is a single-key one whose key came before that
/// argument, or an MSET, returns the head to forward now. `None`: buffer
/// the request whole, as any other.
pub fn stream_head(buf: &[u8], limits: &Limits, threshold: usize) -> Option<StreamHead> {
    let mut args = Args::frame(buf, limits).ok()?;
    if !matches!(args.kind, Kind::Multibulk { .. }) {
        return None;
    }
    let first = args.next_arg().ok()??;
    let cmd = Cmd::lookup(&buf[first.range.clone()])?;
    if cmd.class() == CmdClass::MSet {
        return pairs_head(args, cmd, threshold);
    }
    if cmd.class() == CmdClass::Eval {
        return eval_head(args, cmd, threshold);
    }
    if cmd.class() != CmdClass::Single {
        return None;
    }
    let KeySpec::At(key_idx) = cmd.keys() else {
        return None;
    };
    let key_idx = usize::from(key_idx);
    let mut keys = Keys::new();
    let mut idx = 1usize;
    loop {
        let at = args.pos;
        match args.next_arg() {
            Ok(Some(arg)) => {
                if idx == key_idx {
                    keys.push(arg.range);
                }
                idx += 1;
            }
            Err(Stop::Incomplete(hint)) if hint > 0 => {
                let (n, start) = count_line(buf, at, "").ok()?;
                let n = usize::try_from(n?).ok()?;
                if n < threshold || keys.is_empty() || start + n + 2 != hint {
                    return None;
                }
                let Kind::Multibulk { remaining } = args.kind else {
                    return None;
                };
                return Some(single_head(
                    cmd,
                    keys,
                    start,
                    n,
                    remaining,
                    StreamKind::Single,
                ));
            }
            _ => return None,
        }
    }
}

/// The head of a request routed by one key whose large argument (of `n`
/// bytes, starting at `start`) is the next of `remaining`.
fn single_head(
    cmd: Cmd,
    keys: Keys,
    start: usize,
    n: usize,
    remaining: usize,
    kind: StreamKind,
) -> StreamHead {
    StreamHead {
        req: Request {
            len: start,
            op: Op::Redis(RedisOp {
                cmd,
                class: cmd.class(),
            }),
            keys,
            route: Route::Single,
            noreply: false,
        },
        body: n + 2,
        args_left: remaining - 1,
        kind,
    }
}

/// The header (`$<len>\r\n`) of the next argument of a request being
/// streamed: `Ok(Some((header_len, value_len)))`, `Ok(None)` when the
/// header is not all there yet, or the protocol error to reply (the
/// connection is then closed, as redis-server does).
pub fn stream_arg(buf: &[u8], limits: &Limits) -> Result<Option<(usize, usize)>, Vec<u8>> {
    let Some(&c) = buf.first() else {
        return Ok(None);
    };
    if c != b'$' {
        let mut out = b"-ERR Protocol error: expected '$', got '".to_vec();
        out.push(c);
        out.extend_from_slice(b"'\r\n");
        return Err(out);
    }
    match count_line(buf, 0, "too big bulk count string") {
        Ok((n, start)) => {
            let n = n
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n <= limits.max_value && n <= isize::MAX as usize / 2);
            match n {
                Some(n) => Ok(Some((start, n))),
                None => match protocol("invalid bulk length") {
                    Stop::Protocol(r) => Err(r),
                    Stop::Incomplete(_) => Ok(None),
                },
            }
        }
        Err(Stop::Incomplete(_)) => Ok(None),
        Err(Stop::Protocol(r)) => Err(r),
    }
}

/// Progress through XREAD / XREADGROUP options towards the first stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Streams {
    Keyword,
    Skip(u8),
    Key,
    Done,
}

/// Parses one request at the start of `buf`.
///
/// `Done` gives the request with its routing; `Incomplete { hint }` asks
/// for more input (hint: the total length needed when a bulk string is
/// known to extend beyond the input). Framing errors are worded like
/// redis-server's and close the connection; unknown, unsupported or
/// unroutable commands get an error reply and the connection stays open.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
    if let Some(req) = super::fast::get_or_set(buf, limits) {
        return Ok(Parse::Done(req));
    }
    scan_general(buf, limits)
}

/// [`parse_request`] without the GET/SET shortcut (`fast.rs`).
pub(super) fn scan_general(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
    match scan(buf, limits) {
        Ok(p) => p,
        Err(Stop::Incomplete(hint)) => Ok(Parse::Incomplete { hint }),
        Err(Stop::Protocol(reply)) => Err(RequestError {
            reply,
            skip: buf.len(),
            close: true,
            forward: None,
        }),
    }
}

/// Whether the shortcut, where it answers for `buf`, answers as the
/// general parser does (the fuzz target's and the tests' invariant).
#[doc(hidden)]
pub fn shortcut_agrees(buf: &[u8], limits: &Limits) -> bool {
    match super::fast::get_or_set(buf, limits) {
        None => true,
        Some(fast) => matches!(
            scan_general(buf, limits),
            Ok(crate::proto::Parse::Done(g)) if g == fast
        ),
    }
}

type Scanned = Result<Parse<Request>, RequestError>;

fn scan(buf: &[u8], limits: &Limits) -> Result<Scanned, Stop> {
    let mut args = Args::frame(buf, limits)?;
    let Some(first) = args.next_arg()? else {
        return Err(Stop::Incomplete(0));
    };
    let cmd = if first.exact {
        Cmd::lookup(&buf[first.range.clone()])
    } else {
        let mut name = Vec::new();
        args.value(&first, &mut name);
        Cmd::lookup(&name)
    };
    let spec = cmd.map_or(KeySpec::None, Cmd::keys);
    // An MGET, DEL or MSET of many keys: their room in one allocation, not
    // a growth every few keys.
    let keys = match spec {
        KeySpec::All | KeySpec::AllButLast => Keys::with_capacity(args.left()),
        KeySpec::Pairs => Keys::with_capacity(args.left().div_ceil(2)),
        _ => Keys::new(),
    };
    let mut found = Found {
        keys,
        argc: 1,
        inexact_key: false,
        numkeys: None,
        blocking: false,
        second: None,
    };
    scan_args(&mut args, buf, spec, &mut found)?;
    let len = args.end();
    let req = &buf[..len];
    let fail = |reply: Vec<u8>| {
        Ok(Err(RequestError {
            reply,
            skip: len,
            close: false,
            forward: None,
        }))
    };
    let Some(cmd) = cmd else {
        return fail(super::args::unknown_command(req));
    };
    // XREAD / XREADGROUP with BLOCK block like BLPOP does.
    let class = if found.blocking {
        CmdClass::Blocking
    } else {
        cmd.class()
    };
    let route = match command_route(cmd, class, &found, req) {
        Ok(route) => route,
        Err(e) => return fail(e),
    };
    if found.inexact_key {
        return fail(reply::err_line(
            "inline keys with quotes or escapes are not supported by the proxy, use RESP",
        ));
    }
    if found.keys.len() > limits.max_keys {
        return fail(reply::err_line(&format!(
            "too many keys in one request, the proxy accepts at most {}",
            limits.max_keys
        )));
    }
    Ok(Ok(Parse::Done(Request {
        len,
        op: Op::Redis(RedisOp { cmd, class }),
        keys: found.keys,
        route,
        noreply: false,
    })))
}

/// What the arguments after the command name tell the router.
struct Found {
    /// The keys, by the command's key spec.
    keys: Keys,
    /// Arguments, the command name included.
    argc: usize,
    /// A key is an inline argument with quotes or escapes.
    inexact_key: bool,
    /// EVAL's (and ZUNION's, ...) `numkeys`, when the spec has one.
    numkeys: Option<i64>,
    /// XREAD / XREADGROUP with BLOCK.
    blocking: bool,
    /// The argument after the command name (a subcommand, PING's text).
    second: Option<Arg>,
}

/// Frames the arguments after the command name into `found` (argc 1, the
/// rest empty), picking out its keys by `spec`.
#[inline(always)]
fn scan_args(
    args: &mut Args<'_>,
    buf: &[u8],
    spec: KeySpec,
    found: &mut Found,
) -> Result<(), Stop> {
    let mut streams = Streams::Keyword;
    while let Some(arg) = args.next_arg()? {
        let idx = found.argc;
        found.argc += 1;
        let is_key = match spec {
            KeySpec::None => false,
            KeySpec::At(n) => idx == usize::from(n),
            KeySpec::All => true,
            KeySpec::Pairs => idx % 2 == 1,
            KeySpec::Eval => {
                if idx == 2 {
                    found.numkeys = parse_int(&buf[arg.range.clone()]);
                }
                idx == 3 && found.numkeys.is_some_and(|n| n >= 1)
            }
            KeySpec::Streams => {
                let (key, next) =
                    stream_step(streams, &buf[arg.range.clone()], &mut found.blocking);
                streams = next;
                key
            }
            // The last is the timeout: taken off once the arguments end.
            KeySpec::AllButLast => true,
            KeySpec::FirstTwo => idx == 1 || idx == 2,
            KeySpec::NumKeysAt2 => {
                if idx == 2 {
                    found.numkeys = parse_int(&buf[arg.range.clone()]);
                }
                idx >= 3
                    && found
                        .numkeys
                        .is_some_and(|n| n >= 1 && (idx as i64) < 3 + n)
            }
        };
        if idx == 1 {
            found.second = Some(arg.clone());
        }
        if is_key {
            found.inexact_key |= !arg.exact;
            found.keys.push(arg.range);
        }
    }
    if spec == KeySpec::AllButLast {
        found.keys.pop();
    }
    Ok(())
}

/// The route of a known command of `class`, or the error reply for one the
/// proxy cannot route (unsupported, wrong number of arguments, no key).
#[inline(always)]
fn command_route(cmd: Cmd, class: CmdClass, found: &Found, req: &[u8]) -> Result<Route, Vec<u8>> {
    let (argc, second) = (found.argc, found.second.as_ref());
    let name = cmd.name();
    Ok(match class {
        CmdClass::Unsupported => return Err(reply::unsupported(name)),
        CmdClass::Local => local_route(cmd, argc, req, second)?,
        CmdClass::MSet if argc < 3 || argc.is_multiple_of(2) => {
            return Err(reply::wrong_args(name))
        }
        CmdClass::Eval => {
            if argc < 3 {
                return Err(reply::wrong_args(name));
            }
            match eval_numkeys(found.numkeys, argc, name) {
                Ok(()) => Route::Single,
                // No key: one server, as a keyless command (keys stays empty).
                Err(_) if found.numkeys == Some(0) => Route::Single,
                Err(e) => return Err(e),
            }
        }
        CmdClass::Keyless | CmdClass::Scan => Route::Single,
        CmdClass::Broadcast if !cmd.is("SCRIPT") => Route::Broadcast,
        CmdClass::Broadcast => script_route(name, second.map(|a| &req[a.range.clone()]))?,
        _ if cmd.is("MEMORY")
            && !second.is_some_and(|a| req[a.range.clone()].eq_ignore_ascii_case(b"USAGE")) =>
        {
            let sub = second.map_or(&b""[..], |a| &req[a.range.clone()]);
            return Err(unsupported_sub(name, sub));
        }
        CmdClass::OneServer if argc < 3 || argc.is_multiple_of(2) => {
            return Err(reply::wrong_args(name))
        }
        CmdClass::Transaction if cmd.is("WATCH") && found.keys.is_empty() => {
            return Err(reply::wrong_args(name))
        }
        CmdClass::Transaction | CmdClass::PubSub => Route::Single,
        _ if found.keys.is_empty() => return Err(reply::wrong_args(name)),
        CmdClass::MGet
        | CmdClass::MSet
        | CmdClass::SumInt
        | CmdClass::OneServer
        | CmdClass::Blocking => Route::Multi,
        CmdClass::Single => Route::Single,
    })
}

/// SCRIPT: LOAD and FLUSH go to every server; the rest are refused.
fn script_route(name: &str, sub: Option<&[u8]>) -> Result<Route, Vec<u8>> {
    match sub {
        Some(s) if s.eq_ignore_ascii_case(b"LOAD") || s.eq_ignore_ascii_case(b"FLUSH") => {
            Ok(Route::Broadcast)
        }
        None => Err(reply::wrong_args(name)),
        Some(s) => Err(unsupported_sub(name, s)),
    }
}

/// The refusal of a subcommand the proxy does not route.
fn unsupported_sub(name: &str, sub: &[u8]) -> Vec<u8> {
    reply::unsupported(&format!(
        "{name} {}",
        String::from_utf8_lossy(sub).to_ascii_uppercase()
    ))
}

/// One XREAD / XREADGROUP argument: is it the first stream key, and what
/// comes next.
fn stream_step(state: Streams, arg: &[u8], blocking: &mut bool) -> (bool, Streams) {
    match state {
        Streams::Keyword => {
            let is = |k: &[u8]| arg.eq_ignore_ascii_case(k);
            if is(b"STREAMS") {
                (false, Streams::Key)
            } else if is(b"BLOCK") {
                *blocking = true;
                (false, Streams::Skip(1))
            } else if is(b"COUNT") || is(b"CLAIM") {
                (false, Streams::Skip(1))
            } else if is(b"GROUP") {
                (false, Streams::Skip(2))
            } else if is(b"NOACK") {
                (false, Streams::Keyword)
            } else {
                (false, Streams::Done)
            }
        }
        Streams::Skip(1) => (false, Streams::Keyword),
        Streams::Skip(n) => (false, Streams::Skip(n - 1)),
        Streams::Key => (true, Streams::Done),
        Streams::Done => (false, Streams::Done),
    }
}

/// Route of a command the proxy answers.
fn local_route(cmd: Cmd, argc: usize, req: &[u8], second: Option<&Arg>) -> Result<Route, Vec<u8>> {
    if cmd.is("PING") || cmd.is("ECHO") {
        let ping = cmd.is("PING");
        return match (second, argc) {
            (None, 1) if ping => Ok(Route::Local(Local::Reply(b"+PONG\r\n"[..].into()))),
            (Some(arg), 2) => {
                let mut v = Vec::new();
                Args::new(req).value(arg, &mut v);
                let mut out = Vec::new();
                reply::bulk(&v, &mut out);
                Ok(Route::Local(Local::Reply(out.into())))
            }
            _ => Err(reply::wrong_args(cmd.name())),
        };
    }
    if cmd.is("QUIT") {
        return Ok(Route::Local(Local::Quit(b"+OK\r\n".to_vec())));
    }
    Ok(Route::Local(Local::RedisSession))
}

/// Where the keys of a command routed by one key are, when it names more
/// than the one the parser records (routing stays by that one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MoreKeys {
    /// Arguments 1 and 2 (RENAME src dst, SMOVE src dst member, ...).
    FirstTwo,
    /// Every argument from this index on (SUNION key..., BITOP op dst key...).
    From(usize),
    /// `numkeys` at this index, that many keys after it (ZUNION, LMPOP,
    /// EVAL, ...).
    Counted(usize),
    /// A destination at 1, then `numkeys` at 2 and the keys (ZUNIONSTORE).
    DestCounted,
    /// The key at 1, and a `STORE` / `STOREDIST` destination among the
    /// options that start at this index (SORT, GEORADIUS...).
    Store(usize),
    /// XREAD / XREADGROUP: the first half of what follows `STREAMS`.
    Streams,
}

/// Whether `cmd` can name keys besides the one it is routed by.
pub fn names_more_keys(cmd: Cmd) -> bool {
    // Asked once per request: a table by command index rather than the
    // name comparisons of `more_keys`.
    static MORE: std::sync::OnceLock<Vec<bool>> = std::sync::OnceLock::new();
    MORE.get_or_init(|| Cmd::all().map(|c| more_keys(c).is_some()).collect())
        .get(cmd.index())
        .copied()
        .unwrap_or(false)
}

fn more_keys(cmd: Cmd) -> Option<MoreKeys> {
    use MoreKeys::*;
    Some(match cmd.name() {
        "RENAME" | "RENAMENX" | "COPY" | "SMOVE" | "LMOVE" | "RPOPLPUSH" | "ZRANGESTORE"
        | "GEOSEARCHSTORE" | "LCS" => FirstTwo,
        "SINTER" | "SUNION" | "SDIFF" | "SINTERSTORE" | "SUNIONSTORE" | "SDIFFSTORE"
        | "PFCOUNT" | "PFMERGE" => From(1),
        "BITOP" => From(2),
        "ZUNION" | "ZINTER" | "ZDIFF" | "ZINTERCARD" | "SINTERCARD" | "LMPOP" | "ZMPOP" => {
            Counted(1)
        }
        "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" => DestCounted,
        "SORT" | "SORT_RO" => Store(2),
        "GEORADIUS" => Store(6),
        "GEORADIUSBYMEMBER" => Store(5),
        "XREAD" | "XREADGROUP" => Streams,
        _ if cmd.class() == CmdClass::Eval => Counted(2),
        _ => return None,
    })
}

/// Every key a request names (its bytes `bytes`, accepted by
/// [`parse_request`] as `req`), for what must see all of them before it
/// runs: a migrating pool pulls each moved key over first, or a command
/// such as `SMOVE {t}a {t}b m` would create `{t}b` on its new owner while
/// the old `{t}b` still waits on the old one. `req.keys` for the commands
/// whose keys it already lists in full; SORT's `BY` / `GET` patterns are
/// not keys named here.
pub fn command_keys(cmd: Cmd, req: &Request, bytes: &[u8]) -> Vec<Vec<u8>> {
    let recorded = || req.keys.iter().map(|r| bytes[r.clone()].to_vec()).collect();
    let Some(spec) = more_keys(cmd) else {
        return recorded();
    };
    let args = Args::new(bytes);
    let all: Vec<Arg> = Args::new(bytes).collect();
    let value = |a: &Arg| {
        let mut v = Vec::new();
        args.value(a, &mut v);
        v
    };
    let count_at = |i: usize| {
        all.get(i)
            .and_then(|a| parse_int(&value(a)))
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    };
    let idx: Vec<usize> = match spec {
        MoreKeys::FirstTwo => vec![1, 2],
        MoreKeys::From(i) => (i..all.len()).collect(),
        MoreKeys::Counted(i) => (i + 1..i + 1 + count_at(i)).collect(),
        MoreKeys::DestCounted => std::iter::once(1).chain(3..3 + count_at(2)).collect(),
        MoreKeys::Store(from) => {
            let mut out = vec![1];
            let mut i = from;
            while i < all.len() {
                let word = value(&all[i]).to_ascii_uppercase();
                match word.as_slice() {
                    b"STORE" | b"STOREDIST" => {
                        out.push(i + 1);
                        i += 2;
                    }
                    // SORT's options with values (a pattern is not a key).
                    b"BY" | b"GET" => i += 2,
                    b"LIMIT" => i += 3,
                    _ => i += 1,
                }
            }
            out
        }
        MoreKeys::Streams => {
            let at = all
                .iter()
                .position(|a| value(a).eq_ignore_ascii_case(b"STREAMS"))
                .map_or(all.len(), |p| p + 1);
            (at..at + (all.len() - at) / 2).collect()
        }
    };
    let keys: Vec<Vec<u8>> = idx.iter().filter_map(|&i| all.get(i)).map(value).collect();
    if keys.is_empty() {
        recorded()
    } else {
        keys
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
