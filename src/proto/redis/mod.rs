//! Redis RESP protocol: request parsing and routing, reply scanning (RESP2
//! and RESP3), multi-key fragmenting and merging, and the answers the proxy
//! gives itself. Nothing here does I/O.
//!
//! Requests are arrays of bulk strings (`*N\r\n$len\r\n...`) or inline
//! commands (`GET foo\r\n`), accepted exactly as redis-server accepts them.
//! Each command is looked up in a static table ([`commands`]) that says how
//! it is routed:
//!
//! * single-key commands, and commands whose keys must live on one server
//!   (SINTER, RENAME, BITOP, ...), go to the server owning their routing key;
//! * MGET, MSET, DEL, UNLINK, EXISTS and TOUCH are split per server
//!   ([`write_fragment`]) and their replies joined ([`merge_responses`]);
//! * PING, ECHO, QUIT are answered directly, AUTH, SELECT, HELLO, CLIENT and
//!   COMMAND through the connection's state ([`local`]);
//! * everything else gets an error reply and the connection stays open.

pub mod acl;
mod args;
pub mod cluster;
pub mod commands;
mod fast;
pub mod handshake;
pub mod info;
mod inline;
pub mod keyspace;
pub mod local;
mod merge;
pub mod merge_held;
pub mod moving;
pub mod pubsub;
pub mod reply;
mod request;
pub mod resp;
pub mod rewrite;
pub mod sentinel;
mod stream;
#[doc(hidden)]
pub mod stream_check;
pub mod txn;

pub use args::{Arg, Args};
pub use commands::{Cmd, CmdClass, KeySpec};
pub use merge::{merge_responses, mget_hits, mget_missed, write_fragment};
pub use reply::error_reply;
#[doc(hidden)]
pub use request::shortcut_agrees;
pub use request::{
    command_keys, eval_numkeys, names_more_keys, parse_request, stream_arg, stream_head,
    stream_pair, whole_arg, Pair, StreamHead, StreamKind,
};
pub use resp::{parse_response, reply_shortcut_agrees, ReplyCursor};
pub use stream::{StreamMachine, StreamStep};

/// Redis operation carried by a parsed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOp {
    /// The command, an entry of the command table.
    pub cmd: Cmd,
    /// How the command is routed and its reply merged.
    pub class: CmdClass,
}
