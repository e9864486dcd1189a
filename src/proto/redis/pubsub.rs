//! Redis pub/sub frames as the proxy reads and writes them: the kind of a
//! frame a subscriber's server sends, a confirmation's count rewritten,
//! the replies redis-server gives in subscribed mode, and the
//! (un)subscribe commands sent to servers.

use super::args::Args;
use super::reply;
use super::resp;
use super::{Cmd, RedisOp};
use crate::proto::Op;

/// The operation a subscriber's server connections carry (SUBSCRIBE):
/// how their frames are read and what they count as.
pub fn subscribe_op() -> Option<Op> {
    let cmd = Cmd::lookup(b"SUBSCRIBE")?;
    Some(Op::Redis(RedisOp {
        cmd,
        class: cmd.class(),
    }))
}

/// The command `name` with `args` (channels or patterns).
pub fn command(name: &str, args: &[Vec<u8>]) -> Vec<u8> {
    let words: Vec<&[u8]> = std::iter::once(name.as_bytes())
        .chain(args.iter().map(Vec::as_slice))
        .collect();
    let mut out = Vec::new();
    reply::command(&words, &mut out);
    out
}

/// A command's arguments after its name (the channels or patterns of a
/// (P|S)SUBSCRIBE or (P|S)UNSUBSCRIBE).
pub fn arguments(req: &[u8]) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    let mut it = Args::new(req);
    it.next();
    while let Some(a) = it.next() {
        let mut v = Vec::new();
        it.value(&a, &mut v);
        args.push(v);
    }
    args
}

/// The kind of a push frame (`subscribe`, `message`, ...), lower case, and
/// where its last element (the count of a confirmation) starts.
pub fn frame_kind(frame: &[u8]) -> Option<(String, usize)> {
    let (_, body) = resp::header(frame, b'*').or_else(|| resp::header(frame, b'>'))?;
    let (kind, _) = resp::bulk(body)?;
    let kind = std::str::from_utf8(kind).ok()?.to_ascii_lowercase();
    // A confirmation ends in `:<count>\r\n`.
    let end = frame.len().checked_sub(2)?;
    let colon = memchr::memrchr(b':', &frame[..end])?;
    Some((kind, colon))
}

/// A (un)subscription's confirmation: its count is the client's, not the
/// server's.
pub fn is_confirmation(kind: &str) -> bool {
    matches!(
        kind,
        "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "ssubscribe" | "sunsubscribe"
    )
}

/// What a confirmation's kind (lower case, [`is_confirmation`]) says of
/// the subscription it confirms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirms {
    /// A pattern's (PSUBSCRIBE, PUNSUBSCRIBE).
    pub pattern: bool,
    /// A sharded channel's (SSUBSCRIBE, SUNSUBSCRIBE), counted apart.
    pub sharded: bool,
    /// One ended (an UNSUBSCRIBE of any kind): without a count, the
    /// subscriber's count goes down by one, else up by one.
    pub ends: bool,
}

/// What confirmation `kind` (lower case) confirms; `None` when it is not
/// a confirmation.
pub fn confirms(kind: &str) -> Option<Confirms> {
    if !is_confirmation(kind) {
        return None;
    }
    Some(Confirms {
        pattern: kind.starts_with('p'),
        sharded: matches!(kind, "ssubscribe" | "sunsubscribe"),
        ends: kind.contains("unsub"),
    })
}

/// The count a confirmation carries (its last element, at `colon`).
pub fn confirmation_count(frame: &[u8], colon: usize) -> Option<i64> {
    frame
        .get(colon + 1..frame.len().checked_sub(2)?)
        .and_then(|t| std::str::from_utf8(t).ok()?.parse::<i64>().ok())
}

/// The confirmation `frame` with its count (at `colon`) replaced by `count`.
pub fn with_count(frame: &[u8], colon: usize, count: i64) -> Vec<u8> {
    let mut out = frame[..colon].to_vec();
    reply::integer(count, &mut out);
    out
}

/// A confirmation written by the proxy: `kind`, the channel (`None`: a
/// null, as for an UNSUBSCRIBE with nothing subscribed) and the client's
/// count; a push frame for a RESP3 client.
pub fn confirmation(kind: &str, name: Option<&[u8]>, count: i64, resp3: bool, out: &mut Vec<u8>) {
    reply::header(if resp3 { b'>' } else { b'*' }, 3, out);
    reply::bulk(kind.as_bytes(), out);
    match name {
        Some(n) => reply::bulk(n, out),
        None => reply::null(resp3, out),
    }
    reply::integer(count, out);
}

