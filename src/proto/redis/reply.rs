//! Reply composers: append RESP replies to an output buffer.

use super::request::Args;
use std::io::Write;

/// Appends `-ERR <msg>\r\n`. CR and LF in `msg` become spaces so the reply
/// stays one line.
pub fn error_reply(msg: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"-ERR ");
    push_line(msg.as_bytes(), out);
    out.extend_from_slice(b"\r\n");
}

/// Appends `+<msg>\r\n`.
pub fn simple(msg: &str, out: &mut Vec<u8>) {
    out.push(b'+');
    push_line(msg.as_bytes(), out);
    out.extend_from_slice(b"\r\n");
}

fn push_line(s: &[u8], out: &mut Vec<u8>) {
    out.extend(
        s.iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
    );
}

fn push_usize(n: usize, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// Appends an integer reply `:<n>\r\n`.
pub fn integer(n: i64, out: &mut Vec<u8>) {
    out.push(b':');
    let _ = write!(out, "{n}");
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk string `$<len>\r\n<v>\r\n`.
pub fn bulk(v: &[u8], out: &mut Vec<u8>) {
    out.push(b'$');
    push_usize(v.len(), out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
}

/// Appends an aggregate header: `kind` is `*` (array), `%` (map, `n`
/// pairs), `~` (set)...
pub fn header(kind: u8, n: usize, out: &mut Vec<u8>) {
    out.push(kind);
    push_usize(n, out);
    out.extend_from_slice(b"\r\n");
}

/// Appends an array header `*<n>\r\n`.
pub fn array(n: usize, out: &mut Vec<u8>) {
    header(b'*', n, out);
}

/// Appends a null: `_\r\n` in RESP3, `$-1\r\n` (null bulk) in RESP2.
pub fn null(resp3: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

/// Appends a map header: `%<n>` in RESP3, a flat array of `2n` in RESP2.
pub fn map(n: usize, resp3: bool, out: &mut Vec<u8>) {
    if resp3 {
        header(b'%', n, out);
    } else {
        header(b'*', n.saturating_mul(2), out);
    }
}

/// `-ERR <msg>\r\n` as a new buffer.
pub(crate) fn err_line(msg: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 7);
    error_reply(msg, &mut out);
    out
}

/// redis-server's reply to a command with the wrong number of arguments.
pub(crate) fn wrong_args(name: &str) -> Vec<u8> {
    err_line(&format!(
        "wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// The reply to a command the proxy refuses.
pub(crate) fn unsupported(name: &str) -> Vec<u8> {
    err_line(&format!("command '{name}' is not supported by the proxy"))
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

    #[test]
    fn composers() {
        let mut o = Vec::new();
        error_reply("bad\r\nthing", &mut o);
        integer(-5, &mut o);
        bulk(b"ab", &mut o);
        array(2, &mut o);
        null(true, &mut o);
        null(false, &mut o);
        map(2, false, &mut o);
        map(2, true, &mut o);
        simple("OK", &mut o);
        assert_eq!(
            o,
            b"-ERR bad  thing\r\n:-5\r\n$2\r\nab\r\n*2\r\n_\r\n$-1\r\n*4\r\n%2\r\n+OK\r\n".to_vec()
        );
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
