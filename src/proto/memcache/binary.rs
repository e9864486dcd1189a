//! memcached binary protocol requests: header framing and the shape checks
//! memcached does before touching data (extras, key and value lengths per
//! opcode), so malformed input gets the reply memcached would give.
//!
//! A binary request is a 24-byte header (magic 0x80) followed by
//! `extras ‖ key ‖ value`. Quiet opcodes are forwarded in their non-quiet
//! form so every forwarded request gets exactly one server reply; the
//! replies quiet semantics suppress are dropped by [`keep_reply`].

use super::{McOp, KEY_MAX_LENGTH, VERSION};
use crate::proto::{Keys, Limits, Local, Op, Parse, Request, RequestError, Route};

/// Magic byte of a binary request.
pub const REQ_MAGIC: u8 = 0x80;
/// Magic byte of a binary response.
pub const RES_MAGIC: u8 = 0x81;
/// Size of the request and response header.
pub const HEADER_LEN: usize = 24;

/// Binary opcodes the proxy knows.
pub mod opcode {
    #![allow(missing_docs)]
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes.
pub mod status {
    #![allow(missing_docs)]
    pub const SUCCESS: u16 = 0x0000;
    pub const KEY_NOT_FOUND: u16 = 0x0001;
    pub const KEY_EXISTS: u16 = 0x0002;
    pub const TOO_LARGE: u16 = 0x0003;
    pub const INVALID_ARGUMENTS: u16 = 0x0004;
    pub const AUTH_ERROR: u16 = 0x0020;
    pub const NOT_STORED: u16 = 0x0005;
    pub const UNKNOWN_COMMAND: u16 = 0x0081;
    pub const OUT_OF_MEMORY: u16 = 0x0082;
    pub const INTERNAL_ERROR: u16 = 0x0084;
    pub const TEMPORARY_FAILURE: u16 = 0x0086;
}

use opcode as opc;

/// The non-quiet form of a quiet opcode, or `None` if `op` is not quiet.
pub fn loud(op: u8) -> Option<u8> {
    Some(match op {
        opc::GETQ => opc::GET,
        opc::GETKQ => opc::GETK,
        opc::SETQ => opc::SET,
        opc::ADDQ => opc::ADD,
        opc::REPLACEQ => opc::REPLACE,
        opc::DELETEQ => opc::DELETE,
        opc::INCREMENTQ => opc::INCREMENT,
        opc::DECREMENTQ => opc::DECREMENT,
        opc::QUITQ => opc::QUIT,
        opc::FLUSHQ => opc::FLUSH,
        opc::APPENDQ => opc::APPEND,
        opc::PREPENDQ => opc::PREPEND,
        opc::GATQ => opc::GAT,
        opc::GATKQ => opc::GATK,
        _ => return None,
    })
}

/// A quiet retrieval: only its misses are suppressed.
fn quiet_get(op: u8) -> bool {
    matches!(op, opc::GETQ | opc::GETKQ | opc::GATQ | opc::GATKQ)
}

/// Fields of a binary header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Magic byte.
    pub magic: u8,
    /// Opcode.
    pub opcode: u8,
    /// Key length.
    pub key_len: usize,
    /// Extras length.
    pub extras_len: usize,
    /// Status (responses) or vbucket (requests).
    pub status: u16,
    /// Total body length (extras + key + value).
    pub body_len: usize,
    /// Opaque, echoed in the response.
    pub opaque: u32,
    /// CAS value.
    pub cas: u64,
}

impl Header {
    /// Decode the first [`HEADER_LEN`] bytes of `b` (`None` if shorter).
    pub fn decode(b: &[u8]) -> Option<Header> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            magic: h[0],
            opcode: h[1],
            key_len: usize::from(u16::from_be_bytes([h[2], h[3]])),
            extras_len: usize::from(h[4]),
            status: u16::from_be_bytes([h[6], h[7]]),
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize,
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        })
    }
}

/// The fixed fields of a response packet's header (the lengths follow
/// from its body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The request's opcode.
    pub opcode: u8,
    /// Response status.
    pub status: u16,
    /// The request's opaque, echoed.
    pub opaque: u32,
    /// CAS value (0: none).
    pub cas: u64,
}

