//! Table tests read from `tests/vectors/memcache/*.txt`, plus the split
//! property: any prefix of an input parses as `Incomplete` (with a hint no
//! larger than the length at which the outcome is decided) or as the same
//! outcome as the whole input.

use super::{parse_request, parse_response, McOp};
use crate::proto::{Limits, Local, Op, Parse, Request, RequestError, Route};

/// Expand `{rep:N:text}` (text repeated N times) in a vector line.
fn expand(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("{rep:") {
        out.push_str(&rest[..i]);
        let end = i + rest[i..].find('}').expect("closing brace");
        let mut parts = rest[i + 5..end].splitn(2, ':');
        let n: usize = parts.next().and_then(|n| n.parse().ok()).expect("count");
        out.push_str(&parts.next().unwrap_or("").repeat(n));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Decode the escapes of a vector: `\r \n \t \0 \s \\ \xNN`.
fn unescape(s: &str) -> Vec<u8> {
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
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("hex");
                    out.push(u8::from_str_radix(hex, 16).expect("hex"));
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

fn fields(s: &str) -> Vec<(&str, &str)> {
    s.split_whitespace()
        .map(|f| f.split_once('=').unwrap_or((f, "")))
        .collect()
}

fn op_by_name(name: &str) -> McOp {
    use McOp::*;
    [
        Get, Gets, Gat, Gats, Set, Add, Replace, Append, Prepend, Cas, Delete, Incr, Decr, Touch,
        Version, Quit, FlushAll, Verbosity, Stats,
    ]
    .into_iter()
    .find(|op| op.name() == name)
    .unwrap_or_else(|| panic!("unknown op {name}"))
}

fn describe_request(input: &[u8], r: &Result<Parse<Request>, RequestError>) -> String {
    match r {
        Ok(Parse::Incomplete { hint }) => format!("incomplete hint={hint}"),
        Ok(Parse::Done(req)) => {
            let Op::Mc(op) = req.op else {
                return "not memcached".into();
            };
            let route = match &req.route {
                Route::Single => "single".to_string(),
                Route::Multi => "multi".to_string(),
                Route::Broadcast => "broadcast".to_string(),
                Route::Local(Local::Reply(b)) => format!("reply:{}", escape(b)),
                Route::Local(Local::Quit(b)) => format!("quit:{}", escape(b)),
                Route::Local(Local::Stats) => "stats".to_string(),
                Route::Local(Local::RedisSession) => "redis".to_string(),
            };
            let keys: Vec<String> = req.keys.iter().map(|k| escape(&input[k.clone()])).collect();
            format!(
                "done len={} op={} noreply={} route={} keys={}",
                req.len,
                op.name(),
                u8::from(req.noreply),
                route,
                keys.join(",")
            )
        }
        // A refused store forwarded as a delete (memcache::too_large).
        Err(RequestError {
            skip,
            forward: Some(req),
            ..
        }) => {
            let Op::Mc(op) = req.op else {
                return "not memcached".into();
            };
            let keys: Vec<String> = req.keys.iter().map(|k| escape(&input[k.clone()])).collect();
            format!(
                "refused skip={skip} op={} noreply={} keys={}",
                op.name(),
                u8::from(req.noreply),
                keys.join(",")
            )
        }
        Err(e) => format!(
            "error skip={} close={} reply={}",
            e.skip,
            u8::from(e.close),
            escape(&e.reply)
        ),
    }
}

/// Inverse of `unescape` for messages (no `{rep:}`).
fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b' ' => s.push_str("\\s"),
            b'\\' => s.push_str("\\\\"),
            b',' => s.push_str("\\x2c"),
            0x21..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// Normalise an expectation line so that fields omitted in the file take
/// their defaults (`noreply=0`, `keys=`, `close=0`, `reply=`).
fn normalise(expect: &str) -> String {
    let mut f = fields(expect);
    let kind = f.first().map(|x| x.0).unwrap_or("");
    let order: &[(&str, &str)] = match kind {
        "done" => &[
            ("len", ""),
            ("op", ""),
            ("noreply", "0"),
            ("route", ""),
            ("keys", ""),
        ],
        "error" => &[("skip", ""), ("close", "0"), ("reply", "")],
        "incomplete" => &[("hint", "")],
        "refused" => &[("skip", ""), ("op", ""), ("noreply", "0"), ("keys", "")],
        _ => &[],
    };
    let mut out = vec![kind.to_string()];
    for (name, default) in order {
        let v = f
            .iter()
            .position(|x| x.0 == *name)
            .map(|p| f.remove(p).1)
            .unwrap_or(default);
        // Escaped values are compared in decoded form.
        let v = if *name == "keys" {
            let keys: Vec<String> = v.split(',').map(|k| escape(&unescape(k))).collect();
            keys.join(",")
        } else {
            escape(&unescape(v))
        };
        out.push(format!("{name}={v}"));
    }
    out.join(" ")
}

/// Check the split property of one input against its full outcome; the
/// hint of a prefix must not pass the length deciding a success (and an
/// error too if `hint_bounds_errors`).
fn check_splits<T: PartialEq + std::fmt::Debug, E: PartialEq + std::fmt::Debug>(
    input: &[u8],
    parse: impl Fn(&[u8]) -> Result<Parse<T>, E>,
    hint_bounds_errors: bool,
) {
    let full = parse(input);
    if matches!(full, Ok(Parse::Incomplete { .. })) {
        for p in 0..input.len() {
            let r = parse(&input[..p]);
            assert!(
                matches!(r, Ok(Parse::Incomplete { hint }) if hint > p),
                "prefix {p} of {input:?}: {r:?}"
            );
        }
        return;
    }
    // Length at which the outcome is decided: the shortest prefix giving it.
    let decided = (0..=input.len())
        .find(|&p| parse(&input[..p]) == full)
        .unwrap_or(input.len());
    for p in 0..input.len() {
        let r = parse(&input[..p]);
        match &r {
            Ok(Parse::Incomplete { hint }) => {
                assert!(
                    p < decided,
                    "incomplete past the decision at {p}: {input:?}"
                );
                assert!(*hint > p, "hint {hint} not beyond {p}: {input:?}");
                if hint_bounds_errors || full.is_ok() {
                    assert!(*hint <= decided, "hint {hint} beyond {decided}: {input:?}");
                }
            }
            _ => assert_eq!(r, full, "prefix {p} of {input:?}"),
        }
    }
}

#[test]
fn request_vectors() {
    let text = include_str!("../../../tests/vectors/memcache/requests.txt");
    let limits = Limits {
        max_value: 1024 * 1024,
        max_keys: 10_000,
        pre_auth: false,
    };
    let mut input: Option<Vec<u8>> = None;
    let mut count = 0;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let line = expand(line);
        let line = line.as_str();
        if let Some(rest) = line.strip_prefix("> ") {
            input = Some(unescape(rest));
        } else if let Some(rest) = line.strip_prefix("= ") {
            let bytes = input
                .take()
                .unwrap_or_else(|| panic!("line {}: no input", n + 1));
            let got = describe_request(&bytes, &parse_request(&bytes, &limits));
            assert_eq!(got, normalise(rest), "line {}", n + 1);
            if bytes.len() < 4096 {
                check_splits(&bytes, |b| parse_request(b, &limits), true);
            }
            count += 1;
        }
    }
    assert!(count > 50, "only {count} vectors");
}

#[test]
fn response_vectors() {
    let text = include_str!("../../../tests/vectors/memcache/responses.txt");
    let mut input: Option<(McOp, Vec<u8>)> = None;
    let mut count = 0;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let line = expand(line);
        let line = line.as_str();
        if let Some(rest) = line.strip_prefix("< ") {
            let (op, data) = rest.split_once(' ').unwrap_or((rest, ""));
            input = Some((op_by_name(op), unescape(data)));
        } else if let Some(rest) = line.strip_prefix("= ") {
            let (op, bytes) = input
                .take()
                .unwrap_or_else(|| panic!("line {}: no input", n + 1));
            let got = match parse_response(&bytes, op) {
                Ok(Parse::Done(r)) => {
                    format!("done len={} error={}", r.len, u8::from(r.is_error))
                }
                Ok(Parse::Incomplete { hint }) => format!("incomplete hint={hint}"),
                Err(_) => "bad".to_string(),
            };
            assert_eq!(got, rest.trim(), "line {}", n + 1);
            // A broken reply may be detected before the hinted length.
            check_splits(&bytes, |b| parse_response(b, op), false);
            count += 1;
        }
    }
    assert!(count > 20, "only {count} vectors");
}

/// The byte stream `memccapable -a` (libmemcached's ASCII conformance
/// suite) sent to a memcached server, parsed request after request.
#[test]
fn memccapable_stream() {
    let stream = include_bytes!("../../../tests/vectors/memcache/memccapable.bin");
    let limits = Limits::default();
    let mut pos = 0;
    let (mut done, mut errors) = (0, 0);
    while pos < stream.len() {
        match parse_request(&stream[pos..], &limits) {
            Ok(Parse::Done(r)) => {
                done += 1;
                pos += r.len;
            }
            Ok(Parse::Incomplete { .. }) => panic!("incomplete at {pos}"),
            Err(e) => {
                assert!(!e.close, "closed at {pos}");
                errors += 1;
                pos += e.skip;
            }
        }
    }
    assert!(done > 100, "{done} requests");
    assert!(errors < 10, "{errors} errors");
}
