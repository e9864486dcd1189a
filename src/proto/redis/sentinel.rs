//! Redis Sentinel on the wire: what walnut asks a sentinel and reads from
//! it to follow the master of each shard of a plain pool.
//!
//! One connection per sentinel conversation: `SENTINEL
//! get-master-addr-by-name` for every master name, pipelined, then
//! `SUBSCRIBE +switch-master`. The answers come back in that order, then
//! the subscription's confirmation, then one message per failover:
//! `<master name> <old ip> <old port> <new ip> <new port>` (Sentinel's
//! documented event format).

use super::cluster::NodeAddr;
use super::reply::command;
use super::resp::{value, Value};

/// The channel Sentinel announces a promoted master on.
pub const SWITCH_MASTER: &str = "+switch-master";

/// Events that change which replicas can serve reads.
pub const REPLICA_EVENTS: [&str; 3] = ["+sdown", "-sdown", "+slave"];

/// The pipelined requests of one conversation: an optional `AUTH`, the
/// master address of each name, with `replicas` the replicas of each name
/// (`SENTINEL replicas`), then the subscriptions.
pub fn opening(names: &[String], auth: Option<&str>, replicas: bool, out: &mut Vec<u8>) {
    if let Some(pw) = auth {
        command(&[b"AUTH", pw.as_bytes()], out);
    }
    for n in names {
        command(
            &[b"SENTINEL", b"get-master-addr-by-name", n.as_bytes()],
            out,
        );
    }
    let mut sub: Vec<&[u8]> = vec![b"SUBSCRIBE", SWITCH_MASTER.as_bytes()];
    if replicas {
        for n in names {
            command(&[b"SENTINEL", b"replicas", n.as_bytes()], out);
        }
        sub.extend(REPLICA_EVENTS.iter().map(|e| e.as_bytes()));
    }
    command(&sub, out);
}

/// The replicas a `SENTINEL replicas` answer lists that can serve reads:
/// not subjectively or objectively down, not disconnected. `None` when
/// the reply is not such an answer (an error).
pub fn read_replicas(reply: &[u8]) -> Option<Vec<NodeAddr>> {
    let mut at = 0;
    let Value::Array(items) = value(reply, &mut at, 0)? else {
        return None;
    };
    let mut out = Vec::new();
    for item in &items {
        let Value::Array(fields) = item else {
            return None;
        };
        let field = |name: &[u8]| {
            fields.chunks(2).find_map(|kv| match kv {
                [Value::Str(k), Value::Str(v)] if *k == name => Some(*v),
                _ => None,
            })
        };
        let (Some(ip), Some(port)) = (field(b"ip"), field(b"port")) else {
            continue;
        };
        let flags = String::from_utf8_lossy(field(b"flags").unwrap_or_default());
        let down = flags
            .split(',')
            .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
        if let (false, Some(n)) = (down, node(ip, port)) {
            out.push(n);
        }
    }
    Some(out)
}

/// What one reply of the conversation says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A master's address (answer to `get-master-addr-by-name`).
    Master(NodeAddr),
    /// The sentinel does not know the name (a null answer).
    Unknown,
    /// A failover: `name`'s master is now at `to`.
    Switch {
        /// Master name.
        name: String,
        /// The promoted replica.
        to: NodeAddr,
    },
    /// A replica went down, came back or was found ([`REPLICA_EVENTS`]).
    ReplicasChanged,
    /// An error reply (e.g. `-NOAUTH`), with its text.
    Error(String),
    /// Anything else (`+OK`, the subscription's confirmation).
    Other,
}