/// Append a response packet: header, then `extras ‖ key ‖ value`.
pub fn write_response(out: &mut Vec<u8>, head: Head, extras: &[u8], key: &[u8], value: &[u8]) {
    let Head {
        opcode,
        status,
        opaque,
        cas,
    } = head;
    let key = &key[..key.len().min(usize::from(u16::MAX))];
    let extras = &extras[..extras.len().min(usize::from(u8::MAX))];
    let body = extras.len() + key.len() + value.len();
    out.push(RES_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&u32::try_from(body).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Append an error response carrying `msg` as its value.
pub fn write_error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: u16, msg: &str) {
    write_response(
        out,
        Head {
            opcode,
            status,
            opaque,
            cas: 0,
        },
        &[],
        &[],
        msg.as_bytes(),
    );
}

fn reply(h: &Header, status: u16, msg: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_error(&mut out, h.opcode, h.opaque, status, msg);
    out
}

/// memcached answers "Invalid arguments" and closes the connection.
fn invalid(h: &Header) -> RequestError {
    RequestError {
        reply: reply(h, status::INVALID_ARGUMENTS, "Invalid arguments"),
        skip: 0,
        close: true,
        forward: None,
    }
}

/// Shape memcached requires of a request: extras length, whether a key is
/// required (`Some(true)`), forbidden (`Some(false)`) or optional, and
/// whether a value may follow.
struct Shape {
    extras: &'static [usize],
    key: Option<bool>,
    value: bool,
}

fn shape(op: u8) -> Option<Shape> {
    let s = |extras, key, value| Shape { extras, key, value };
    Some(match op {
        opc::GET | opc::GETQ | opc::GETK | opc::GETKQ => s(&[0], Some(true), false),
        opc::SET | opc::SETQ | opc::ADD | opc::ADDQ | opc::REPLACE | opc::REPLACEQ => {
            s(&[8], Some(true), true)
        }
        opc::APPEND | opc::APPENDQ | opc::PREPEND | opc::PREPENDQ => s(&[0], Some(true), true),
        opc::DELETE | opc::DELETEQ => s(&[0], Some(true), false),
        opc::INCREMENT | opc::INCREMENTQ | opc::DECREMENT | opc::DECREMENTQ => {
            s(&[20], Some(true), false)
        }
        opc::QUIT | opc::QUITQ | opc::NOOP | opc::VERSION => s(&[0], Some(false), false),
        opc::FLUSH | opc::FLUSHQ => s(&[0, 4], Some(false), false),
        opc::STAT => s(&[0], None, false),
        opc::VERBOSITY => s(&[4], Some(false), false),
        opc::TOUCH | opc::GAT | opc::GATQ | opc::GATK | opc::GATKQ => s(&[4], Some(true), false),
        _ => return None,
    })
}

/// Parse one binary request (first byte 0x80) at the start of `buf`.
///
/// Like memcached: a key over 250 bytes or lengths that do not fit the
/// opcode get "Invalid arguments" (status 0x0004) and the connection is
/// closed; a bad magic byte closes it silently; a value over
/// `limits.max_value` gets "Too large." (0x0003) and is skipped; an
/// unknown opcode gets "Unknown command" (0x0081) and is skipped.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
    let Some(h) = Header::decode(buf) else {
        if buf.first().is_some_and(|&b| b != REQ_MAGIC) {
            return Err(close_silently());
        }
        return Ok(Parse::Incomplete { hint: HEADER_LEN });
    };
    if h.magic != REQ_MAGIC {
        return Err(close_silently());
    }
    let total = HEADER_LEN.saturating_add(h.body_len);
    let Some(sh) = shape(h.opcode) else {
        return Err(RequestError {
            reply: reply(&h, status::UNKNOWN_COMMAND, "Unknown command"),
            skip: total,
            close: false,
            forward: None,
        });
    };
    let value_len = value_len(&h, &sh)?;
    if value_len > limits.max_value {
        return refuse_too_large(buf, &h, total);
    }
    if buf.len() < total {
        return Ok(Parse::Incomplete { hint: total });
    }
    Ok(Parse::Done(request(buf, &h, total)))
}

/// The value's length, once the key's and the extras' lengths fit the
/// opcode's shape ("Invalid arguments" otherwise).
#[inline]
fn value_len(h: &Header, sh: &Shape) -> Result<usize, RequestError> {
    if h.key_len > KEY_MAX_LENGTH {
        return Err(invalid(h));
    }
    let head = h.extras_len + h.key_len;
    let key_ok = match sh.key {
        Some(true) => h.key_len > 0,
        Some(false) => h.key_len == 0,
        None => true,
    };
    let value_len = h.body_len.checked_sub(head);
    let fits = match value_len {
        Some(0) => true,
        Some(_) => sh.value,
        None => false,
    };
    if !sh.extras.contains(&h.extras_len) || !key_ok || !fits {
        return Err(invalid(h));
    }
    Ok(value_len.unwrap_or(0))
}

