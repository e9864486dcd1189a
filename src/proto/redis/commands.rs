//! The command table: every command the proxy knows, how its keys are found
//! and how it is routed. Lookup is case-insensitive and allocation-free.

/// How a command is routed and how its reply is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdClass {
    /// Forwarded unchanged to the server owning the routing key (also for
    /// commands whose keys must all live on that server).
    Single,
    /// MGET: split per server, replies joined into one array in key order.
    MGet,
    /// MSET: split per server with each key's value, reply `+OK`.
    MSet,
    /// DEL, UNLINK, EXISTS, TOUCH: split per server, integer replies summed.
    SumInt,
    /// EVAL and friends: routed by the first of `numkeys` keys; with
    /// numkeys 0, as `Keyless`.
    Eval,
    /// No key (TIME): sent to one server, chosen by the pool's
    /// `keyless_server` (the first live one, or a random one).
    Keyless,
    /// Keys that must all be on one server for the command to keep its
    /// meaning (MSETNX: all or none set): forwarded whole when they are,
    /// refused when they map to several servers.
    OneServer,
    /// Sent to every server, replies merged (SCRIPT LOAD / FLUSH and
    /// FUNCTION, so a script or library loaded through the proxy runs
    /// wherever EVALSHA or FCALL lands;
    /// DBSIZE summed, KEYS joined, RANDOMKEY one of the servers' keys,
    /// INFO's keyspace summed, FLUSHALL / FLUSHDB behind the pool's
    /// `allow_flush`).
    Broadcast,
    /// Answered by the proxy (PING, ECHO, QUIT, AUTH, SELECT, HELLO, CLIENT,
    /// COMMAND).
    Local,
    /// Blocking commands (BLPOP, BLMOVE, BZPOPMIN, XREAD ... BLOCK, ...):
    /// keys that must all be on one server (else refused, as MSETNX's),
    /// sent on a server connection of the request's own, which no pool
    /// `timeout` cuts and which closes with its client.
    Blocking,
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: a transaction on a server
    /// connection pinned to the client (see `worker/txn.rs`).
    Transaction,
    /// SCAN: to the server its cursor names (see `keyspace.rs`).
    Scan,
    /// SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE: on server
    /// connections of the client's own (see `worker/pubsub.rs`).
    PubSub,
    /// Known, but refused with an error reply (administration, ...).
    Unsupported,
}

/// Where a command's keys are in its arguments (argument 0 is the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySpec {
    /// No key.
    None,
    /// One routing key at this argument index.
    At(u8),
    /// Every argument after the name is a key.
    All,
    /// Arguments after the name are key, value pairs.
    Pairs,
    /// `name script numkeys key...`: the first key is argument 3.
    Eval,
    /// XREAD / XREADGROUP: the first key follows the `STREAMS` keyword.
    Streams,
    /// Every argument after the name but the last (a timeout) is a key.
    AllButLast,
    /// Arguments 1 and 2 are keys (BLMOVE source and destination).
    FirstTwo,
    /// `name timeout numkeys key...` (BLMPOP, BZMPOP).
    NumKeysAt2,
}

/// One row of the table.
#[derive(Debug)]
struct Entry {
    name: &'static str,
    class: CmdClass,
    keys: KeySpec,
}

/// A command of the table (an index into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cmd(u16);

/// Longest command name in the table, in bytes.
const MAX_NAME: usize = 24;

/// The table's index of `name`, found at compile time.
const fn find(name: &str) -> u16 {
    let mut i = 0;
    while i < TABLE.len() {
        let (a, b) = (TABLE[i].name.as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i as u16;
            }
        }
        i += 1;
    }
    panic!("command not in the table")
}

pub(crate) const GET: Cmd = Cmd(find("GET"));
pub(super) const SET: Cmd = Cmd(find("SET"));