/// redis-server's reply to a PING in subscribed mode (RESP2): `["pong",
/// message]`, the message empty when the PING (`req`) has none.
pub fn subscribed_pong(req: &[u8]) -> Vec<u8> {
    let mut it = Args::new(req);
    it.next();
    let mut msg = Vec::new();
    if let Some(a) = it.next() {
        it.value(&a, &mut msg);
    }
    let mut out = Vec::with_capacity(msg.len() + 32);
    reply::array(2, &mut out);
    reply::bulk(b"pong", &mut out);
    reply::bulk(&msg, &mut out);
    out
}

/// redis-server 7's refusal of a command in subscribed mode (RESP2), less
/// RESET: the proxy refuses RESET (commands.rs), so it lists only what it
/// allows there.
pub fn not_allowed_subscribed(name: &str) -> Vec<u8> {
    reply::err_line(&format!(
        "Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT are allowed in this context",
        name.to_ascii_lowercase()
    ))
}

/// The length of the whole frame `buf` starts with, as a subscriber's
/// server sends them (pushes and confirmations, in either RESP version);
/// `None` until all of it is in, or when it is not a frame.
pub fn push_frame(buf: &[u8]) -> Option<usize> {
    match resp::parse_response(buf) {
        Ok(crate::proto::Parse::Done(rsp)) => Some(rsp.len),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_frame_is_whole_or_not_yet() {
        let two = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n>3\r\n$7\r\nmessage";
        assert_eq!(push_frame(two), Some(33), "the first of two");
        assert_eq!(push_frame(&two[33..]), None, "the second is not all in");
        assert_eq!(push_frame(b""), None);
        let resp3 = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n";
        assert_eq!(push_frame(resp3), Some(33), "a RESP3 push");
    }

    #[test]
    fn frames() {
        let f = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
        let (k, colon) = frame_kind(f).unwrap();
        assert_eq!(k, "subscribe");
        assert_eq!(colon, 27);
        assert!(is_confirmation(&k) && !is_confirmation("message"));
        assert_eq!(confirmation_count(f, colon), Some(1));
        assert_eq!(
            with_count(f, colon, 12),
            b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:12\r\n"
        );
        // A message is passed as it is (it carries no count).
        let m = frame_kind(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n");
        assert!(m.is_none_or(|(k, _)| k == "message"));
        assert_eq!(
            command("SUBSCRIBE", &[b"a".to_vec()]),
            b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n".to_vec()
        );
    }

    #[test]
    fn args() {
        assert_eq!(
            arguments(b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$2\r\nbc\r\n"),
            vec![b"a".to_vec(), b"bc".to_vec()]
        );
        assert!(arguments(b"SUBSCRIBE\r\n").is_empty());
        assert_eq!(
            arguments(b"SUBSCRIBE x y\r\n"),
            vec![b"x".to_vec(), b"y".to_vec()]
        );
    }

    #[test]
    fn written_here() {
        let mut o = Vec::new();
        confirmation("unsubscribe", Some(b"ch"), 2, false, &mut o);
        assert_eq!(o, b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:2\r\n");
        o.clear();
        confirmation("unsubscribe", None, 0, true, &mut o);
        assert_eq!(o, b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n");
        o.clear();
        confirmation("sunsubscribe", None, 0, false, &mut o);
        assert_eq!(o, b"*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n");
        assert_eq!(
            subscribed_pong(b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n"),
            b"*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
        );
        assert_eq!(
            subscribed_pong(b"*1\r\n$4\r\nPING\r\n"),
            b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
        );
        assert!(not_allowed_subscribed("GET").starts_with(b"-ERR Can't execute 'get': "));
    }

    #[test]
    fn a_confirmations_kind_says_what_it_confirms() {
        let c = |pattern, sharded, ends| {
            Some(Confirms {
                pattern,
                sharded,
                ends,
            })
        };
        assert_eq!(confirms("subscribe"), c(false, false, false));
        assert_eq!(confirms("unsubscribe"), c(false, false, true));
        assert_eq!(confirms("psubscribe"), c(true, false, false));
        assert_eq!(confirms("punsubscribe"), c(true, false, true));
        assert_eq!(confirms("ssubscribe"), c(false, true, false));
        assert_eq!(confirms("sunsubscribe"), c(false, true, true));
        assert_eq!(confirms("message"), None);
        assert_eq!(confirms("smessage"), None);
    }
}