/// A value over `max_value`: "Too large." and the packet skipped; a SET's
/// key is deleted too, as memcached unlinks the old item (see
/// `too_large.rs`), so the key is needed, the value is not.
fn refuse_too_large(buf: &[u8], h: &Header, total: usize) -> Result<Parse<Request>, RequestError> {
    if matches!(h.opcode, opc::SET | opc::SETQ) {
        let head = HEADER_LEN + h.extras_len + h.key_len;
        if buf.len() < head {
            return Ok(Parse::Incomplete { hint: head });
        }
        let refused = super::refused::Refused::Bin {
            opcode: h.opcode,
            opaque: h.opaque,
        };
        let key = HEADER_LEN + h.extras_len..head;
        return Err(super::refused::refuse(refused, head, key, total, false));
    }
    Err(RequestError {
        reply: reply(h, status::TOO_LARGE, "Too large."),
        skip: total,
        close: false,
        forward: None,
    })
}

/// The whole packet (`total` bytes, checked) as a request: the commands
/// the proxy answers itself, FLUSH to every server, the rest by their key.
#[inline]
fn request(buf: &[u8], h: &Header, total: usize) -> Request {
    let quiet = loud(h.opcode).is_some();
    let op = McOp::Bin {
        opcode: h.opcode,
        opaque: h.opaque,
    };
    let key_start = HEADER_LEN + h.extras_len;
    let local = |route: Route| Request {
        len: total,
        op: Op::Mc(op),
        keys: Keys::new(),
        route,
        noreply: false,
    };
    let respond = |status: u16, value: &[u8]| {
        let mut out = Vec::new();
        write_response(
            &mut out,
            Head {
                opcode: h.opcode,
                status,
                opaque: h.opaque,
                cas: 0,
            },
            &[],
            &[],
            value,
        );
        out
    };
    match h.opcode {
        opc::NOOP => local(Route::Local(Local::Reply(
            respond(status::SUCCESS, &[]).into(),
        ))),
        opc::VERSION => local(Route::Local(Local::Reply(
            respond(status::SUCCESS, VERSION.as_bytes()).into(),
        ))),
        opc::VERBOSITY => local(Route::Local(Local::Reply(
            respond(status::SUCCESS, &[]).into(),
        ))),
        opc::QUIT => local(Route::Local(Local::Quit(respond(status::SUCCESS, &[])))),
        opc::QUITQ => local(Route::Local(Local::Quit(Vec::new()))),
        opc::STAT => local(Route::Local(Local::Reply(
            stat_reply(h, &buf[key_start..key_start + h.key_len]).into(),
        ))),
        // FLUSHQ goes out as is and no reply is awaited.
        opc::FLUSH | opc::FLUSHQ => Request {
            noreply: quiet,
            ..local(Route::Broadcast)
        },
        _ => {
            let mut keys = Keys::new();
            keys.push(key_start..key_start + h.key_len);
            Request {
                len: total,
                op: Op::Mc(op),
                keys,
                route: Route::Single,
                noreply: false,
            }
        }
    }
}

fn close_silently() -> RequestError {
    RequestError {
        reply: Vec::new(),
        skip: 0,
        close: true,
        forward: None,
    }
}

/// `STAT` answered by the proxy: `pid` and `version` (and nothing for a
/// named group but the terminator), closed by the empty STAT packet.
fn stat_reply(h: &Header, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stat = |k: &[u8], v: &[u8]| {
        write_response(
            &mut out,
            Head {
                opcode: opc::STAT,
                status: status::SUCCESS,
                opaque: h.opaque,
                cas: 0,
            },
            &[],
            k,
            v,
        )
    };
    if key.is_empty() {
        stat(b"pid", std::process::id().to_string().as_bytes());
        stat(b"version", VERSION.as_bytes());
    }
    stat(b"", b"");
    out
}

/// Write a binary request as the server gets it: a quiet opcode is
/// replaced by its non-quiet form (byte 1), everything else unchanged.
pub fn write_request(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(bytes);
    if let Some(b) = out.get_mut(start + 1) {
        if let Some(l) = loud(*b) {
            *b = l;
        }
    }
}

/// Whether the server's reply to a request sent with client opcode
/// `opcode` reaches the client: a quiet retrieval drops misses, other
/// quiet requests drop successes; errors are always kept.
pub fn keep_reply(opcode: u8, reply: &[u8]) -> bool {
    if loud(opcode).is_none() {
        return true;
    }
    let st = Header::decode(reply).map_or(u16::MAX, |h| h.status);
    if quiet_get(opcode) {
        st != status::KEY_NOT_FOUND
    } else {
        st != status::SUCCESS
    }
}