impl Cmd {
    /// Finds a command by name, ignoring ASCII case: one hash and
    /// (almost always) one comparison, on every request's hot path.
    pub fn lookup(name: &[u8]) -> Option<Cmd> {
        // Most requests are GET or SET, as clients write them: no hash.
        match name {
            b"GET" | b"get" => return Some(GET),
            b"SET" | b"set" => return Some(SET),
            _ => {}
        }
        if name.is_empty() || name.len() > MAX_NAME {
            return None;
        }
        let mut up = [0u8; MAX_NAME];
        let up = &mut up[..name.len()];
        up.copy_from_slice(name);
        up.make_ascii_uppercase();
        let index = name_index();
        let mut at = name_hash(up) & (INDEX_SLOTS - 1);
        loop {
            let i = index[at];
            if i == u16::MAX {
                return None;
            }
            if TABLE[usize::from(i)].name.as_bytes() == &*up {
                return Some(Cmd(i));
            }
            at = (at + 1) & (INDEX_SLOTS - 1);
        }
    }

    /// The command's position in the table (for per-command tables).
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    fn entry(self) -> &'static Entry {
        &TABLE[usize::from(self.0)]
    }

    /// The command's name, upper case.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// How the command is routed.
    pub fn class(self) -> CmdClass {
        self.entry().class
    }

    /// Where the command's keys are.
    pub fn keys(self) -> KeySpec {
        self.entry().keys
    }

    /// Whether this command is `name` (upper case).
    pub fn is(self, name: &str) -> bool {
        self.entry().name == name
    }

    /// Every command of the table, in name order.
    pub fn all() -> impl Iterator<Item = Cmd> {
        (0..TABLE.len()).filter_map(|i| u16::try_from(i).ok().map(Cmd))
    }
}

/// Slots of the name index (a power of two, at least 4× the table).
const INDEX_SLOTS: usize = 2048;

/// FNV-1a of an upper-case command name.
fn name_hash(name: &[u8]) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in name {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h as usize
}

/// Open-addressed index of the table by name hash, built once.
fn name_index() -> &'static [u16; INDEX_SLOTS] {
    static INDEX: std::sync::OnceLock<Box<[u16; INDEX_SLOTS]>> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        assert!(TABLE.len() * 4 <= INDEX_SLOTS);
        let mut index = Box::new([u16::MAX; INDEX_SLOTS]);
        for (i, e) in TABLE.iter().enumerate() {
            let mut at = name_hash(e.name.as_bytes()) & (INDEX_SLOTS - 1);
            while index[at] != u16::MAX {
                at = (at + 1) & (INDEX_SLOTS - 1);
            }
            index[at] = i as u16;
        }
        index
    })
}

const fn e(name: &'static str, class: CmdClass, keys: KeySpec) -> Entry {
    Entry { name, class, keys }
}

use CmdClass::{
    Blocking, Broadcast, Eval, Keyless, Local, MGet, MSet, OneServer, PubSub, Scan, Single, SumInt,
    Transaction, Unsupported,
};
use KeySpec::{All, AllButLast, At, FirstTwo, NumKeysAt2, Pairs, Streams};

