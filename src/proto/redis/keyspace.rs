//! Commands over a pool's whole keyspace, which lives on several servers:
//! `SCAN` walks the servers one after the other with a cursor that says
//! which server and where in it; `DBSIZE` sums the servers' counts; `KEYS`
//! joins their lists. No I/O here: the worker routes and merges with these.
//!
//! The client's cursor is `server_cursor * servers + server`: 0 starts at
//! the first server, and a server's own cursor 0 (it is done) moves the
//! walk to the next server, so every key present on any server for the
//! whole walk is returned, as a single Redis's SCAN guarantees. Redis
//! cursors stay below its table size, far from overflowing this.
//!
//! `INFO` is walnut's own, put together in `info.rs`.

use super::args::Args;
use super::reply;
use super::resp::{self, parse_int};

/// The reply to a `SCAN` whose cursor is not a number.
pub const INVALID_CURSOR: &[u8] = b"-ERR invalid cursor\r\n";

/// The client's `SCAN` cursor (argument 1), if it is a number.
pub fn scan_cursor(req: &[u8]) -> Option<u64> {
    let mut args = Args::new(req);
    args.next()?;
    let arg = args.next()?;
    let mut v = Vec::new();
    args.value(&arg, &mut v);
    std::str::from_utf8(&v).ok()?.parse().ok()
}

/// Which server a client cursor is on and the cursor to send it.
pub fn scan_split(cursor: u64, servers: usize) -> (usize, u64) {
    let n = servers.max(1) as u64;
    ((cursor % n) as usize, cursor / n)
}

/// The request for one server: the client's, with the server's cursor.
pub fn scan_request(req: &[u8], server_cursor: u64) -> Vec<u8> {
    let mut vals: Vec<Vec<u8>> = Vec::new();
    let mut args = Args::new(req);
    while let Some(arg) = args.next() {
        let mut v = Vec::new();
        args.value(&arg, &mut v);
        vals.push(v);
    }
    if let Some(c) = vals.get_mut(1) {
        *c = server_cursor.to_string().into_bytes();
    }
    let mut out = Vec::with_capacity(req.len() + 8);
    reply::array(vals.len(), &mut out);
    for v in &vals {
        reply::bulk(v, &mut out);
    }
    out
}

/// A server's `SCAN` reply with the client's cursor in place of the
/// server's: the same server further on, the next server from its start,
/// or 0 after the last. `None` when the reply is not a SCAN reply (an
/// error passes as it is) or the cursor would not fit.
pub fn scan_reply(reply: &[u8], server: usize, servers: usize) -> Option<Vec<u8>> {
    // *2\r\n$<len>\r\n<cursor>\r\n<the keys array>
    let (2, body) = resp::header(reply, b'*')? else {
        return None;
    };
    let (cursor, keys) = resp::bulk(body)?;
    let cursor = parse_int(cursor)?;
    let keys = keys.get(2..)?;
    let n = servers.max(1) as u64;
    let next = match cursor {
        0 if server + 1 < servers => (server + 1) as u64,
        0 => 0,
        c => u64::try_from(c)
            .ok()?
            .checked_mul(n)?
            .checked_add(server as u64)?,
    };
    let mut out = b"*2\r\n".to_vec();
    reply::bulk(next.to_string().as_bytes(), &mut out);
    out.extend_from_slice(keys);
    Some(out)
}

/// The merged reply of a command sent to every server, when its replies
/// are combined rather than one taken: `DBSIZE` summed, `KEYS` joined.
/// `None` for the others (and when a reply is not of the expected shape).
pub fn merge(name: &str, replies: &[&[u8]]) -> Option<Vec<u8>> {
    match name {
        "DBSIZE" => {
            let mut sum = 0i64;
            for r in replies {
                let r = r.strip_prefix(b":")?;
                sum = sum.saturating_add(parse_int(r.get(..r.len().checked_sub(2)?)?)?);
            }
            Some(format!(":{sum}\r\n").into_bytes())
        }
        "KEYS" => {
            let mut count = 0usize;
            let mut body = Vec::new();
            for r in replies {
                let (n, items) = resp::header(r, b'*')?;
                count = count.checked_add(usize::try_from(n).ok()?)?;
                body.extend_from_slice(items);
            }
            let mut out = Vec::with_capacity(body.len() + 16);
            reply::array(count, &mut out);
            out.extend_from_slice(&body);
            Some(out)
        }
        "RANDOMKEY" => {
            // A key of one of the servers that has any, at random.
            let keys: Vec<&[u8]> = replies
                .iter()
                .copied()
                .filter(|r| r.starts_with(b"$") && !r.starts_with(b"$-1"))
                .collect();
            let pick = match keys.len() {
                0 => replies.first().copied().unwrap_or(b"$-1\r\n"),
                n => keys[(crate::util::epoch_us() as usize) % n],
            };
            Some(pick.to_vec())
        }
        "PUBSUB" => merge_pubsub(replies),
        _ => None,
    }
}

