//! A store refused as too large, as the request parsers report it: the
//! refusal's framing and the delete forwarded in the store's place (why a
//! delete: `too_large`, which also writes and reads that delete).

use super::McOp;
use crate::proto::{Keys, Op, Request, RequestError, Route};

/// memcached's text reply to a store too large for an item.
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";

/// How the refused store was framed: the delete sent in its place and the
/// refusal the client gets are framed the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Text `set`: `delete <key>` is sent.
    Text,
    /// Meta `ms`: `md <key>` is sent (with `b` when the key is base64).
    Meta,
    /// Binary SET/SETQ: a binary DELETE with the client's opaque is sent
    /// (on a binary connection); the client gets status 0x0003
    /// "Too large." with its own opcode.
    Bin {
        /// Opcode as the client sent it.
        opcode: u8,
        /// Opaque the client sent.
        opaque: u32,
    },
}

/// The refusal of a too-large store whose key is `key` (a range of the
/// first `len` bytes of the request, which must be in the input) and whose
/// whole request is `total` bytes: the key's server gets a delete.
pub fn refuse(
    refused: Refused,
    len: usize,
    key: std::ops::Range<usize>,
    total: usize,
    noreply: bool,
) -> RequestError {
    let mut keys = Keys::new();
    keys.push(key);
    RequestError {
        reply: Vec::new(),
        skip: total,
        close: false,
        forward: Some(Box::new(Request {
            len,
            op: Op::Mc(McOp::TooLarge(refused)),
            keys,
            route: Route::Single,
            noreply,
        })),
    }
}
