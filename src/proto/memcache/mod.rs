//! memcached protocols on one port: text, binary (first byte 0x80) and
//! meta (`mg`, `ms`, ... text-framed). Request framing and validation
//! ([`parse_request`]), reply framing ([`parse_response`]), quiet-request
//! rewriting ([`write_request`], [`keep_reply`], [`rewrite_reply`]), and
//! the pieces the data path needs to split multi-key retrievals across
//! servers and join the replies ([`write_fragment`], [`merge_responses`],
//! [`merge_broadcast`], [`error_reply`]).

pub mod binary;
pub mod binary_response;
pub mod meta;
pub mod moving;
mod num;
pub mod refused;
pub mod replies;
pub mod stats;
mod text_merge;
mod text_request;
mod text_response;
pub mod too_large;

pub use meta::MetaCmd;
pub use text_merge::{merge_responses, missed_keys, server_error, write_fragment};
pub use text_request::{get_shortcut_agrees, KEY_MAX_LENGTH, MAX_LINE};

use crate::proto::{Limits, Op, Parse, Request, RequestError, Response, ResponseError};

/// Parse one request at the start of `buf`: binary when the first byte is
/// 0x80 (memcached decides per connection on the first byte; the proxy
/// decides per request, which is the same for a well-behaved client), meta
/// when it starts with a meta command word, text otherwise.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parse<Request>, RequestError> {
    if let Some(req) = text_request::single_get(buf, limits) {
        return Ok(Parse::Done(req));
    }
    match buf.first() {
        None => Ok(Parse::Incomplete { hint: 1 }),
        Some(&binary::REQ_MAGIC) => binary::parse_request(buf, limits),
        Some(_) if meta::looks_like_meta(buf) => meta::parse_request(buf, limits),
        Some(_) => text_request::parse_request(buf, limits),
    }
}

/// Parse one server reply to a request of operation `op`.
pub fn parse_response(buf: &[u8], op: McOp) -> Result<Parse<Response>, ResponseError> {
    match op {
        McOp::TooLarge(refused) => too_large::parse_response(refused, buf),
        McOp::Bin { opcode, opaque } => binary_response::parse_response(buf, opcode, opaque),
        McOp::Meta { .. } => meta::parse_response(buf),
        _ => text_response::parse_response(buf, op),
    }
}

/// Write a single-server request as the server gets it: quiet binary and
/// meta requests go out in their non-quiet form; text is unchanged.
pub fn write_request(req: &Request, bytes: &[u8], out: &mut Vec<u8>) {
    match req.op {
        Op::Mc(McOp::Bin { .. }) => binary::write_request(bytes, out),
        Op::Mc(McOp::Meta { cmd, quiet }) => meta::write_request(cmd, quiet, bytes, out),
        Op::Mc(McOp::TooLarge(refused)) => {
            too_large::write_request(refused, req.noreply, bytes, out)
        }
        _ => out.extend_from_slice(bytes),
    }
}

/// Whether `write_request` sends other bytes than the client's: the
/// operations it does not pass through unchanged.
pub fn rewrites(op: McOp) -> bool {
    matches!(op, McOp::Bin { .. } | McOp::Meta { .. } | McOp::TooLarge(_))
}

/// Whether a server reply to `op` reaches the client (quiet binary and
/// meta requests drop the replies their quiet mode suppresses).
pub fn keep_reply(op: McOp, reply: &[u8]) -> bool {
    match op {
        McOp::Bin { opcode, .. } => binary::keep_reply(opcode, reply),
        McOp::Meta { cmd, quiet } => meta::keep_reply(cmd, quiet, reply),
        _ => true,
    }
}

/// The reply bytes the client must get instead of `reply`, when they
/// differ: a quiet binary request's reply carries the client's opcode; the
/// delete sent for a store refused as too large is answered with the
/// refusal.
pub fn rewrite_reply(op: McOp, reply: &[u8]) -> Option<Vec<u8>> {
    match op {
        McOp::TooLarge(refused) => Some(too_large::refusal(refused)),
        McOp::Bin { opcode, .. } => binary::rewrite_reply(opcode, reply),
        _ => None,
    }
}

/// Merge the replies every server gave to a broadcast (`flush_all`, FLUSH).
pub fn merge_broadcast(replies: &[&[u8]], out: &mut Vec<u8>) {
    if replies
        .iter()
        .any(|r| r.first() == Some(&binary::RES_MAGIC))
    {
        binary_response::merge_broadcast(replies, out);
    } else {
        text_merge::merge_broadcast(replies, out);
    }
}