/// One element of a flat array reply: a bulk string or an integer.
enum Elem<'a> {
    Bulk(&'a [u8]),
    Int(i64),
}

/// The elements of a flat array reply (`*n` of bulks and integers).
fn flat_array(r: &[u8]) -> Option<Vec<Elem<'_>>> {
    let (n, mut at) = resp::header(r, b'*')?;
    let mut out = Vec::with_capacity(usize::try_from(n).ok()?.min(1024));
    for _ in 0..n {
        if let Some((s, rest)) = resp::bulk(at) {
            out.push(Elem::Bulk(s));
            at = rest.get(2..)?;
        } else {
            let (i, rest) = resp::header(at, b':')?;
            out.push(Elem::Int(i));
            at = rest;
        }
    }
    Some(out)
}

/// PUBSUB over every server. NUMPAT: the largest count (walnut subscribes
/// every pattern on every server). NUMSUB / SHARDNUMSUB (channel, count
/// pairs in the order asked): counts summed per channel. CHANNELS /
/// SHARDCHANNELS: the union, each channel once.
fn merge_pubsub(replies: &[&[u8]]) -> Option<Vec<u8>> {
    if replies.iter().all(|r| r.starts_with(b":")) {
        let mut max = 0i64;
        for r in replies {
            max = max.max(parse_int(r[1..].strip_suffix(b"\r\n")?)?);
        }
        return Some(format!(":{max}\r\n").into_bytes());
    }
    let arrays: Vec<Vec<Elem>> = replies
        .iter()
        .map(|r| flat_array(r))
        .collect::<Option<_>>()?;
    let pairs = arrays.iter().all(|a| {
        a.len() % 2 == 0
            && a.chunks(2)
                .all(|p| matches!(p, [Elem::Bulk(_), Elem::Int(_)]))
    }) && arrays.iter().any(|a| !a.is_empty());
    let mut out = Vec::new();
    if pairs {
        let first = arrays.first()?;
        reply::array(first.len(), &mut out);
        for (i, pair) in first.chunks(2).enumerate() {
            let Elem::Bulk(channel) = pair[0] else {
                return None;
            };
            let sum: i64 = arrays
                .iter()
                .filter_map(|a| match a.get(2 * i + 1) {
                    Some(Elem::Int(n)) => Some(*n),
                    _ => None,
                })
                .fold(0i64, i64::saturating_add);
            reply::bulk(channel, &mut out);
            out.extend_from_slice(format!(":{sum}\r\n").as_bytes());
        }
        return Some(out);
    }
    let mut seen: Vec<&[u8]> = Vec::new();
    for a in &arrays {
        for e in a {
            let Elem::Bulk(c) = e else {
                return None;
            };
            if !seen.contains(c) {
                seen.push(c);
            }
        }
    }
    reply::array(seen.len(), &mut out);
    for c in seen {
        reply::bulk(c, &mut out);
    }
    Some(out)
}

