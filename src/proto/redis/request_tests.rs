//! Table-driven request and reply vectors (tests/vectors/redis) and
//! split-invariance: every input cut at every byte parses as incomplete
//! until the whole message is there, then gives the same result.

use super::*;
use crate::proto::redis::parse_response;
use crate::proto::{Limits, Local, Parse, Response, ResponseError, Route};

/// Decodes `\r \n \t \\ \0 \xHH` escapes of a vector file.
pub(crate) fn unescape_vec(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'0' => out.push(0),
                b's' => out.push(b' '),
                b'x' => {
                    let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(h, 16).unwrap());
                    i += 2;
                }
                c => out.push(c),
            }
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    out
}

fn esc(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\\' => s.push_str("\\\\"),
            b' ' => s.push_str("\\s"),
            0x21..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

fn limits() -> Limits {
    Limits {
        max_value: 1000,
        max_keys: 100,
        pre_auth: false,
    }
}

/// Renders a request parse outcome as a vector's expected text.
fn render_req(input: &[u8], r: &Result<Parse<Request>, RequestError>) -> String {
    match r {
        Ok(Parse::Incomplete { hint }) => format!("incomplete hint={hint}"),
        Ok(Parse::Done(req)) => {
            let Op::Redis(op) = req.op else {
                unreachable!()
            };
            let route = match &req.route {
                Route::Single => "single".to_string(),
                Route::Multi => "multi".to_string(),
                Route::Broadcast => "broadcast".to_string(),
                Route::Local(Local::Reply(r)) => format!("reply:{}", esc(r)),
                Route::Local(Local::Quit(r)) => format!("quit:{}", esc(r)),
                Route::Local(Local::Stats) => "stats".to_string(),
                Route::Local(Local::RedisSession) => "session".to_string(),
            };
            let keys: Vec<String> = req.keys.iter().map(|k| esc(&input[k.clone()])).collect();
            format!(
                "done len={} cmd={} class={:?} route={} keys={}",
                req.len,
                op.cmd.name(),
                op.class,
                route,
                keys.join(",")
            )
        }
        Err(e) if e.close => format!("close reply={}", esc(&e.reply)),
        Err(e) => format!("error skip={} reply={}", e.skip, esc(&e.reply)),
    }
}

fn render_rsp(r: &Result<Parse<Response>, ResponseError>) -> String {
    match r {
        Ok(Parse::Incomplete { hint }) => format!("incomplete hint={hint}"),
        Ok(Parse::Done(x)) => format!("done len={} error={}", x.len, x.is_error),
        Err(_) => "invalid".to_string(),
    }
}

fn vectors(text: &str) -> Vec<(usize, Vec<u8>, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(n, l)| {
            let (i, e) = l
                .split_once('\t')
                .unwrap_or_else(|| panic!("line {}: no tab", n + 1));
            (n + 1, unescape_vec(i), e.trim().to_string())
        })
        .collect()
}

const REQUESTS: &str = include_str!("../../../tests/vectors/redis/requests.txt");
const REPLIES: &str = include_str!("../../../tests/vectors/redis/replies.txt");