/// The reply for a request that could not be served by a backend: a binary
/// error response (status 0x0086, see [`binary_response::error_reply`])
/// for a binary request, `SERVER_ERROR <msg>` otherwise.
pub fn error_reply(op: McOp, msg: &str, out: &mut Vec<u8>) {
    match op {
        McOp::Bin { opcode, opaque } | McOp::TooLarge(refused::Refused::Bin { opcode, opaque }) => {
            binary_response::error_reply(opcode, opaque, msg, out)
        }
        _ => server_error(msg, out),
    }
}

/// What a request counts in memcached's `cmd_get` (keys asked for by a
/// text, binary or meta retrieval) and `cmd_set` (storage requests,
/// refused ones included, as memcached counts them).
pub fn cmd_counts(op: McOp, keys: usize) -> (u64, u64) {
    let keys = keys as u64;
    match op {
        McOp::Bin { opcode, .. } if binary_response::is_retrieval(opcode) => (keys, 0),
        McOp::Bin { opcode, .. } => {
            let loud = binary::loud(opcode).unwrap_or(opcode);
            let store = matches!(
                loud,
                binary::opcode::SET
                    | binary::opcode::ADD
                    | binary::opcode::REPLACE
                    | binary::opcode::APPEND
                    | binary::opcode::PREPEND
            );
            (0, u64::from(store))
        }
        McOp::Meta {
            cmd: MetaCmd::Get, ..
        } => (keys, 0),
        McOp::Meta {
            cmd: MetaCmd::Set, ..
        }
        | McOp::TooLarge(_) => (0, 1),
        op if op.is_retrieval() => (keys, 0),
        op => (0, u64::from(op.is_storage())),
    }
}

/// How many of the keys of a retrieval found a value in a server's reply
/// (memcached's `get_hits`); 0 for any other reply. `values` is the parsed
/// reply's count of text `VALUE` entries (`Response::values`).
pub fn hits(op: McOp, reply: &[u8], values: u32) -> u64 {
    match op {
        McOp::Bin { opcode, .. } if binary_response::is_retrieval(opcode) => {
            let ok = binary::Header::decode(reply).is_some_and(|h| h.status == 0);
            u64::from(ok)
        }
        McOp::Meta {
            cmd: MetaCmd::Get, ..
        } => u64::from(reply.starts_with(b"VA ") || reply.starts_with(b"HD")),
        op if op.is_retrieval() => u64::from(values),
        _ => 0,
    }
}

/// Connection class of an operation: memcached fixes a connection's
/// protocol on its first byte, so binary requests use their own server
/// connections (class 1); text and meta share class 0.
pub fn conn_class(op: McOp) -> usize {
    usize::from(matches!(
        op,
        McOp::Bin { .. } | McOp::TooLarge(refused::Refused::Bin { .. })
    ))
}

/// The reply to a `flush_all` (text, or binary FLUSH/FLUSHQ) on a pool
/// without `allow_flush`: what memcached started with `-F` answers
/// (`CLIENT_ERROR flush_all not allowed`, silenced by `noreply`; binary
/// status 0x0020, which memcached gives then, with the same text).
pub fn flush_refused(op: McOp, noreply: bool) -> Vec<u8> {
    let mut out = Vec::new();
    match op {
        McOp::Bin { opcode, opaque } => {
            binary::write_error(
                &mut out,
                opcode,
                opaque,
                binary::status::AUTH_ERROR,
                "flush_all not allowed",
            );
        }
        _ if noreply => {}
        _ => out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n"),
    }
    out
}

/// Version the proxy reports to `version`. Clients such as libmemcached
/// parse "major.minor.micro" after "VERSION ", so the memcached protocol
/// level comes first and the proxy's own version follows it.
pub const VERSION: &str = concat!("1.6.0-walnut-", env!("CARGO_PKG_VERSION"));

/// memcached text operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McOp {
    /// `get <key>*`
    Get,
    /// `gets <key>*` (values carry their cas unique)
    Gets,
    /// `gat <exptime> <key>*` (get and touch)
    Gat,
    /// `gats <exptime> <key>*` (get and touch, with cas unique)
    Gats,
    /// `set <key> <flags> <exptime> <bytes> [noreply]` + data
    Set,
    /// `add ...` + data
    Add,
    /// `replace ...` + data
    Replace,
    /// `append ...` + data
    Append,
    /// `prepend ...` + data
    Prepend,
    /// `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]` + data
    Cas,
    /// `delete <key> [0] [noreply]`
    Delete,
    /// `incr <key> <delta> [noreply]`
    Incr,
    /// `decr <key> <delta> [noreply]`
    Decr,
    /// `touch <key> <exptime> [noreply]`
    Touch,
    /// `version`
    Version,
    /// `quit`
    Quit,
    /// `flush_all [delay] [noreply]`
    FlushAll,
    /// `verbosity <level> [noreply]`
    Verbosity,
    /// `stats [args]`
    Stats,
    /// Binary protocol request: the client's `opcode` (possibly a quiet
    /// one; the server gets its non-quiet form) and `opaque`.
    Bin {
        /// Opcode as the client sent it.
        opcode: u8,
        /// Opaque the client sent, echoed by the server.
        opaque: u32,
    },
    /// A store refused as too large: its key's server gets a delete in
    /// its place (see [`too_large`]).
    TooLarge(refused::Refused),
    /// Meta protocol command; `quiet` when it carries the `q` flag.
    Meta {
        /// The command.
        cmd: MetaCmd,
        /// Quiet mode (the server gets the request without `q`).
        quiet: bool,
    },
}

