//! Table tests for the binary protocol read from
//! `tests/vectors/memcache/binary_{requests,responses}.txt`, with the split
//! property: every prefix of an input parses as `Incomplete` (hint past the
//! prefix, within the decided length) or as the same outcome as the whole.
//! The helpers are shared with the meta tables.

use std::fmt::Write;

use super::{parse_request, parse_response, McOp, MetaCmd};
use crate::proto::Route;
use crate::proto::{Limits, Local, Op, Parse, Request, RequestError, Response, ResponseError};

/// Escape bytes for an expectation: printable ASCII as is, the rest `\xNN`.
pub(super) fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            0x21..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

/// Decode `\r \n \s \\ \xNN` and `{rep:N:text}`.
pub(super) fn unescape(s: &str) -> Vec<u8> {
    let mut expanded = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("{rep:") {
        expanded.push_str(&rest[..i]);
        let end = i + rest[i..].find('}').expect("closing brace");
        let (n, text) = rest[i + 5..end].split_once(':').expect("rep");
        expanded.push_str(&text.repeat(n.parse().expect("count")));
        rest = &rest[end + 1..];
    }
    expanded.push_str(rest);
    let b = expanded.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
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

/// Binary input notation: space-separated hex groups and `"text"` tokens
/// (text with the escapes of [`unescape`]).
fn packet(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for tok in s.split_whitespace() {
        if let Some(text) = tok.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            out.extend(unescape(text));
        } else {
            assert!(tok.len() % 2 == 0, "odd hex group {tok}");
            for i in (0..tok.len()).step_by(2) {
                out.push(u8::from_str_radix(&tok[i..i + 2], 16).expect("hex"));
            }
        }
    }
    out
}

fn op_name(op: McOp) -> String {
    match op {
        McOp::Bin { opcode, opaque } => format!("bin:{opcode:02x}:{opaque}"),
        McOp::Meta { cmd, quiet } => format!("{}{}", cmd.name(), if quiet { ":q" } else { "" }),
        McOp::TooLarge(super::refused::Refused::Bin { opcode, opaque }) => {
            format!("too_large:bin:{opcode:02x}:{opaque}")
        }
        McOp::TooLarge(_) => "too_large".to_string(),
        other => other.name().to_string(),
    }
}

/// One-line description of a request parse, as written in the tables.
pub(super) fn describe_request(input: &[u8], r: &Result<Parse<Request>, RequestError>) -> String {
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
                op_name(op),
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
                op_name(op),
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

fn describe_response(r: &Result<Parse<Response>, ResponseError>) -> String {
    match r {
        Ok(Parse::Done(r)) => format!("done len={} error={}", r.len, u8::from(r.is_error)),
        Ok(Parse::Incomplete { hint }) => format!("incomplete hint={hint}"),
        Err(_) => "bad".into(),
    }
}

/// The length at which a parse outcome is decided (upper bound for hints).
fn decided_len(input: &[u8], r: &Result<Parse<Request>, RequestError>) -> usize {
    match r {
        Ok(Parse::Done(req)) => req.len,
        Ok(Parse::Incomplete { hint }) => *hint,
        _ => input.len(),
    }
}

/// Check one request vector, including the split property.
pub(super) fn check_request(input: &[u8], expect: &str, line: usize, limits: &Limits) {
    let full = parse_request(input, limits);
    assert_eq!(describe_request(input, &full), expect, "line {line}");
    let decided = decided_len(input, &full);
    for cut in 0..input.len() {
        match parse_request(&input[..cut], limits) {
            Ok(Parse::Incomplete { hint }) => {
                assert!(
                    hint > cut && hint <= decided.max(cut + 1),
                    "line {line} cut {cut}: hint {hint}"
                )
            }
            other => assert_eq!(
                describe_request(input, &other),
                expect,
                "line {line} cut {cut}"
            ),
        }
    }
}

/// Check one response vector, including the split property.
pub(super) fn check_response(input: &[u8], op: McOp, expect: &str, line: usize) {
    let full = parse_response(input, op);
    assert_eq!(describe_response(&full), expect, "line {line}");
    let decided = match &full {
        Ok(Parse::Done(r)) => r.len,
        Ok(Parse::Incomplete { hint }) => *hint,
        _ => input.len(),
    };
    for cut in 0..input.len() {
        match parse_response(&input[..cut], op) {
            Ok(Parse::Incomplete { hint }) => {
                assert!(
                    hint > cut && hint <= decided.max(cut + 1),
                    "line {line} cut {cut}"
                )
            }
            other => assert_eq!(describe_response(&other), expect, "line {line} cut {cut}"),
        }
    }
}

/// Run a table: `> input` / `< op input` lines each followed by `= outcome`.
/// `decode` turns the input notation into bytes, `op` parses a reply's op.
pub(super) fn run_table(
    text: &str,
    decode: impl Fn(&str) -> Vec<u8>,
    op: impl Fn(&str) -> McOp,
) -> usize {
    let limits = Limits {
        max_value: 100,
        max_keys: 16,
        pre_auth: false,
    };
    let mut pending: Option<(usize, Vec<u8>, Option<McOp>)> = None;
    let mut n = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if let Some(rest) = line.strip_prefix("> ") {
            pending = Some((i + 1, decode(rest), None));
        } else if let Some(rest) = line.strip_prefix("< ") {
            let (o, bytes) = rest.split_once(' ').expect("op and bytes");
            pending = Some((i + 1, decode(bytes), Some(op(o))));
        } else if let Some(expect) = line.strip_prefix("= ") {
            let (at, input, rop) = pending.take().expect("outcome without input");
            match rop {
                None => check_request(&input, expect, at, &limits),
                Some(o) => check_response(&input, o, expect, at),
            }
            n += 1;
        }
    }
    n
}

fn meta_cmd(s: &str) -> MetaCmd {
    use MetaCmd::*;
    [Get, Set, Delete, Arith, Noop, Debug]
        .into_iter()
        .find(|c| c.name() == s)
        .unwrap_or_else(|| panic!("not a meta command: {s}"))
}

/// Reply op notation: `bin:OPCODE:OPAQUE` (hex opcode) or a meta command
/// word with an optional `:q`.
pub(super) fn reply_op(s: &str) -> McOp {
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        ["bin", o, q] => McOp::Bin {
            opcode: u8::from_str_radix(o, 16).expect("opcode"),
            opaque: q.parse().expect("opaque"),
        },
        [cmd] => McOp::Meta {
            cmd: meta_cmd(cmd),
            quiet: false,
        },
        [cmd, "q"] => McOp::Meta {
            cmd: meta_cmd(cmd),
            quiet: true,
        },
        _ => panic!("bad reply op {s}"),
    }
}

#[test]
fn binary_request_vectors() {
    let text = include_str!("../../../tests/vectors/memcache/binary_requests.txt");
    assert!(run_table(text, packet, reply_op) >= 20);
}

#[test]
fn binary_response_vectors() {
    let text = include_str!("../../../tests/vectors/memcache/binary_responses.txt");
    assert!(run_table(text, packet, reply_op) >= 5);
}
