//! Redis Cluster on the wire: a key's hash slot, the `CLUSTER SLOTS`
//! reply, and the `-MOVED` / `-ASK` redirections.

use super::resp::{value, Value};
use super::{Cmd, RedisOp};
use crate::proto::Op;

/// An operation to parse the reply of a command of the proxy's own on a
/// cluster node (`CLUSTER SLOTS`, `ASKING`): read as a PING's.
pub fn internal_op() -> Option<Op> {
    let cmd = Cmd::lookup(b"PING")?;
    Some(Op::Redis(RedisOp {
        cmd,
        class: cmd.class(),
    }))
}

/// Number of hash slots of a Redis Cluster.
pub const SLOTS: usize = 16384;

/// The hash slot of `key`: CRC16-XMODEM of the key (or of its hash tag,
/// the bytes between the first `{` and the next `}` when not empty) modulo
/// 16384, as Redis Cluster computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        match rest.iter().position(|&b| b == b'}') {
            Some(0) | None => None,
            Some(close) => Some(&rest[..close]),
        }
    });
    // twemproxy's crc16 keeps the bits shifted out above bit 15; the low
    // 16 bits are CRC16-XMODEM.
    (crate::hash::crc16::hash(tagged.unwrap_or(key)) & 0x3fff) as u16
}

/// A node address in a cluster reply: host (may be empty: "the node you
/// asked") and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// Host or IP as the cluster announces it.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// One range of slots of a `CLUSTER SLOTS` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// The master serving the range.
    pub master: NodeAddr,
    /// Its replicas.
    pub replicas: Vec<NodeAddr>,
}

/// A redirection in an error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// `ASK` (one request, map unchanged) rather than `MOVED`.
    pub ask: bool,
    /// The slot.
    pub slot: u16,
    /// Where it is served.
    pub to: NodeAddr,
}

impl Redirect {
    /// `ASK` or `MOVED`.
    pub fn name(&self) -> &'static str {
        if self.ask {
            "ASK"
        } else {
            "MOVED"
        }
    }
}

/// `ASKING`, sent before a request redirected to a node.
pub const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
/// `CLUSTER SLOTS`, asked for the slot map.
pub const CLUSTER_SLOTS: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
/// What a cluster node answers a request whose keys are on several slots.
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";

/// What a cluster node's error reply asks of the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterError {
    /// `-TRYAGAIN`: a multi-key request on a slot half migrated; send it
    /// again a little later.
    TryAgain,
    /// `-CLUSTERDOWN`: the node's view of the cluster is changing (a
    /// failover): ask for a new map and send it again.
    Down,
    /// `-MOVED` / `-ASK`: send it to another node.
    Redirect(Redirect),
}

/// Reads an error reply of a cluster node; `None` for an error that is
/// the request's own (passed on to the client).
pub fn cluster_error(reply: &[u8]) -> Option<ClusterError> {
    if reply.starts_with(b"-TRYAGAIN") {
        Some(ClusterError::TryAgain)
    } else if reply.starts_with(b"-CLUSTERDOWN") {
        Some(ClusterError::Down)
    } else {
        parse_redirect(reply).map(ClusterError::Redirect)
    }
}

/// `-MOVED <slot> <host>:<port>` or `-ASK <slot> <host>:<port>`, if `reply` is one.
pub fn parse_redirect(reply: &[u8]) -> Option<Redirect> {
    let (ask, rest) = if let Some(r) = reply.strip_prefix(b"-MOVED ") {
        (false, r)
    } else if let Some(r) = reply.strip_prefix(b"-ASK ") {
        (true, r)
    } else {
        return None;
    };
    let line = std::str::from_utf8(rest).ok()?.trim_end();
    let (slot, addr) = line.split_once(' ')?;
    let slot: u16 = slot.parse().ok().filter(|s| (*s as usize) < SLOTS)?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(Redirect {
        ask,
        slot,
        to: NodeAddr {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port: port.parse().ok()?,
        },
    })
}

fn node(v: &Value<'_>) -> Option<NodeAddr> {
    let Value::Array(items) = v else {
        return None;
    };
    let host = match items.first()? {
        Value::Str(s) => String::from_utf8_lossy(s).into_owned(),
        _ => String::new(),
    };
    let port = match items.get(1)? {
        Value::Int(p) => u16::try_from(*p).ok()?,
        _ => return None,
    };
    Some(NodeAddr {
        host: if host == "?" { String::new() } else { host },
        port,
    })
}