impl McOp {
    /// The command word as sent on the wire.
    pub fn name(self) -> &'static str {
        match self {
            McOp::Get => "get",
            McOp::Gets => "gets",
            McOp::Gat => "gat",
            McOp::Gats => "gats",
            McOp::Set => "set",
            McOp::Add => "add",
            McOp::Replace => "replace",
            McOp::Append => "append",
            McOp::Prepend => "prepend",
            McOp::Cas => "cas",
            McOp::Delete => "delete",
            McOp::Incr => "incr",
            McOp::Decr => "decr",
            McOp::Touch => "touch",
            McOp::Version => "version",
            McOp::Quit => "quit",
            McOp::FlushAll => "flush_all",
            McOp::Verbosity => "verbosity",
            McOp::Stats => "stats",
            McOp::Bin { .. } => "binary",
            McOp::Meta { cmd, .. } => cmd.name(),
            McOp::TooLarge(_) => "set",
        }
    }

    /// A retrieval command (`get`, `gets`, `gat`, `gats`): its reply is a
    /// list of values closed by `END`.
    pub fn is_retrieval(self) -> bool {
        matches!(self, McOp::Get | McOp::Gets | McOp::Gat | McOp::Gats)
    }

    /// Only reads the item (text/binary get family, meta `mg`): a
    /// replicated pool serves it from one replica.
    pub fn is_read(self) -> bool {
        match self {
            McOp::Bin { opcode, .. } => matches!(opcode, 0x00 | 0x09 | 0x0c | 0x0d),
            McOp::Meta { cmd, .. } => cmd == meta::MetaCmd::Get,
            op => op.is_retrieval(),
        }
    }

    /// A retrieval command whose first argument is an expiration time.
    pub fn has_exptime_arg(self) -> bool {
        matches!(self, McOp::Gat | McOp::Gats)
    }

    /// A storage command, followed by a data block.
    pub fn is_storage(self) -> bool {
        matches!(
            self,
            McOp::Set | McOp::Add | McOp::Replace | McOp::Append | McOp::Prepend | McOp::Cas
        )
    }
}

#[cfg(test)]
mod vectors;

#[cfg(test)]
mod binary_vectors;
#[cfg(test)]
mod meta_vectors;

#[cfg(test)]
mod rewrites_tests {
    use super::*;
    use crate::proto::{Limits, Parse};

    /// `rewrites` is false exactly for requests `write_request` passes on
    /// unchanged (those the worker may write from the client's input).
    #[test]
    fn rewrites_agrees_with_write_request() {
        let mut binary_getkq = vec![0u8; 24 + 3];
        binary_getkq[0] = 0x80;
        binary_getkq[1] = 0x0d; // GETKQ: sent as GETK
        binary_getkq[3] = 3;
        binary_getkq[11] = 3;
        binary_getkq[24..].copy_from_slice(b"foo");
        let inputs: [&[u8]; 8] = [
            b"get k\r\n",
            b"gets a b c\r\n",
            b"set k 0 0 1\r\nx\r\n",
            b"set k 0 0 1 noreply\r\nx\r\n",
            b"delete k\r\n",
            b"mg k v q\r\n",
            b"ms k 1 q\r\nx\r\n",
            &binary_getkq,
        ];
        let mut rewritten = 0;
        for input in inputs {
            let Ok(Parse::Done(req)) = parse_request(input, &Limits::default()) else {
                panic!("{input:?} does not parse");
            };
            let mut out = Vec::new();
            write_request(&req, &input[..req.len], &mut out);
            let Op::Mc(op) = req.op else {
                panic!("not a memcached operation")
            };
            if rewrites(op) {
                rewritten += usize::from(out != input[..req.len]);
            } else {
                assert_eq!(out, &input[..req.len], "{input:?}");
            }
        }
        // The quiet meta and binary requests go out in another form.
        assert_eq!(rewritten, 3);
    }
}
