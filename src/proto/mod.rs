//! Wire protocols. Parsers here do no I/O: they look at a byte slice and say
//! how much of it is one message, what it means for routing, or that more
//! bytes are needed. Composers append to a `Vec<u8>`.
//!
//! The worker's data path (`crate::worker`) is protocol-agnostic: it calls
//! `parse_request`, routes by `Request::route` and `Request::keys`, forwards
//! bytes, calls `parse_response` on server bytes, and for multi-key requests
//! asks the protocol to write per-server fragments and merge their replies.

pub mod memcache;
pub mod redis;

use smallvec::SmallVec;
use std::ops::Range;

/// Which wire protocol a pool speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// memcached: text, binary and meta protocols on one port.
    Memcache,
    /// Redis RESP.
    Redis,
}

/// Byte ranges of the keys of a request, relative to the request's first byte.
pub type Keys = SmallVec<[Range<usize>; 2]>;

/// How the data path must route a parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Forward the request bytes unchanged to the server owning `keys[0]`.
    Single,
    /// Split per server: `write_fragment` builds each server's request from a
    /// subset of key indices (in client order) and `merge_responses` joins
    /// the replies in the client's key order.
    Multi,
    /// Send the request unchanged to every server of the pool; the reply is
    /// merged by `merge_broadcast` (e.g. memcached `flush_all`).
    Broadcast,
    /// Answered by the proxy itself, never forwarded.
    Local(Local),
}

/// Requests the proxy answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// Reply with these bytes and keep the connection (borrowed when they
    /// never change, as PING's: no allocation per request).
    Reply(std::borrow::Cow<'static, [u8]>),
    /// Close the connection after flushing the given bytes (empty for memcached `quit`).
    Quit(Vec<u8>),
    /// memcached `stats` / Redis `INFO`-like: the worker fills in its counters.
    Stats,
    /// Redis command that needs the connection's state (AUTH, SELECT, HELLO,
    /// CLIENT ..., COMMAND ...): the worker calls `redis::local::answer`.
    RedisSession,
}

/// One request parsed from a client's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Bytes the request occupies in the input (including any data block).
    pub len: usize,
    /// Protocol-specific operation, needed to parse the reply and to merge.
    pub op: Op,
    /// Keys, as ranges into the request bytes, in the order the client gave them.
    pub keys: Keys,
    /// The route the data path must take.
    pub route: Route,
    /// The client expects no reply (memcached `noreply`, quiet binary ops).
    pub noreply: bool,
}

/// Protocol-specific operation carried by a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// memcached text command.
    Mc(memcache::McOp),
    /// Redis command.
    Redis(redis::RedisOp),
}

impl Op {
    /// Whether the operation only reads (a memcached retrieval, a Redis
    /// read-only command).
    pub fn reads_only(self) -> bool {
        match self {
            Op::Mc(op) => op.is_read(),
            Op::Redis(r) => redis::commands::is_read_command(r.cmd.name()),
        }
    }

    /// Whether the operation deletes its keys (memcached `delete`, meta
    /// `md`, Redis DEL and UNLINK).
    pub fn deletes(self) -> bool {
        use memcache::{McOp, MetaCmd};
        match self {
            Op::Mc(McOp::Delete) => true,
            Op::Mc(McOp::Meta { cmd, .. }) => cmd == MetaCmd::Delete,
            Op::Mc(_) => false,
            Op::Redis(r) => r.cmd.is("DEL") || r.cmd.is("UNLINK"),
        }
    }
}

/// A reply parsed from a server's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Bytes the reply occupies in the server's input.
    pub len: usize,
    /// The reply is an error reply of the protocol (`-ERR`, `SERVER_ERROR`,
    /// `CLIENT_ERROR`, `ERROR`): counted, and it fails a multi-key fragment.
    pub is_error: bool,
    /// `VALUE` entries of a memcached text retrieval reply (its hits, so
    /// they are not counted by a second walk over the reply); 0 otherwise.
    pub values: u32,
}

