//! memcached protocols. The text protocol lives here: request framing and
//! validation ([`parse_request`]), reply framing ([`parse_response`]), and
//! the pieces the data path needs to split multi-key retrievals across
//! servers and join the replies ([`write_fragment`], [`merge_responses`],
//! [`merge_broadcast`], [`server_error`]).

mod num;
mod text_merge;
mod text_request;
mod text_response;

pub use text_merge::{merge_broadcast, merge_responses, server_error, write_fragment};
pub use text_request::{parse_request, KEY_MAX_LENGTH, MAX_LINE};
pub use text_response::parse_response;

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
        }
    }

    /// A retrieval command (`get`, `gets`, `gat`, `gats`): its reply is a
    /// list of values closed by `END`.
    pub fn is_retrieval(self) -> bool {
        matches!(self, McOp::Get | McOp::Gets | McOp::Gat | McOp::Gats)
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