/// The text of a bulk (or RESP3 verbatim) string reply.
pub(super) fn bulk_text(r: &[u8]) -> Option<&str> {
    let kind = *r.first()?;
    if kind != b'$' && kind != b'=' {
        return None;
    }
    let (len, rest) = resp::header(r, kind)?;
    let mut body = rest.get(..usize::try_from(len).ok()?)?;
    if kind == b'=' {
        body = body.get(4..)?; // "txt:"
    }
    std::str::from_utf8(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_over_three_servers() {
        assert_eq!(scan_split(0, 3), (0, 0));
        // Server 0 is at 17: the client's cursor says so.
        let r = scan_reply(b"*2\r\n$2\r\n17\r\n*1\r\n$1\r\na\r\n", 0, 3).unwrap();
        assert_eq!(r, b"*2\r\n$2\r\n51\r\n*1\r\n$1\r\na\r\n".to_vec());
        assert_eq!(scan_split(51, 3), (0, 17));
        // Server 0 done: on to server 1 from its start.
        let r = scan_reply(b"*2\r\n$1\r\n0\r\n*0\r\n", 0, 3).unwrap();
        assert_eq!(r, b"*2\r\n$1\r\n1\r\n*0\r\n".to_vec());
        assert_eq!(scan_split(1, 3), (1, 0));
        // The last server done: the walk is over.
        let r = scan_reply(b"*2\r\n$1\r\n0\r\n*0\r\n", 2, 3).unwrap();
        assert_eq!(r, b"*2\r\n$1\r\n0\r\n*0\r\n".to_vec());
        assert_eq!(scan_reply(b"-ERR invalid cursor\r\n", 0, 3), None);
        assert_eq!(
            scan_reply(b"*2\r\n$20\r\n18446744073709551615\r\n*0\r\n", 0, 3),
            None
        );
    }

    #[test]
    fn the_request_gets_the_servers_cursor() {
        let req = b"*6\r\n$4\r\nSCAN\r\n$2\r\n51\r\n$5\r\nMATCH\r\n$2\r\nk*\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n";
        assert_eq!(scan_cursor(req), Some(51));
        assert_eq!(
            scan_request(req, 17),
            b"*6\r\n$4\r\nSCAN\r\n$2\r\n17\r\n$5\r\nMATCH\r\n$2\r\nk*\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n"
                .to_vec()
        );
        assert_eq!(scan_cursor(b"SCAN 0\r\n"), Some(0));
        assert_eq!(scan_cursor(b"SCAN x\r\n"), None);
    }

    #[test]
    fn counts_from_servers_never_overflow() {
        let max = b":9223372036854775807\r\n";
        assert_eq!(
            merge("DBSIZE", &[max, max]).unwrap(),
            b":9223372036854775807\r\n".to_vec()
        );
        let huge = b"*18446744073709551615\r\n";
        assert_eq!(merge("KEYS", &[huge, huge]), None);
        let numsub = b"*2\r\n$1\r\nc\r\n:9223372036854775807\r\n";
        assert_eq!(
            merge("PUBSUB", &[numsub, numsub]).unwrap(),
            b"*2\r\n$1\r\nc\r\n:9223372036854775807\r\n".to_vec()
        );
    }

    #[test]
    fn counts_summed_and_lists_joined() {
        assert_eq!(
            merge("DBSIZE", &[b":3\r\n", b":0\r\n", b":12\r\n"]),
            Some(b":15\r\n".to_vec())
        );
        assert_eq!(
            merge(
                "KEYS",
                &[
                    b"*1\r\n$1\r\na\r\n",
                    b"*0\r\n",
                    b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n"
                ]
            ),
            Some(b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n".to_vec())
        );
        assert_eq!(merge("FLUSHALL", &[b"+OK\r\n"]), None);
        assert_eq!(
            merge("RANDOMKEY", &[b"$-1\r\n", b"$1\r\nk\r\n", b"_\r\n"]),
            Some(b"$1\r\nk\r\n".to_vec())
        );
        assert_eq!(
            merge("RANDOMKEY", &[b"_\r\n", b"_\r\n"]),
            Some(b"_\r\n".to_vec())
        );
        assert_eq!(merge("DBSIZE", &[b"-ERR x\r\n"]), None);
        assert_eq!(
            merge("PUBSUB", &[b":2\r\n", b":2\r\n", b":1\r\n"]).unwrap(),
            b":2\r\n"
        );
        let numsub: [&[u8]; 2] = [
            b"*4\r\n$1\r\na\r\n:2\r\n$1\r\nb\r\n:0\r\n",
            b"*4\r\n$1\r\na\r\n:0\r\n$1\r\nb\r\n:5\r\n",
        ];
        assert_eq!(
            merge("PUBSUB", &numsub).unwrap(),
            b"*4\r\n$1\r\na\r\n:2\r\n$1\r\nb\r\n:5\r\n"
        );
        let channels: [&[u8]; 2] = [
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n",
        ];
        assert_eq!(
            merge("PUBSUB", &channels).unwrap(),
            b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
        );
        assert_eq!(merge("PUBSUB", &[b"*0\r\n", b"*0\r\n"]).unwrap(), b"*0\r\n");
    }
}