impl Request {
    /// Whether this is a read of one key's whole value whose miss is the
    /// protocol's plain one (Redis `GET`: nil; memcached `get` of a single
    /// key: `END`), so that asking another server after a miss changes
    /// nothing but where it was read (a migrating Redis pool's moved key,
    /// see `worker/migrate.rs`). Not `gets`/`gat`, whose cas unique or
    /// touch belong to one server, nor meta requests, whose flags may
    /// write.
    pub fn reads_one_value(&self) -> bool {
        match self.op {
            Op::Redis(r) => r.cmd == redis::commands::GET,
            Op::Mc(memcache::McOp::Get) => self.keys.len() == 1,
            Op::Mc(_) => false,
        }
    }

    /// [`Request::reads_one_value`], or a memcached `gets` of a single
    /// key: asked of one server only (a migrating memcached pool reads a
    /// moved key on its new owner alone), its cas unique is that server's,
    /// the one a `cas` of the key goes to.
    pub fn reads_one_value_of_its_owner(&self) -> bool {
        self.reads_one_value() || self.op == Op::Mc(memcache::McOp::Gets) && self.keys.len() == 1
    }

    /// The bytes a single-key request (its bytes `bytes`) is placed by:
    /// its first key, or for a meta request with the `b` flag the key it
    /// encodes (base64); empty for a request without keys.
    #[inline]
    pub fn routing_key<'a>(&self, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        use memcache::{meta, refused::Refused, McOp};
        use std::borrow::Cow;
        let Some(range) = self.keys.first() else {
            return Cow::Borrowed(b"");
        };
        let meta_cmd = match self.op {
            Op::Mc(McOp::Meta { cmd, .. }) => Some(cmd),
            Op::Mc(McOp::TooLarge(Refused::Meta)) => Some(meta::MetaCmd::Set),
            _ => None,
        };
        if let Some(cmd) = meta_cmd {
            if let Some(k) = meta::binary_key(cmd, bytes, range.clone()) {
                return Cow::Owned(k);
            }
        }
        Cow::Borrowed(&bytes[range.clone()])
    }
}

/// Whether the new owner of a key has it after a copy that does not
/// overwrite (Redis `RESTORE` without `REPLACE`, memcached `ms ... ME`):
/// stored, or not stored because it already had a (newer) value.
pub fn copied(reply: &[u8]) -> bool {
    redis::moving::copied(reply) || memcache::moving::copied(reply)
}

/// Outcome of an incremental parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse<T> {
    /// A whole message.
    Done(T),
    /// Not enough bytes yet; `hint` is the minimum total length the input
    /// must reach before parsing again is worthwhile (0 if unknown). The data
    /// path uses it so large values are not re-scanned on every read.
    Incomplete {
        /// Minimum total input length before the next attempt.
        hint: usize,
    },
}

/// A request the proxy could not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// Reply bytes to send to the client (already framed for the protocol).
    pub reply: Vec<u8>,
    /// Input bytes to discard before parsing the next request; when `close`
    /// is true the connection is closed after the reply instead.
    pub skip: usize,
    /// Close the connection after the reply (as memcached/redis-server do for
    /// unrecoverable framing errors).
    pub close: bool,
    /// A request the data path routes in the refused one's place, its
    /// bytes the first `len` of the input (`skip` still discards the
    /// rest): a memcached store refused as too large deletes the key, as
    /// memcached unlinks the old item then, and its reply becomes the
    /// refusal (`reply` is then empty).
    pub forward: Option<Box<Request>>,
}

/// A server reply that does not parse: the server connection is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseError(pub String);

/// Limits the parsers enforce.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest value (memcached data block, Redis bulk string) accepted.
    pub max_value: usize,
    /// Largest number of keys in one multi-key request.
    pub max_keys: usize,
    /// The client has not authenticated to a pool that has a password:
    /// redis-server's pre-AUTH limits apply (at most 10 arguments, bulk
    /// strings of at most 16384 bytes), so an unauthenticated peer cannot
    /// make the proxy buffer anything large.
    pub pre_auth: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_value: 1024 * 1024,
            max_keys: 1_000_000,
            pre_auth: false,
        }
    }
}

impl Protocol {
    /// Parse one client request from the start of `buf`.
    pub fn parse_request(
        self,
        buf: &[u8],
        limits: &Limits,
    ) -> Result<Parse<Request>, RequestError> {
        match self {
            Protocol::Memcache => memcache::parse_request(buf, limits),
            Protocol::Redis => redis::parse_request(buf, limits),
        }
    }