/// Sorted by name (byte order) for binary search.
const TABLE: &[Entry] = &[
    e("ACL", Unsupported, KeySpec::None),
    e("APPEND", Single, At(1)),
    e("ASKING", Unsupported, KeySpec::None),
    e("AUTH", Local, KeySpec::None),
    e("BGREWRITEAOF", Unsupported, KeySpec::None),
    e("BGSAVE", Unsupported, KeySpec::None),
    e("BITCOUNT", Single, At(1)),
    e("BITFIELD", Single, At(1)),
    e("BITFIELD_RO", Single, At(1)),
    e("BITOP", Single, At(2)),
    e("BITPOS", Single, At(1)),
    e("BLMOVE", Blocking, FirstTwo),
    e("BLMPOP", Blocking, NumKeysAt2),
    e("BLPOP", Blocking, AllButLast),
    e("BRPOP", Blocking, AllButLast),
    e("BRPOPLPUSH", Blocking, AllButLast),
    e("BZMPOP", Blocking, NumKeysAt2),
    e("BZPOPMAX", Blocking, AllButLast),
    e("BZPOPMIN", Blocking, AllButLast),
    e("CLIENT", Local, KeySpec::None),
    e("CLUSTER", Unsupported, KeySpec::None),
    e("COMMAND", Local, KeySpec::None),
    e("CONFIG", Unsupported, KeySpec::None),
    e("COPY", Single, At(1)),
    e("DBSIZE", Broadcast, KeySpec::None),
    e("DEBUG", Unsupported, KeySpec::None),
    e("DECR", Single, At(1)),
    e("DECRBY", Single, At(1)),
    e("DEL", SumInt, All),
    e("DISCARD", Transaction, KeySpec::None),
    e("DUMP", Single, At(1)),
    e("ECHO", Local, KeySpec::None),
    e("EVAL", Eval, KeySpec::Eval),
    e("EVALSHA", Eval, KeySpec::Eval),
    e("EVALSHA_RO", Eval, KeySpec::Eval),
    e("EVAL_RO", Eval, KeySpec::Eval),
    e("EXEC", Transaction, KeySpec::None),
    e("EXISTS", SumInt, All),
    e("EXPIRE", Single, At(1)),
    e("EXPIREAT", Single, At(1)),
    e("EXPIRETIME", Single, At(1)),
    e("FAILOVER", Unsupported, KeySpec::None),
    e("FCALL", Eval, KeySpec::Eval),
    e("FCALL_RO", Eval, KeySpec::Eval),
    e("FLUSHALL", Broadcast, KeySpec::None),
    e("FLUSHDB", Broadcast, KeySpec::None),
    // Every subcommand to every server (a cluster pool's masters): the
    // libraries FCALL needs are then wherever its key lands; LIST, DUMP
    // and STATS answer with the first server's reply.
    e("FUNCTION", Broadcast, KeySpec::None),
    e("GEOADD", Single, At(1)),
    e("GEODIST", Single, At(1)),
    e("GEOHASH", Single, At(1)),
    e("GEOPOS", Single, At(1)),
    e("GEORADIUS", Single, At(1)),
    e("GEORADIUSBYMEMBER", Single, At(1)),
    e("GEORADIUSBYMEMBER_RO", Single, At(1)),
    e("GEORADIUS_RO", Single, At(1)),
    e("GEOSEARCH", Single, At(1)),
    e("GEOSEARCHSTORE", Single, At(1)),
    e("GET", Single, At(1)),
    e("GETBIT", Single, At(1)),
    e("GETDEL", Single, At(1)),
    e("GETEX", Single, At(1)),
    e("GETRANGE", Single, At(1)),
    e("GETSET", Single, At(1)),
    e("HDEL", Single, At(1)),
    e("HELLO", Local, KeySpec::None),
    e("HEXISTS", Single, At(1)),
    e("HEXPIRE", Single, At(1)),
    e("HEXPIREAT", Single, At(1)),
    e("HEXPIRETIME", Single, At(1)),
    e("HGET", Single, At(1)),
    e("HGETALL", Single, At(1)),
    e("HGETDEL", Single, At(1)),
    e("HGETEX", Single, At(1)),
    e("HINCRBY", Single, At(1)),
    e("HINCRBYFLOAT", Single, At(1)),
    e("HKEYS", Single, At(1)),
    e("HLEN", Single, At(1)),
    e("HMGET", Single, At(1)),
    e("HMSET", Single, At(1)),
    e("HPERSIST", Single, At(1)),
    e("HPEXPIRE", Single, At(1)),
    e("HPEXPIREAT", Single, At(1)),
    e("HPEXPIRETIME", Single, At(1)),
    e("HPTTL", Single, At(1)),
    e("HRANDFIELD", Single, At(1)),
    e("HSCAN", Single, At(1)),
    e("HSET", Single, At(1)),
    e("HSETEX", Single, At(1)),
    e("HSETNX", Single, At(1)),
    e("HSTRLEN", Single, At(1)),
    e("HTTL", Single, At(1)),
    e("HVALS", Single, At(1)),
    e("INCR", Single, At(1)),
    e("INCRBY", Single, At(1)),
    e("INCRBYFLOAT", Single, At(1)),
    e("INFO", Broadcast, KeySpec::None),
    e("KEYS", Broadcast, KeySpec::None),
    e("LASTSAVE", Unsupported, KeySpec::None),
    e("LATENCY", Unsupported, KeySpec::None),
    e("LCS", Single, At(1)),
    e("LINDEX", Single, At(1)),
    e("LINSERT", Single, At(1)),
    e("LLEN", Single, At(1)),
    e("LMOVE", Single, At(1)),
    e("LMPOP", Single, At(2)),
    e("LOLWUT", Unsupported, KeySpec::None),
    e("LPOP", Single, At(1)),
    e("LPOS", Single, At(1)),
    e("LPUSH", Single, At(1)),
    e("LPUSHX", Single, At(1)),
    e("LRANGE", Single, At(1)),
    e("LREM", Single, At(1)),
    e("LSET", Single, At(1)),
    e("LTRIM", Single, At(1)),
    // MEMORY USAGE key only (other subcommands are refused, see request.rs).
    e("MEMORY", Single, At(2)),
    e("MGET", MGet, All),
    e("MIGRATE", Unsupported, KeySpec::None),
    e("MODULE", Unsupported, KeySpec::None),
    e("MONITOR", Unsupported, KeySpec::None),
    e("MOVE", Unsupported, KeySpec::None),
    e("MSET", MSet, Pairs),
    e("MSETNX", OneServer, Pairs),
    e("MULTI", Transaction, KeySpec::None),
    e("OBJECT", Single, At(2)),
    e("PERSIST", Single, At(1)),
    e("PEXPIRE", Single, At(1)),
    e("PEXPIREAT", Single, At(1)),
    e("PEXPIRETIME", Single, At(1)),
    e("PFADD", Single, At(1)),
    e("PFCOUNT", Single, At(1)),
    e("PFDEBUG", Single, At(1)),
    e("PFMERGE", Single, At(1)),
    e("PING", Local, KeySpec::None),
    e("PSETEX", Single, At(1)),
    e("PSUBSCRIBE", PubSub, KeySpec::None),
    e("PSYNC", Unsupported, KeySpec::None),
    e("PTTL", Single, At(1)),
    e("PUBLISH", Single, At(1)),
    e("PUBSUB", Broadcast, KeySpec::None),
    e("PUNSUBSCRIBE", PubSub, KeySpec::None),
    e("QUIT", Local, KeySpec::None),
    e("RANDOMKEY", Broadcast, KeySpec::None),
    e("READONLY", Unsupported, KeySpec::None),
    e("READWRITE", Unsupported, KeySpec::None),
    e("RENAME", Single, At(1)),
    e("RENAMENX", Single, At(1)),
    e("REPLICAOF", Unsupported, KeySpec::None),
    e("RESET", Unsupported, KeySpec::None),
    e("RESTORE", Single, At(1)),
    e("ROLE", Unsupported, KeySpec::None),
    e("RPOP", Single, At(1)),
    e("RPOPLPUSH", Single, At(1)),
    e("RPUSH", Single, At(1)),
    e("RPUSHX", Single, At(1)),
    e("SADD", Single, At(1)),
    e("SAVE", Unsupported, KeySpec::None),
    e("SCAN", Scan, KeySpec::None),
    e("SCARD", Single, At(1)),
    // SCRIPT LOAD and FLUSH only (others are refused, see request.rs).
    e("SCRIPT", Broadcast, KeySpec::None),
    e("SDIFF", Single, At(1)),
    e("SDIFFSTORE", Single, At(1)),
    e("SELECT", Local, KeySpec::None),
    e("SET", Single, At(1)),
    e("SETBIT", Single, At(1)),
    e("SETEX", Single, At(1)),
    e("SETNX", Single, At(1)),
    e("SETRANGE", Single, At(1)),
    e("SHUTDOWN", Unsupported, KeySpec::None),
    e("SINTER", Single, At(1)),
    e("SINTERCARD", Single, At(2)),
    e("SINTERSTORE", Single, At(1)),
    e("SISMEMBER", Single, At(1)),
    e("SLAVEOF", Unsupported, KeySpec::None),
    e("SLOWLOG", Unsupported, KeySpec::None),
    e("SMEMBERS", Single, At(1)),
    e("SMISMEMBER", Single, At(1)),
    e("SMOVE", Single, At(1)),
    e("SORT", Single, At(1)),
    e("SORT_RO", Single, At(1)),
    e("SPOP", Single, At(1)),
    e("SPUBLISH", Single, At(1)),
    e("SRANDMEMBER", Single, At(1)),
    e("SREM", Single, At(1)),
    e("SSCAN", Single, At(1)),
    e("SSUBSCRIBE", PubSub, KeySpec::None),
    e("STRALGO", Unsupported, KeySpec::None),
    e("STRLEN", Single, At(1)),
    e("SUBSCRIBE", PubSub, KeySpec::None),
    e("SUBSTR", Single, At(1)),
    e("SUNION", Single, At(1)),
    e("SUNIONSTORE", Single, At(1)),
    e("SUNSUBSCRIBE", PubSub, KeySpec::None),
    e("SWAPDB", Unsupported, KeySpec::None),
    e("SYNC", Unsupported, KeySpec::None),
    e("TIME", Keyless, KeySpec::None),
    e("TOUCH", SumInt, All),
    e("TTL", Single, At(1)),
    e("TYPE", Single, At(1)),
    e("UNLINK", SumInt, All),
    e("UNSUBSCRIBE", PubSub, KeySpec::None),
    e("UNWATCH", Transaction, KeySpec::None),
    e("WAIT", Unsupported, KeySpec::None),
    e("WAITAOF", Unsupported, KeySpec::None),
    e("WATCH", Transaction, All),
    e("XACK", Single, At(1)),
    e("XADD", Single, At(1)),
    e("XAUTOCLAIM", Single, At(1)),
    e("XCLAIM", Single, At(1)),
    e("XDEL", Single, At(1)),
    e("XGROUP", Single, At(2)),
    e("XINFO", Single, At(2)),
    e("XLEN", Single, At(1)),
    e("XPENDING", Single, At(1)),
    e("XRANGE", Single, At(1)),
    e("XREAD", Single, Streams),
    e("XREADGROUP", Single, Streams),
    e("XREVRANGE", Single, At(1)),
    e("XSETID", Single, At(1)),
    e("XTRIM", Single, At(1)),
    e("ZADD", Single, At(1)),
    e("ZCARD", Single, At(1)),
    e("ZCOUNT", Single, At(1)),
    e("ZDIFF", Single, At(2)),
    e("ZDIFFSTORE", Single, At(1)),
    e("ZINCRBY", Single, At(1)),
    e("ZINTER", Single, At(2)),
    e("ZINTERCARD", Single, At(2)),
    e("ZINTERSTORE", Single, At(1)),
    e("ZLEXCOUNT", Single, At(1)),
    e("ZMPOP", Single, At(2)),
    e("ZMSCORE", Single, At(1)),
    e("ZPOPMAX", Single, At(1)),
    e("ZPOPMIN", Single, At(1)),
    e("ZRANDMEMBER", Single, At(1)),
    e("ZRANGE", Single, At(1)),
    e("ZRANGEBYLEX", Single, At(1)),
    e("ZRANGEBYSCORE", Single, At(1)),
    e("ZRANGESTORE", Single, At(1)),
    e("ZRANK", Single, At(1)),
    e("ZREM", Single, At(1)),
    e("ZREMRANGEBYLEX", Single, At(1)),
    e("ZREMRANGEBYRANK", Single, At(1)),
    e("ZREMRANGEBYSCORE", Single, At(1)),
    e("ZREVRANGE", Single, At(1)),
    e("ZREVRANGEBYLEX", Single, At(1)),
    e("ZREVRANGEBYSCORE", Single, At(1)),
    e("ZREVRANK", Single, At(1)),
    e("ZSCAN", Single, At(1)),
    e("ZSCORE", Single, At(1)),
    e("ZUNION", Single, At(2)),
    e("ZUNIONSTORE", Single, At(1)),
];