/// Read one whole reply (its bytes, as `parse_response` delimited them).
pub fn read(reply: &[u8]) -> Said {
    if let Some(e) = reply.strip_prefix(b"-") {
        return Said::Error(String::from_utf8_lossy(e).trim_end().to_string());
    }
    if reply.starts_with(b"*-1") || reply.starts_with(b"$-1") || reply.starts_with(b"_") {
        // A null: the name is not one this sentinel monitors.
        return Said::Unknown;
    }
    let mut at = 0;
    match value(reply, &mut at, 0) {
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::Str(host), Value::Str(port)] => {
                node(host, port).map_or(Said::Other, Said::Master)
            }
            [Value::Str(kind), Value::Str(channel), Value::Str(msg)]
                if *kind == b"message" && *channel == SWITCH_MASTER.as_bytes() =>
            {
                switch(msg).unwrap_or(Said::Other)
            }
            [Value::Str(kind), Value::Str(channel), Value::Str(_)]
                if *kind == b"message"
                    && REPLICA_EVENTS.iter().any(|e| e.as_bytes() == *channel) =>
            {
                Said::ReplicasChanged
            }
            _ => Said::Other,
        },
        _ => Said::Other,
    }
}

/// `<name> <old ip> <old port> <new ip> <new port>`.
fn switch(msg: &[u8]) -> Option<Said> {
    let text = std::str::from_utf8(msg).ok()?;
    let parts: Vec<&str> = text.split(' ').collect();
    let [name, _, _, ip, port] = parts.as_slice() else {
        return None;
    };
    Some(Said::Switch {
        name: (*name).to_string(),
        to: node(ip.as_bytes(), port.as_bytes())?,
    })
}

fn node(host: &[u8], port: &[u8]) -> Option<NodeAddr> {
    Some(NodeAddr {
        host: std::str::from_utf8(host).ok()?.to_string(),
        port: std::str::from_utf8(port).ok()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(host: &str, port: u16) -> NodeAddr {
        NodeAddr {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn the_opening_is_pipelined_in_order() {
        let mut out = Vec::new();
        opening(&["a".into(), "b".into()], Some("pw"), false, &mut out);
        assert_eq!(
            out,
            b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n\
*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$1\r\na\r\n\
*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$1\r\nb\r\n\
*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n"
                .to_vec()
        );
    }

    #[test]
    fn replicas_that_can_serve_reads() {
        let mut out = Vec::new();
        opening(&["a".into()], None, true, &mut out);
        assert!(out.ends_with(
            b"*3\r\n$8\r\nSENTINEL\r\n$8\r\nreplicas\r\n$1\r\na\r\n\
*5\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n$6\r\n+sdown\r\n$6\r\n-sdown\r\n$6\r\n+slave\r\n"
        ));
        let reply = b"*2\r\n\
*6\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n$4\r\n6380\r\n$5\r\nflags\r\n$5\r\nslave\r\n\
*6\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n$4\r\n6381\r\n$5\r\nflags\r\n$12\r\ns_down,slave\r\n";
        assert_eq!(read_replicas(reply), Some(vec![at("127.0.0.1", 6380)]));
        assert_eq!(read_replicas(b"*0\r\n"), Some(vec![]));
        assert_eq!(
            read_replicas(b"-ERR No such master with that name\r\n"),
            None
        );
        assert_eq!(
            read(b"*3\r\n$7\r\nmessage\r\n$6\r\n+sdown\r\n$5\r\nslave\r\n"),
            Said::ReplicasChanged
        );
    }

    #[test]
    fn answers_and_events() {
        assert_eq!(
            read(b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n"),
            Said::Master(at("127.0.0.1", 6380))
        );
        assert_eq!(read(b"*-1\r\n"), Said::Unknown);
        assert_eq!(read(b"$-1\r\n"), Said::Unknown);
        assert_eq!(
            read(b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$31\r\nshard1 127.0.0.1 6379 ::1 26380\r\n"),
            Said::Switch {
                name: "shard1".into(),
                to: at("::1", 26380)
            }
        );
        assert_eq!(
            read(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"),
            Said::Other
        );
        assert_eq!(
            read(b"-NOAUTH Authentication required.\r\n"),
            Said::Error("NOAUTH Authentication required.".into())
        );
        // Malformed events are ignored, not trusted.
        assert_eq!(
            read(b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$8\r\nshard1 x\r\n"),
            Said::Other
        );
        assert_eq!(read(b"*2\r\n$1\r\nh\r\n$5\r\n99999\r\n"), Said::Other);
    }
}