    /// The operation of a request the proxy wrote itself (a pull's or a
    /// warm-up's command: no client limit applies), if it parses whole.
    pub fn own_request_op(self, bytes: &[u8]) -> Option<Op> {
        let limits = Limits {
            max_value: usize::MAX,
            max_keys: usize::MAX,
            pre_auth: false,
        };
        match self.parse_request(bytes, &limits) {
            Ok(Parse::Done(r)) => Some(r.op),
            _ => None,
        }
    }

    /// Whether `reply`, to a single-key read, says the key is not there
    /// (memcached `END`, meta `EN`; Redis a null or an empty collection).
    pub fn is_miss(self, reply: &[u8]) -> bool {
        match self {
            Protocol::Memcache => memcache::replies::is_miss(reply),
            Protocol::Redis => redis::reply::is_miss(reply),
        }
    }

    /// The reply of a multi-key read's fragment that carries no key
    /// (memcached `END`, Redis an empty array).
    pub fn empty_read(self) -> &'static [u8] {
        match self {
            Protocol::Memcache => memcache::replies::END,
            Protocol::Redis => redis::reply::EMPTY_ARRAY,
        }
    }

    /// The request that probes a server's health (memcached `version`,
    /// Redis `PING`) and its operation.
    pub fn probe(self) -> (Op, &'static [u8]) {
        match self {
            Protocol::Memcache => (
                Op::Mc(memcache::McOp::Version),
                memcache::replies::VERSION_PROBE,
            ),
            Protocol::Redis => {
                let cmd = redis::Cmd::lookup(b"PING").expect("PING is in the command table");
                let class = cmd.class();
                (Op::Redis(redis::RedisOp { cmd, class }), redis::reply::PING)
            }
        }
    }

    /// Parse one server reply to a request of operation `op`.
    pub fn parse_response(self, buf: &[u8], op: Op) -> Result<Parse<Response>, ResponseError> {
        match (self, op) {
            (Protocol::Memcache, Op::Mc(op)) => memcache::parse_response(buf, op),
            (Protocol::Redis, _) => redis::parse_response(buf),
            (Protocol::Memcache, Op::Redis(_)) => Err(ResponseError(
                "non-memcached operation on a memcached connection".into(),
            )),
        }
    }

    /// Write a single-server request as the server must get it. Usually the
    /// client's bytes unchanged; a protocol may rewrite (e.g. a quiet
    /// memcached binary or meta request is sent in its non-quiet form so
    /// every request gets exactly one reply, see `keep_reply`).
    pub fn write_request(self, req: &Request, bytes: &[u8], out: &mut Vec<u8>) {
        match self {
            Protocol::Memcache => memcache::write_request(req, bytes, out),
            Protocol::Redis => out.extend_from_slice(bytes),
        }
    }

    /// Whether `write_request` changes the request's bytes (when not, they
    /// can be written to the server straight from the client's input).
    pub fn rewrites(self, op: Op) -> bool {
        match (self, op) {
            (Protocol::Memcache, Op::Mc(op)) => memcache::rewrites(op),
            _ => false,
        }
    }

    /// Whether a server's reply to a request of operation `op` is passed on
    /// to the client (false for the replies a quiet request asked not to
    /// get, e.g. a miss of a binary GETKQ or of a meta `mg ... q`).
    pub fn keep_reply(self, op: Op, reply: &[u8]) -> bool {
        match (self, op) {
            (Protocol::Memcache, Op::Mc(op)) => memcache::keep_reply(op, reply),
            _ => true,
        }
    }

    /// The bytes the client gets for a kept server reply, when they differ
    /// from the server's (`None`: unchanged). A quiet memcached binary
    /// request was sent in its non-quiet form; its reply carries the
    /// client's quiet opcode again.
    pub fn rewrite_reply(self, op: Op, reply: &[u8]) -> Option<Vec<u8>> {
        match (self, op) {
            (Protocol::Memcache, Op::Mc(op)) => memcache::rewrite_reply(op, reply),
            _ => None,
        }
    }

    /// The class of server connection a request of operation `op` must use
    /// (0 or 1; class 1 uses the second half of a server's connection
    /// slots): memcached binds a connection to the binary or the text
    /// protocol on its first byte, so binary requests have their own
    /// connections.
    pub fn conn_class(self, op: Op) -> usize {
        match (self, op) {
            (Protocol::Memcache, Op::Mc(op)) => memcache::conn_class(op),
            _ => 0,
        }
    }

    /// Write the request one server gets for the keys `key_idx` of a multi-key request.
    pub fn write_fragment(
        self,
        req_bytes: &[u8],
        req: &Request,
        key_idx: &[usize],
        out: &mut Vec<u8>,
    ) {
        match self {
            Protocol::Memcache => memcache::write_fragment(req_bytes, req, key_idx, out),
            Protocol::Redis => redis::write_fragment(req_bytes, req, key_idx, out),
        }
    }

    /// Merge the replies of a multi-key request's fragments, in the client's key order.
    pub fn merge_responses(
        self,
        req_bytes: &[u8],
        req: &Request,
        frags: &[(&[usize], &[u8])],
        out: &mut Vec<u8>,
    ) {
        match self {
            Protocol::Memcache => memcache::merge_responses(req_bytes, req, frags, out),
            Protocol::Redis => redis::merge_responses(req_bytes, req, frags, out),
        }
    }

    /// The keys of a multi-key read's fragment `key_idx` that its
    /// server's `reply` has no value for (memcached `get`/`gets`/`gat`/
    /// `gats`: no `VALUE`; Redis MGET: a nil), as indices into `req.keys`.
    /// `None` for another request, an error, or a reply that does not
    /// parse.
    pub fn missed_keys(
        self,
        req_bytes: &[u8],
        req: &Request,
        key_idx: &[usize],
        reply: &[u8],
    ) -> Option<Vec<usize>> {
        use memcache::McOp;
        match req.op {
            Op::Mc(McOp::Get | McOp::Gets | McOp::Gat | McOp::Gats) => {
                memcache::missed_keys(req_bytes, req, key_idx, reply)
            }
            Op::Redis(r) if r.class == redis::CmdClass::MGet => redis::mget_missed(key_idx, reply),
            _ => None,
        }
    }

    /// A multi-key read's fragment reply without the misses that
    /// [`Self::missed_keys`] found, for a fragment that no longer carries
    /// those keys (Redis: the nils dropped from the array; a memcached
    /// reply has nothing for them).
    pub fn drop_misses(self, reply: Vec<u8>) -> Vec<u8> {
        match self {
            Protocol::Memcache => reply,
            Protocol::Redis => redis::mget_hits(&reply),
        }
    }

    /// Merge the replies every server gave to a broadcast request.
    pub fn merge_broadcast(self, op: Op, replies: &[&[u8]], out: &mut Vec<u8>) {
        match self {
            Protocol::Memcache => memcache::merge_broadcast(replies, out),
            Protocol::Redis => match replies.iter().find(|r| r.first() == Some(&b'-')) {
                Some(err) => out.extend_from_slice(err),
                None => {
                    let name = match op {
                        Op::Redis(op) => op.cmd.name(),
                        Op::Mc(_) => "",
                    };
                    match redis::keyspace::merge(name, replies) {
                        Some(merged) => out.extend_from_slice(&merged),
                        None => {
                            out.extend_from_slice(replies.first().copied().unwrap_or(b"+OK\r\n"))
                        }
                    }
                }
            },
        }
    }

    /// The reply a client gets when its request could not be served by a
    /// backend (twemproxy's wording: the strerror text of the failure).
    pub fn server_error(self, op: Op, msg: &str, out: &mut Vec<u8>) {
        match (self, op) {
            (Protocol::Memcache, Op::Mc(op)) => memcache::error_reply(op, msg, out),
            (Protocol::Memcache, _) => memcache::server_error(msg, out),
            (Protocol::Redis, _) => redis::error_reply(msg, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(proto: Protocol, bytes: &[u8]) -> Request {
        match proto.parse_request(bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn routing_keys() {
        let b = b"get user:1\r\n";
        assert_eq!(&*parse(Protocol::Memcache, b).routing_key(b), b"user:1");
        // A meta request with the `b` flag is placed by the key it encodes.
        let b = b"mg dXNlcjox b v\r\n";
        assert_eq!(&*parse(Protocol::Memcache, b).routing_key(b), b"user:1");
        let b = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert_eq!(&*parse(Protocol::Redis, b).routing_key(b), b"k");
        let b = b"*1\r\n$4\r\nPING\r\n";
        let ping = parse(Protocol::Redis, b);
        assert!(matches!(ping.route, Route::Local(_)) || ping.keys.is_empty());
        assert_eq!(&*ping.routing_key(b), b"");
    }

    #[test]
    fn reads_of_one_value() {
        let one = |p, b: &[u8]| parse(p, b).reads_one_value();
        assert!(one(Protocol::Redis, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
        assert!(one(Protocol::Redis, b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n"));
        assert!(one(Protocol::Redis, b"get k\r\n"));
        // A miss of these is not a nil, or they write, or name more keys.
        assert!(!one(
            Protocol::Redis,
            b"*4\r\n$8\r\nGETRANGE\r\n$1\r\nk\r\n$1\r\n0\r\n$2\r\n-1\r\n"
        ));
        assert!(!one(Protocol::Redis, b"*2\r\n$6\r\nGETDEL\r\n$1\r\nk\r\n"));
        assert!(!one(
            Protocol::Redis,
            b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n"
        ));
        assert!(!one(
            Protocol::Redis,
            b"*3\r\n$4\r\nHGET\r\n$1\r\nh\r\n$1\r\nf\r\n"
        ));
        assert!(one(Protocol::Memcache, b"get a\r\n"));
        assert!(!one(Protocol::Memcache, b"get a b\r\n"));
        assert!(!one(Protocol::Memcache, b"gets a\r\n"));
        assert!(!one(Protocol::Memcache, b"gat 10 a\r\n"));
        assert!(!one(Protocol::Memcache, b"mg a v\r\n"));
        assert!(!one(Protocol::Memcache, b"set a 0 0 1\r\nx\r\n"));
        // Of its one owner: a `gets` of one key too, nothing else more.
        let owner = |p, b: &[u8]| parse(p, b).reads_one_value_of_its_owner();
        assert!(owner(Protocol::Memcache, b"gets a\r\n"));
        assert!(owner(Protocol::Memcache, b"get a\r\n"));
        assert!(owner(Protocol::Redis, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
        assert!(!owner(Protocol::Memcache, b"gets a b\r\n"));
        assert!(!owner(Protocol::Memcache, b"gat 10 a\r\n"));
        assert!(!owner(Protocol::Memcache, b"mg a v c\r\n"));
    }

    #[test]
    fn reads() {
        let read = |p, b: &[u8]| parse(p, b).op.reads_only();
        assert!(read(Protocol::Memcache, b"get a\r\n"));
        assert!(!read(Protocol::Memcache, b"set a 0 0 1\r\nx\r\n"));
        assert!(read(Protocol::Redis, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
        assert!(!read(
            Protocol::Redis,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        ));
    }

    #[test]
    fn misses_and_probes() {
        assert!(Protocol::Memcache.is_miss(Protocol::Memcache.empty_read()));
        assert!(Protocol::Redis.is_miss(Protocol::Redis.empty_read()));
        assert_eq!(Protocol::Memcache.probe().1, b"version\r\n");
        let (op, ping) = Protocol::Redis.probe();
        assert_eq!(parse(Protocol::Redis, ping).op, op);
        assert!(copied(b"+OK\r\n") && copied(b"NS\r\n") && !copied(b"-ERR x\r\n"));
    }

    #[test]
    fn the_proxys_own_requests_parse_past_the_client_limits() {
        // A value larger than any client may send (RESTORE of a big key).
        let mut big = b"*4\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$1\r\n0\r\n".to_vec();
        let n = Limits::default().max_value + 1;
        big.extend_from_slice(format!("${n}\r\n").as_bytes());
        big.resize(big.len() + n, b'x');
        big.extend_from_slice(b"\r\n");
        assert!(!matches!(
            Protocol::Redis.parse_request(&big, &Limits::default()),
            Ok(Parse::Done(_))
        ));
        let op = Protocol::Redis.own_request_op(&big).expect("parses");
        assert_eq!(
            op,
            parse(Protocol::Redis, b"*2\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n").op
        );
        let mg = b"mg k v f t\r\n";
        assert_eq!(
            Protocol::Memcache.own_request_op(mg),
            Some(parse(Protocol::Memcache, mg).op)
        );
        assert_eq!(
            Protocol::Redis.own_request_op(b"*2\r\n$4\r\nDUMP"),
            None,
            "not whole"
        );
    }
}
