//! Reply composers: append RESP replies to an output buffer; the fixed
//! replies and commands the proxy sends itself; what a reply says of a key.

/// `+OK`.
pub const OK: &[u8] = b"+OK\r\n";
/// An empty array: an `EXEC` of an empty transaction, the reply of a
/// multi-key read's fragment that carries no key.
pub const EMPTY_ARRAY: &[u8] = b"*0\r\n";
/// A RESP2 null bulk string (a missing key's value).
pub const NIL: &[u8] = b"$-1\r\n";
/// `PING`, the health probe of a Redis server.
pub const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// Whether `reply` (to a single-key read) says the key is not there: a
/// null, or an empty collection (LRANGE, SMEMBERS, HGETALL of a missing
/// key; an existing key's empty range reads the same).
pub fn is_miss(reply: &[u8]) -> bool {
    matches!(
        reply,
        b"$-1\r\n" | b"_\r\n" | b"*-1\r\n" | b"*0\r\n" | b"%0\r\n" | b"~0\r\n"
    )
}

/// Whether a reply beginning with `first` can be long (a bulk string or
/// an aggregate, RESP2 or RESP3), so that it may be passed on in parts:
/// an error or another one-line reply is read whole.
pub fn may_stream(first: Option<&u8>) -> bool {
    matches!(first, Some(b'$' | b'*' | b'%' | b'~' | b'>' | b'|' | b'='))
}

/// Appends a command as clients send one: an array of bulk strings (the
/// proxy's own AUTH, SELECT, sentinel and pub/sub commands, and the
/// commands that move a key between servers).
pub fn command(args: &[&[u8]], out: &mut Vec<u8>) {
    array(args.len(), out);
    for a in args {
        bulk(a, out);
    }
}

/// A request whose keys must all be on one server (MSETNX sets all or
/// none, a blocking pop waits on every key) found them on several: a
/// cluster node's `CROSSSLOT` in a cluster pool, else an error naming the
/// command and the hash tag that keeps keys together.
pub fn cross_server(cmd: &str, cluster: bool, out: &mut Vec<u8>) {
    if cluster {
        out.extend_from_slice(super::cluster::CROSSSLOT);
        return;
    }
    error_reply(
        &format!(
            "{cmd} keys must all map to one server (use a hash tag, e.g. {{user1}}.a {{user1}}.b)"
        ),
        out,
    );
}

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

pub(super) fn push_line(s: &[u8], out: &mut Vec<u8>) {
    out.extend(
        s.iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
    );
}

/// Appends `n` in decimal. `itoa`, not `write!`: every bulk string and
/// array header of a written command or merged reply passes here, and the
/// formatting machinery costs several times the digits.
fn push_usize(n: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends an integer reply `:<n>\r\n`.
pub fn integer(n: i64, out: &mut Vec<u8>) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
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

/// The reply to a command the proxy refuses (with the reason, where one
/// is not obvious).
pub(crate) fn unsupported(name: &str) -> Vec<u8> {
    let why = match name {
        // WAIT counts the replicas that acknowledged this connection's own
        // writes; a client's writes travel on server connections it shares
        // with others, and a WAIT there would hold up their requests.
        "WAIT" | "WAITAOF" => {
            ": it waits for one connection's writes, and server connections are shared"
        }
        _ => "",
    };
    err_line(&format!(
        "command '{name}' is not supported by the proxy{why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_on_several_servers_are_refused_as_a_cluster_node_would_or_by_name() {
        let mut out = Vec::new();
        cross_server("MSETNX", true, &mut out);
        assert!(out.starts_with(b"-CROSSSLOT "));
        out.clear();
        cross_server("BLPOP", false, &mut out);
        assert_eq!(
            out,
            b"-ERR BLPOP keys must all map to one server (use a hash tag, e.g. {user1}.a {user1}.b)\r\n"
        );
    }

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
    fn fixed_replies() {
        let mut o = Vec::new();
        simple("OK", &mut o);
        assert_eq!(o, OK);
        o.clear();
        array(0, &mut o);
        assert_eq!(o, EMPTY_ARRAY);
        o.clear();
        null(false, &mut o);
        assert_eq!(o, NIL);
        o.clear();
        command(&[b"PING"], &mut o);
        assert_eq!(o, PING);
    }

    #[test]
    fn misses() {
        for r in [
            &b"$-1\r\n"[..],
            b"_\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"%0\r\n",
            b"~0\r\n",
        ] {
            assert!(is_miss(r), "{r:?}");
        }
        assert!(!is_miss(b"$1\r\nx\r\n") && !is_miss(b":0\r\n") && !is_miss(b"$0\r\n\r\n"));
        assert!(!is_miss(b"-ERR x\r\n") && !is_miss(b"*1\r\n$1\r\nx\r\n"));
    }

    #[test]
    fn streamable() {
        for b in b"$*%~>|=" {
            assert!(may_stream(Some(b)));
        }
        for b in b"-+:_#,(!" {
            assert!(!may_stream(Some(b)));
        }
        assert!(!may_stream(None));
    }
}