/// Read-only commands: a cluster replica serves them after `READONLY`,
/// a read-only ACL user may run them.
pub fn is_read_command(name: &str) -> bool {
    matches!(
        name,
        "GET"
            | "MGET"
            | "STRLEN"
            | "GETRANGE"
            | "SUBSTR"
            | "GETBIT"
            | "BITCOUNT"
            | "BITPOS"
            | "EXISTS"
            | "TYPE"
            | "TTL"
            | "PTTL"
            | "EXPIRETIME"
            | "PEXPIRETIME"
            | "DUMP"
            | "HGET"
            | "HMGET"
            | "HGETALL"
            | "HKEYS"
            | "HVALS"
            | "HLEN"
            | "HEXISTS"
            | "HSTRLEN"
            | "HRANDFIELD"
            | "HSCAN"
            | "LRANGE"
            | "LINDEX"
            | "LLEN"
            | "LPOS"
            | "SMEMBERS"
            | "SISMEMBER"
            | "SMISMEMBER"
            | "SCARD"
            | "SRANDMEMBER"
            | "SSCAN"
            | "SINTER"
            | "SUNION"
            | "SDIFF"
            | "SINTERCARD"
            | "ZRANGE"
            | "ZRANGEBYSCORE"
            | "ZREVRANGEBYSCORE"
            | "ZRANGEBYLEX"
            | "ZREVRANGEBYLEX"
            | "ZREVRANGE"
            | "ZCARD"
            | "ZSCORE"
            | "ZMSCORE"
            | "ZRANK"
            | "ZREVRANK"
            | "ZCOUNT"
            | "ZLEXCOUNT"
            | "ZSCAN"
            | "ZRANDMEMBER"
            | "PFCOUNT"
            | "GEOPOS"
            | "GEODIST"
            | "GEOHASH"
            | "GEOSEARCH"
            | "XRANGE"
            | "XREVRANGE"
            | "XLEN"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_names_fit() {
        for w in TABLE.windows(2) {
            assert!(w[0].name < w[1].name, "{} !< {}", w[0].name, w[1].name);
        }
        for e in TABLE {
            assert!(e.name.len() <= MAX_NAME);
            assert_eq!(e.name, e.name.to_ascii_uppercase());
        }
    }

    #[test]
    fn every_command_is_found_by_its_name_in_any_case() {
        for (i, e) in TABLE.iter().enumerate() {
            assert_eq!(Cmd::lookup(e.name.as_bytes()).map(Cmd::index), Some(i));
            let lower = e.name.to_ascii_lowercase();
            assert_eq!(Cmd::lookup(lower.as_bytes()).map(Cmd::index), Some(i));
        }
        for miss in [
            &b""[..],
            b"GE",
            b"GETT",
            b"X",
            b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert!(Cmd::lookup(miss).is_none());
        }
    }

    #[test]
    fn lookup_ignores_case() {
        let get = Cmd::lookup(b"gEt").unwrap();
        assert_eq!(get.name(), "GET");
        assert_eq!(get.class(), CmdClass::Single);
        assert_eq!(Cmd::lookup(b"bitop").unwrap().keys(), KeySpec::At(2));
        assert_eq!(Cmd::lookup(b"MSET").unwrap().keys(), KeySpec::Pairs);
        assert_eq!(Cmd::lookup(b"evalsha").unwrap().class(), CmdClass::Eval);
        assert!(Cmd::lookup(b"nosuchcommand").is_none());
        assert!(Cmd::lookup(b"").is_none());
        assert!(Cmd::lookup(&[b'A'; 100]).is_none());
        for c in Cmd::all() {
            assert_eq!(
                Cmd::lookup(c.name().to_ascii_lowercase().as_bytes()),
                Some(c)
            );
        }
    }
}