#[test]
fn request_vectors() {
    let mut bad = Vec::new();
    for (line, input, want) in vectors(REQUESTS) {
        let got = render_req(&input, &parse_request(&input, &limits()));
        if got != want {
            bad.push(format!(
                "line {line}: {}\n  want {want}\n  got  {got}",
                esc(&input)
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn reply_vectors() {
    let mut bad = Vec::new();
    for (line, input, want) in vectors(REPLIES) {
        let got = render_rsp(&parse_response(&input));
        if got != want {
            bad.push(format!(
                "line {line}: {}\n  want {want}\n  got  {got}",
                esc(&input)
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Checks split invariance of one request input; returns a failure text.
pub(crate) fn check_request_splits(input: &[u8], limits: &Limits) -> Option<String> {
    let full = parse_request(input, limits);
    let need = match &full {
        Ok(Parse::Done(r)) => r.len,
        Err(e) if !e.close => e.skip,
        Ok(Parse::Incomplete { hint }) => input.len().max(*hint),
        _ => input.len(),
    };
    for k in 0..input.len() {
        let part = parse_request(&input[..k], limits);
        let ok = match (&part, &full) {
            (Ok(Parse::Incomplete { hint }), _) => k < need && *hint <= need.max(k + 1),
            (Ok(Parse::Done(a)), Ok(Parse::Done(b))) => k >= need && a == b,
            (Err(a), Err(b)) if a.close && b.close => a.reply == b.reply,
            (Err(a), Err(b)) => k >= need && a == b,
            _ => false,
        };
        if !ok {
            return Some(format!("split {k} of {}: {part:?} vs {full:?}", esc(input)));
        }
    }
    None
}

/// Checks split invariance of one reply input; returns a failure text.
pub(crate) fn check_reply_splits(input: &[u8]) -> Option<String> {
    let full = parse_response(input);
    let need = match &full {
        Ok(Parse::Done(r)) => r.len,
        Ok(Parse::Incomplete { hint }) => input.len().max(*hint),
        _ => input.len(),
    };
    for k in 0..input.len() {
        let part = parse_response(&input[..k]);
        let ok = match (&part, &full) {
            (Ok(Parse::Incomplete { hint }), _) => k < need && *hint <= need.max(k + 1),
            (Ok(Parse::Done(a)), Ok(Parse::Done(b))) => a == b,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        if !ok {
            return Some(format!("split {k} of {}: {part:?} vs {full:?}", esc(input)));
        }
    }
    None
}

#[test]
fn every_split_is_incomplete_then_same() {
    let mut bad = Vec::new();
    for (line, input, _) in vectors(REQUESTS) {
        if let Some(f) = check_request_splits(&input, &limits()) {
            bad.push(format!("requests line {line}: {f}"));
        }
    }
    for (line, input, _) in vectors(REPLIES) {
        if let Some(f) = check_reply_splits(&input) {
            bad.push(format!("replies line {line}: {f}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn pipelined_requests_parse_one_by_one() {
    let input = b"PING\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n*0\r\n\r\nDEL a b\r\n";
    let mut pos = 0;
    let mut names = Vec::new();
    while pos < input.len() {
        match parse_request(&input[pos..], &limits()) {
            Ok(Parse::Done(r)) => {
                let Op::Redis(op) = r.op else { unreachable!() };
                names.push(op.cmd.name());
                pos += r.len;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(names, vec!["PING", "GET", "DEL"]);
}

#[test]
fn big_value_hint_and_limits() {
    let mut v = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000\r\n".to_vec();
    let need = v.len() + 1002;
    assert_eq!(
        parse_request(&v, &limits()),
        Ok(Parse::Incomplete { hint: need })
    );
    v.extend(std::iter::repeat_n(b'x', 1000));
    v.extend_from_slice(b"\r\n");
    assert!(matches!(parse_request(&v, &limits()), Ok(Parse::Done(r)) if r.len == need));
    let too_big = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1001\r\n";
    assert!(matches!(parse_request(too_big, &limits()), Err(e) if e.close));
}

/// Renders the current outcome of every vector (run with --ignored to
/// print candidate expectations for new vectors).
#[test]
#[ignore]
fn print_vectors() {
    for (_, input, _) in vectors(REQUESTS) {
        println!(
            "{}\t{}",
            esc(&input),
            render_req(&input, &parse_request(&input, &limits()))
        );
    }
    for (_, input, _) in vectors(REPLIES) {
        println!("{}\t{}", esc(&input), render_rsp(&parse_response(&input)));
    }
}

#[test]
fn random_inputs_are_split_invariant() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet: &[&[u8]] = &[
        b"*", b"$", b"\r\n", b"1", b"2", b"3", b"0", b"-1", b"MGET", b"MSET", b"DEL", b"k", b" ",
        b"\"", b"\n", b":", b"+OK", b"%", b"|", b"_", b"GET", b"EVAL", b"~", b">",
    ];
    let mut bad = Vec::new();
    for _ in 0..3000 {
        let n = (rnd() % 16) as usize;
        let mut d = Vec::new();
        for _ in 0..n {
            d.extend_from_slice(alphabet[(rnd() % alphabet.len() as u64) as usize]);
        }
        bad.extend(check_request_splits(&d, &limits()));
        bad.extend(check_reply_splits(&d));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn big_limits() -> Limits {
    Limits {
        max_value: 512 << 20,
        max_keys: 1000,
        pre_auth: false,
    }
}

#[test]
fn stream_head_of_a_large_set() {
    let buf = b"*5\r\n$3\r\nSET\r\n$3\r\nkey\r\n$2000000\r\nabc";
    let l = big_limits();
    assert_eq!(
        parse_request(buf, &l).unwrap(),
        Parse::Incomplete {
            hint: 32 + 2_000_000 + 2
        }
    );
    let h = stream_head(buf, &l, 1 << 20).unwrap();
    assert_eq!(h.req.len, 32, "the head ends where the value starts");
    assert_eq!(&buf[h.req.keys[0].clone()], b"key");
    assert_eq!(h.req.route, Route::Single);
    assert_eq!(h.body, 2_000_002);
    assert_eq!(h.args_left, 2);
    // Not all of the header there yet: no head.
    assert!(stream_head(&buf[..30], &l, 1 << 20).is_none());
}

#[test]
fn stream_head_only_when_streamable() {
    let l = big_limits();
    let t = 1 << 20;
    // Below the threshold.
    assert!(stream_head(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000\r\nab", &l, t).is_none());
    // The large argument is the key itself.
    assert!(stream_head(b"*3\r\n$3\r\nSET\r\n$2000000\r\nab", &l, t).is_none());
    // EVAL with no room for numkeys and a key: its error comes whole.
    assert!(stream_head(b"*3\r\n$4\r\nEVAL\r\n$2000000\r\nab", &l, t).is_none());
    // MSET of the wrong arity (its error comes from the whole request),
    // answered locally (ECHO), unknown.
    assert!(stream_head(b"*4\r\n$4\r\nMSET\r\n$1\r\nk\r\n$2000000\r\nab", &l, t).is_none());
    assert!(stream_head(b"*2\r\n$4\r\nECHO\r\n$2000000\r\nab", &l, t).is_none());
    assert!(stream_head(b"*3\r\n$4\r\nNOPE\r\n$1\r\nk\r\n$2000000\r\nab", &l, t).is_none());
    // Inline commands carry no bulk strings.
    assert!(stream_head(b"SET k v", &l, t).is_none());
    // Over max_value: the normal parser's protocol error, not a stream.
    let small = Limits {
        max_value: 1 << 20,
        max_keys: 10,
        pre_auth: false,
    };
    assert!(stream_head(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\nab", &small, t).is_none());
    // HSET: key first, the large field value later.
    let h = stream_head(
        b"*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$1\r\nf\r\n$3000000\r\n",
        &l,
        t,
    )
    .unwrap();
    assert_eq!(h.args_left, 0);
    assert_eq!(h.body, 3_000_002);
}

#[test]
fn stream_arg_frames_the_arguments_after_the_value() {
    let l = big_limits();
    assert_eq!(stream_arg(b"", &l), Ok(None));
    assert_eq!(stream_arg(b"$2", &l), Ok(None));
    assert_eq!(stream_arg(b"$2\r", &l), Ok(None));
    assert_eq!(stream_arg(b"$2\r\nEX\r\n", &l), Ok(Some((4, 2))));
    assert_eq!(stream_arg(b"$0\r\n", &l), Ok(Some((4, 0))));
    let err = |b: &[u8]| String::from_utf8(stream_arg(b, &l).unwrap_err()).unwrap();
    assert!(err(b"EX\r\n").contains("expected '$', got 'E'"));
    assert!(err(b"$-1\r\n").contains("invalid bulk length"));
    assert!(err(b"$x\r\n").contains("invalid bulk length"));
    assert!(err(b"$600000000\r\n").contains("invalid bulk length"));
    assert!(err(&[b'$'; 70000]).contains("too big bulk count string"));
}

#[test]
fn pre_auth_limits_are_redis_servers() {
    let l = Limits {
        pre_auth: true,
        ..big_limits()
    };
    let err = |b: &[u8]| match parse_request(b, &l) {
        Err(e) => {
            assert!(e.close, "a pre-AUTH limit closes the connection");
            String::from_utf8(e.reply).unwrap()
        }
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(
        err(b"*11\r\n"),
        "-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    assert_eq!(
        err(b"*1\r\n$16385\r\n"),
        "-ERR Protocol error: unauthenticated bulk length\r\n"
    );
    // The absolute limits are checked first, as redis-server does.
    assert_eq!(
        err(b"*1\r\n$-5\r\n"),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    // At the limits: still parsed.
    let mut ten = b"*10\r\n$4\r\nAUTH\r\n".to_vec();
    for _ in 0..9 {
        ten.extend_from_slice(b"$1\r\nx\r\n");
    }
    assert!(matches!(parse_request(&ten, &l), Ok(Parse::Done(_))));
    let mut big = b"*2\r\n$4\r\nAUTH\r\n$16384\r\n".to_vec();
    big.resize(big.len() + 16384, b'p');
    big.extend_from_slice(b"\r\n");
    assert!(matches!(parse_request(&big, &l), Ok(Parse::Done(_))));
    // Authenticated: no such limits.
    let mut set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n".to_vec();
    set.resize(set.len() + 20000, b'v');
    set.extend_from_slice(b"\r\n");
    assert!(matches!(
        parse_request(&set, &big_limits()),
        Ok(Parse::Done(_))
    ));
    assert_eq!(
        err(&set),
        "-ERR Protocol error: unauthenticated bulk length\r\n"
    );
}

#[test]
fn stream_head_of_a_large_mset_is_pair_by_pair() {
    let l = big_limits();
    let t = 1 << 20;
    let buf = b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$2000000\r\nxy";
    let h = stream_head(buf, &l, t).unwrap();
    assert_eq!(h.kind, StreamKind::Pairs);
    assert_eq!(h.req.len, 14, "the head is the count and the name");
    assert_eq!(h.req.route, Route::Multi);
    assert!(h.req.keys.is_empty());
    assert_eq!((h.body, h.args_left), (0, 4));
    // A large key streams too (the pair waits for the key whole).
    let h = stream_head(b"*3\r\n$4\r\nmset\r\n$2000000\r\nk", &l, t).unwrap();
    assert_eq!((h.kind, h.args_left), (StreamKind::Pairs, 2));
    // Wrong arity, too few arguments, or no large argument: buffered whole.
    assert!(stream_head(b"*2\r\n$4\r\nMSET\r\n$2000000\r\nk", &l, t).is_none());
    assert!(stream_head(b"*3\r\n$4\r\nMSET\r\n$1\r\nk\r\n$100\r\nv", &l, t).is_none());
    assert!(stream_head(b"*3\r\n$6\r\nMSETNX\r\n$1\r\nk\r\n$2000000\r\nv", &l, t).is_none());
}

#[test]
fn stream_pair_frames_one_pair() {
    let l = big_limits();
    let t = 1 << 20;
    let buf = b"$3\r\nkey\r\n$5\r\nvalue\r\n$1\r\n";
    assert_eq!(
        stream_pair(buf, &l, t).unwrap(),
        Some(Pair::Small {
            key: 4..7,
            value: 13..18,
            len: 20
        })
    );
    // Incomplete anywhere: wait.
    for cut in 0..20 {
        assert_eq!(stream_pair(&buf[..cut], &l, t).unwrap(), None, "cut {cut}");
    }
    let big = b"$1\r\nk\r\n$3000000\r\nab";
    assert_eq!(
        stream_pair(big, &l, t).unwrap(),
        Some(Pair::Large {
            key: 4..5,
            head: 17,
            body: 3_000_002
        })
    );
    assert_eq!(stream_pair(&big[..16], &l, t).unwrap(), None);
    // Framing errors, worded as redis-server's.
    let e = stream_pair(b"+k\r\n", &l, t).unwrap_err();
    assert_eq!(e, b"-ERR Protocol error: expected '$', got '+'\r\n");
    let e = stream_pair(b"$1\r\nk\r\n:1\r\n", &l, t).unwrap_err();
    assert_eq!(e, b"-ERR Protocol error: expected '$', got ':'\r\n");
    let e = stream_pair(b"$1\r\nk\r\n$-5\r\n", &l, t).unwrap_err();
    assert_eq!(e, b"-ERR Protocol error: invalid bulk length\r\n");
    let small = Limits {
        max_value: 1 << 20,
        max_keys: 10,
        pre_auth: false,
    };
    assert!(stream_pair(b"$1\r\nk\r\n$2000000\r\n", &small, t).is_err());
}

#[test]
fn stream_head_of_a_large_eval() {
    let l = big_limits();
    let t = 1 << 20;
    // The script before the key: held until the key is read.
    let buf = b"*5\r\n$4\r\nEVAL\r\n$2000000\r\n--";
    let h = stream_head(buf, &l, t).unwrap();
    assert_eq!(h.kind, StreamKind::Spool);
    assert_eq!(h.req.len, 24, "the head ends where the script starts");
    assert!(h.req.keys.is_empty());
    assert_eq!((h.body, h.args_left), (2_000_002, 3));
    // A large argument after the key: streamed as any single-key request.
    let buf = b"*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n$2000000\r\nv";
    let h = stream_head(buf, &l, t).unwrap();
    assert_eq!(h.kind, StreamKind::Single);
    assert_eq!(&buf[h.req.keys[0].clone()], b"k");
    assert_eq!((h.body, h.args_left), (2_000_002, 0));
    // ... unless numkeys is wrong: its error comes from the whole request.
    for bad in [&b"x"[..], b"0", b"-1", b"3"] {
        let mut b = b"*5\r\n$4\r\nEVAL\r\n$2\r\nab\r\n".to_vec();
        b.extend_from_slice(format!("${}\r\n", bad.len()).as_bytes());
        b.extend_from_slice(bad);
        b.extend_from_slice(b"\r\n$1\r\nk\r\n$2000000\r\nv");
        assert!(stream_head(&b, &l, t).is_none(), "numkeys {bad:?}");
    }
}

#[test]
fn eval_numkeys_errors_are_the_whole_parsers() {
    let cases: [(&[u8], &str); 3] = [
        (b"x", "-ERR value is not an integer or out of range\r\n"),
        (b"-1", "-ERR Number of keys can't be negative\r\n"),
        (
            b"3",
            "-ERR Number of keys can't be greater than number of args\r\n",
        ),
    ];
    for (n, want) in cases {
        let mut b = b"*5\r\n$4\r\nEVAL\r\n$1\r\ns\r\n".to_vec();
        b.extend_from_slice(format!("${}\r\n", n.len()).as_bytes());
        b.extend_from_slice(n);
        b.extend_from_slice(b"\r\n$1\r\nk\r\n$1\r\nv\r\n");
        let whole = parse_request(&b, &big_limits()).unwrap_err().reply;
        let held = eval_numkeys(crate::proto::redis::resp::parse_int(n), 5, "EVAL").unwrap_err();
        assert_eq!(whole, held);
        assert!(String::from_utf8_lossy(&held).starts_with(want), "{n:?}");
    }
    assert!(eval_numkeys(Some(2), 5, "EVAL").is_ok());
    // numkeys 0: routed to the keyless server when whole, refused when streamed.
    let b = b"*3\r\n$4\r\nEVAL\r\n$1\r\ns\r\n$1\r\n0\r\n";
    let Ok(crate::proto::Parse::Done(req)) = parse_request(b, &big_limits()) else {
        panic!("EVAL s 0 is routed")
    };
    assert!(req.keys.is_empty() && req.route == crate::proto::Route::Single);
    let held = eval_numkeys(Some(0), 3, "EVAL").unwrap_err();
    assert!(String::from_utf8_lossy(&held).contains("1 MB or more"));
}

#[test]
fn whole_arg_waits_for_the_whole_argument() {
    let l = big_limits();
    let buf = b"$3\r\nkey\r\nmore";
    assert_eq!(whole_arg(buf, &l).unwrap(), Some((4..7, 9)));
    for cut in 0..9 {
        assert_eq!(whole_arg(&buf[..cut], &l).unwrap(), None, "cut {cut}");
    }
    assert!(whole_arg(b"*1\r\n", &l).is_err());
}

/// Every key of `line` (an inline command) as `command_keys` finds them.
fn all_keys_of(line: &str) -> Vec<String> {
    let bytes = format!("{line}\r\n").into_bytes();
    let Ok(Parse::Done(req)) = parse_request(&bytes, &limits()) else {
        panic!("{line} does not parse");
    };
    let Op::Redis(op) = req.op else {
        panic!("{line} is not a Redis request");
    };
    command_keys(op.cmd, &req, &bytes[..req.len])
        .into_iter()
        .map(|k| String::from_utf8(k).unwrap())
        .collect()
}

#[test]
fn command_keys_names_every_key_a_command_touches() {
    let cases: &[(&str, &[&str])] = &[
        ("GET a", &["a"]),
        ("SMOVE a b m", &["a", "b"]),
        ("RENAME a b", &["a", "b"]),
        ("COPY a b REPLACE", &["a", "b"]),
        ("LMOVE a b LEFT RIGHT", &["a", "b"]),
        ("SUNIONSTORE d a b c", &["d", "a", "b", "c"]),
        ("BITOP AND d a b", &["d", "a", "b"]),
        ("ZUNIONSTORE d 2 a b WEIGHTS 1 2", &["d", "a", "b"]),
        ("ZINTER 2 a b WITHSCORES", &["a", "b"]),
        ("LMPOP 2 a b LEFT COUNT 3", &["a", "b"]),
        ("EVAL s 2 a b x y", &["a", "b"]),
        ("FCALL f 1 a x", &["a"]),
        ("SORT a BY w_* GET STORE LIMIT 0 5 STORE d", &["a", "d"]),
        ("GEORADIUS a 1 2 3 km STOREDIST d", &["a", "d"]),
        ("XREAD COUNT 2 STREAMS a b 0 0", &["a", "b"]),
        ("WATCH a b", &["a", "b"]),
        ("MGET a b", &["a", "b"]),
        ("\"SMOVE\" a \"b c\" m", &["a", "b c"]),
    ];
    for (line, want) in cases {
        assert_eq!(all_keys_of(line), *want, "{line}");
    }
}

/// The GET/SET shortcut (`fast.rs`) against the general parser.
mod shortcut {
    use super::*;
    use crate::proto::redis::fast::get_or_set;
    use crate::proto::{Parse, Request, RequestError};

    fn general(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
        super::scan_general(buf, limits)
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
            b"*2\r\n$3\r\nGET\r\n$00\r\n\r\n",
            b"*2\r\n$3\r\nGET\r\n$+3\r\nfoo\r\n",
            b"*2\r\n$3\r\nGET\r\n$3\rxfoo\r\n",
            b"*2\r\n$3\r\nGET\r\n$1234567890\r\nfoo\r\n",
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
        let long = [
            b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000001234\r\n$100\r\n".to_vec(),
            vec![b'v'; 100],
            b"\r\n".to_vec(),
        ]
        .concat();
        let seeds: [&[u8]; 4] = [
            b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n*1\r\n$4\r\nPING\r\n",
            b"*3\r\n$3\r\nset\r\n$2\r\nab\r\n$5\r\nhello\r\n",
            b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$10\r\n0123456789\r\n",
            &long,
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