/// The reply as the client must see it: for a quiet request sent in its
/// non-quiet form, the server's opcode byte is set back to the client's
/// opcode. `None` when the reply needs no change.
pub fn rewrite_reply(opcode: u8, reply: &[u8]) -> Option<Vec<u8>> {
    loud(opcode)?;
    if reply.get(1) == Some(&opcode) {
        return None;
    }
    let mut v = reply.to_vec();
    if let Some(b) = v.get_mut(1) {
        *b = opcode;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a request packet.
    pub(crate) fn req(op: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
        let mut out = Vec::new();
        write_response(
            &mut out,
            Head {
                opcode: op,
                status: 0,
                opaque,
                cas: 0,
            },
            extras,
            key,
            value,
        );
        out[0] = REQ_MAGIC;
        out
    }

    fn parse(b: &[u8]) -> Result<Parse<Request>, RequestError> {
        parse_request(b, &Limits::default())
    }

    #[test]
    fn get_and_quiet_rewrite() {
        let b = req(opc::GETKQ, &[], b"foo", &[], 7);
        let Ok(Parse::Done(r)) = parse(&b) else {
            panic!()
        };
        assert_eq!(r.len, 27);
        assert_eq!(&b[r.keys[0].clone()], b"foo");
        assert_eq!(r.route, Route::Single);
        assert!(!r.noreply);
        let mut out = Vec::new();
        write_request(&b, &mut out);
        assert_eq!(out[1], opc::GETK);
        assert_eq!(&out[2..], &b[2..]);
        for cut in 0..b.len() {
            assert!(matches!(parse(&b[..cut]), Ok(Parse::Incomplete { .. })));
        }
    }

    #[test]
    fn shape_errors_close() {
        let b = req(opc::GET, &[0; 4], b"k", &[], 3);
        let e = parse(&b).unwrap_err();
        assert!(e.close);
        assert_eq!(&e.reply[6..8], &[0, 4]);
        assert_eq!(&e.reply[12..16], &3u32.to_be_bytes());
        let long = vec![b'k'; 251];
        assert!(parse(&req(opc::GET, &[], &long, &[], 0)).unwrap_err().close);
        assert!(parse(&req(opc::SET, &[], b"k", b"v", 0)).unwrap_err().close);
        assert!(
            parse(&req(opc::VERSION, &[], b"k", &[], 0))
                .unwrap_err()
                .close
        );
        let e = parse(b"\x81\0\0\0").unwrap_err();
        assert!(e.close && e.reply.is_empty());
    }

    #[test]
    fn unknown_and_too_large_skip() {
        let b = req(0x7f, &[], b"", b"abc", 9);
        let e = parse(&b).unwrap_err();
        assert!(!e.close);
        assert_eq!(e.skip, 27);
        assert_eq!(&e.reply[6..8], &[0, 0x81]);
        let limits = Limits {
            max_value: 4,
            ..Limits::default()
        };
        let b = req(opc::ADD, &[0; 8], b"k", b"12345", 1);
        let e = parse_request(&b[..HEADER_LEN], &limits).unwrap_err();
        assert_eq!((e.skip, e.close), (b.len(), false));
        assert_eq!(&e.reply[6..8], &[0, 3]);
    }

    #[test]
    fn local_answers() {
        let Ok(Parse::Done(r)) = parse(&req(opc::NOOP, &[], b"", b"", 5)) else {
            panic!()
        };
        let Route::Local(Local::Reply(out)) = r.route else {
            panic!()
        };
        assert_eq!(out.len(), 24);
        assert_eq!((out[0], out[1]), (RES_MAGIC, opc::NOOP));
        assert_eq!(&out[12..16], &5u32.to_be_bytes());
        let Ok(Parse::Done(r)) = parse(&req(opc::STAT, &[], b"", b"", 5)) else {
            panic!()
        };
        let Route::Local(Local::Reply(out)) = r.route else {
            panic!()
        };
        assert!(out.ends_with(&req(opc::STAT, &[], b"", b"", 5)[1..]));
        let Ok(Parse::Done(r)) = parse(&req(opc::FLUSHQ, &[0; 4], b"", b"", 5)) else {
            panic!()
        };
        assert_eq!((r.route, r.noreply), (Route::Broadcast, true));
    }

    #[test]
    fn quiet_replies() {
        let mut miss = Vec::new();
        write_error(&mut miss, opc::GET, 1, status::KEY_NOT_FOUND, "Not found");
        assert!(!keep_reply(opc::GETQ, &miss));
        assert!(keep_reply(opc::GET, &miss));
        assert!(keep_reply(opc::SETQ, &miss));
        let mut ok = Vec::new();
        write_response(
            &mut ok,
            Head {
                opcode: opc::SET,
                status: 0,
                opaque: 1,
                cas: 9,
            },
            &[],
            &[],
            &[],
        );
        assert!(!keep_reply(opc::SETQ, &ok));
        assert!(keep_reply(opc::GETQ, &ok));
        assert_eq!(rewrite_reply(opc::GETQ, &ok).unwrap()[1], opc::GETQ);
        assert!(rewrite_reply(opc::GET, &ok).is_none());
    }
}