/// The slot ranges of a `CLUSTER SLOTS` reply (RESP2 or RESP3), or `None`
/// if the reply is not one (an error, e.g. cluster support disabled).
pub fn parse_slots(reply: &[u8]) -> Option<Vec<SlotRange>> {
    let mut at = 0;
    let Value::Array(ranges) = value(reply, &mut at, 0)? else {
        return None;
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in &ranges {
        let Value::Array(items) = r else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end))) = (items.first(), items.get(1)) else {
            return None;
        };
        let start = u16::try_from(*start)
            .ok()
            .filter(|s| (*s as usize) < SLOTS)?;
        let end = u16::try_from(*end)
            .ok()
            .filter(|e| (*e as usize) < SLOTS && *e >= start)?;
        let master = node(items.get(2)?)?;
        let replicas = items[3..].iter().filter_map(node).collect();
        out.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_errors() {
        assert_eq!(
            cluster_error(b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"),
            Some(ClusterError::TryAgain)
        );
        assert_eq!(
            cluster_error(b"-CLUSTERDOWN The cluster is down\r\n"),
            Some(ClusterError::Down)
        );
        match cluster_error(b"-ASK 3999 127.0.0.1:6381\r\n") {
            Some(ClusterError::Redirect(r)) => assert_eq!((r.name(), r.slot), ("ASK", 3999)),
            other => panic!("{other:?}"),
        }
        match cluster_error(b"-MOVED 1 [::1]:7000\r\n") {
            Some(ClusterError::Redirect(r)) => assert_eq!((r.name(), r.to.port), ("MOVED", 7000)),
            other => panic!("{other:?}"),
        }
        assert_eq!(cluster_error(b"-ERR wrong kind\r\n"), None);
        assert_eq!(cluster_error(b"-WRONGTYPE Operation\r\n"), None);
    }

    #[test]
    fn commands_sent() {
        let mut o = Vec::new();
        crate::proto::redis::reply::command(&[b"ASKING"], &mut o);
        assert_eq!(o, ASKING);
        o.clear();
        crate::proto::redis::reply::command(&[b"CLUSTER", b"SLOTS"], &mut o);
        assert_eq!(o, CLUSTER_SLOTS);
        assert!(CROSSSLOT.starts_with(b"-CROSSSLOT ") && CROSSSLOT.ends_with(b"\r\n"));
    }

    #[test]
    fn slots_as_redis_computes_them() {
        // Values from CLUSTER KEYSLOT on a Redis 7 node.
        assert_eq!(crate::hash::crc16::hash(b"123456789") & 0xffff, 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b""), 0);
        // Hash tags: the first '{' and the next '}', non-empty content.
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"no{close"), key_slot(b"no{close"));
    }

    #[test]
    fn redirects() {
        assert_eq!(
            parse_redirect(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(Redirect {
                ask: false,
                slot: 3999,
                to: NodeAddr {
                    host: "127.0.0.1".into(),
                    port: 6381
                }
            })
        );
        let r = parse_redirect(b"-ASK 1 ::1:7000\r\n").unwrap();
        assert!(r.ask && r.slot == 1 && r.to.host == "::1" && r.to.port == 7000);
        let r = parse_redirect(b"-MOVED 5 :7000\r\n").unwrap();
        assert!(r.to.host.is_empty() && r.to.port == 7000);
        assert_eq!(parse_redirect(b"-ERR MOVED 1 a:1\r\n"), None);
        assert_eq!(parse_redirect(b"-MOVED 16384 a:1\r\n"), None);
        assert_eq!(parse_redirect(b"-MOVED x a:1\r\n"), None);
        assert_eq!(parse_redirect(b"-MOVED 1 a\r\n"), None);
    }

    #[test]
    fn cluster_slots_reply() {
        let reply = b"*2\r\n\
*4\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:30001\r\n$4\r\nid01\r\n*0\r\n\
*3\r\n$9\r\n127.0.0.1\r\n:30004\r\n$4\r\nid04\r\n\
*3\r\n:5461\r\n:16383\r\n*3\r\n$0\r\n\r\n:30002\r\n$4\r\nid02\r\n";
        let r = parse_slots(reply).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].start, r[0].end), (0, 5460));
        assert_eq!(r[0].master.port, 30001);
        assert_eq!(r[0].replicas.len(), 1);
        assert_eq!(r[0].replicas[0].port, 30004);
        assert_eq!((r[1].start, r[1].end), (5461, 16383));
        assert!(r[1].master.host.is_empty() && r[1].master.port == 30002);
        assert!(r[1].replicas.is_empty());
        assert_eq!(
            parse_slots(b"-ERR This instance has cluster support disabled\r\n"),
            None
        );
        assert_eq!(
            parse_slots(b"*1\r\n*3\r\n:9\r\n:1\r\n*2\r\n$1\r\na\r\n:1\r\n"),
            None
        );
        assert_eq!(parse_slots(b"*0\r\n"), Some(vec![]));
    }
}
