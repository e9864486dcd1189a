//! Redis commands over a pool's whole keyspace: sent to every server (a
//! cluster pool's every master) and merged (DBSIZE, KEYS, RANDOMKEY, INFO,
//! PUBSUB, FLUSHALL/FLUSHDB behind `allow_flush`, SCRIPT), or walked
//! server by server (SCAN), and memcached's `flush_all`.

use super::conn::{Fragment, Multi, MultiMode, ReplySlot};
use super::pool::PoolRt;
use super::send_plan::{NotSent, SendPlan, Write};
use crate::proto::{Op, Request};

/// What becomes of a request for every server in a pool.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Broadcast {
    /// Answered here: the refusal (empty: a memcached `noreply` refusal,
    /// nothing to write).
    Refused(Vec<u8>),
    /// Sent to each of `targets`, one fragment each; `info`: Redis INFO,
    /// each server's default sections merged into walnut's own answer
    /// with the pool's client count (`proto::redis::info`), else the
    /// replies merged as a broadcast's.
    Send { targets: Vec<usize>, info: bool },
}

/// Where a client's SCAN goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scan {
    /// Answered here: its cursor is not a number.
    Refused(&'static [u8]),
    /// Sent to `server` as `out`: the client's request with the cursor
    /// that server gave.
    Send { server: usize, out: Vec<u8> },
}

/// What a pool lets go to every server, and the servers a SCAN walks.
impl PoolRt {
    /// A request for every server: refused (memcached's only broadcast,
    /// flush_all, is opt-in per pool: `allow_flush`; a Redis command as
    /// `broadcast_refused` says), else the servers it goes to: a cluster
    /// pool's every master (its keyspace), every node for SCRIPT; other
    /// pools' configured servers (not those a migration keeps for pulls).
    pub(super) fn broadcast(&self, req: &Request) -> Broadcast {
        if let Op::Mc(op) = req.op {
            if !self.cfg.allow_flush {
                return Broadcast::Refused(crate::proto::memcache::flush_refused(op, req.noreply));
            }
        }
        if let Some(refused) = self.broadcast_refused(req.op) {
            let mut out = Vec::new();
            crate::proto::redis::error_reply(&refused, &mut out);
            return Broadcast::Refused(out);
        }
        let targets: Vec<usize> = match &self.cluster {
            Some(_) if matches!(req.op, Op::Redis(op) if op.cmd.is("SCRIPT")) => {
                (0..self.servers.len()).collect()
            }
            Some(c) => c.masters(),
            None => (0..self.cfg.servers.len()).collect(),
        };
        let info = matches!(req.op, Op::Redis(op) if op.cmd.is("INFO"));
        Broadcast::Send { targets, info }
    }

    /// How a request for every server is sent (`broadcast`): one fragment
    /// per server, merged as a broadcast's, or for INFO each server asked
    /// its default sections, merged into walnut's own answer with the
    /// pool's client count (`clients`, asked only then); a refusal is
    /// answered here.
    pub(super) fn broadcast_plan(
        &self,
        req: &Request,
        clients: impl FnOnce() -> u64,
    ) -> Result<SendPlan, NotSent> {
        let (targets, info) = match self.broadcast(req) {
            Broadcast::Refused(out) => return Err(NotSent::Answered(out)),
            Broadcast::Send { targets, info } => (targets, info),
        };
        let n = targets.len();
        let (mode, write) = if info {
            let figures = crate::proto::redis::info::ProxyFigures {
                connected_clients: clients(),
            };
            let own = Write::Bytes(crate::proto::redis::info::INFO.into());
            (MultiMode::Info(figures), own)
        } else {
            (MultiMode::Broadcast, Write::Raw)
        };
        let slot = ReplySlot {
            multi: Some(Box::new(Multi {
                req: req.clone(),
                bytes: Vec::new(),
                frags: (0..n).map(|_| Fragment::default()).collect(),
                remaining: n,
                error: None,
                mode,
            })),
            ..ReplySlot::default()
        };
        Ok(SendPlan::each(slot, targets, write))
    }

    /// Why a Redis command for every server is refused in this pool, if it is.
    fn broadcast_refused(&self, op: Op) -> Option<String> {
        let Op::Redis(op) = op else {
            return None;
        };
        let cfg = &self.cfg;
        let name = op.cmd.name();
        if name == "SCRIPT" {
            return None;
        }
        match name {
            "FLUSHALL" | "FLUSHDB" if !cfg.allow_flush => Some(format!(
                "{name} is refused by the proxy: pool '{}' needs 'allow_flush: true'",
                cfg.name
            )),
            "KEYS" if !cfg.allow_keys => Some(format!(
                "KEYS is refused by the proxy (it blocks every server while it walks every key; use SCAN): pool '{}' needs 'allow_keys: true'",
                cfg.name
            )),
            _ => None,
        }
    }

    /// Where a SCAN (`bytes`) goes: the client's cursor names the server,
    /// its place in the walk (`scan_walk`), and the cursor there
    /// (`proto::redis::keyspace`).
    pub(super) fn scan(&self, bytes: &[u8]) -> Scan {
        use crate::proto::redis::keyspace;
        let Some(cursor) = keyspace::scan_cursor(bytes) else {
            return Scan::Refused(keyspace::INVALID_CURSOR);
        };
        let walk = self.scan_walk();
        let (nth, there) = keyspace::scan_split(cursor, walk.len());
        Scan::Send {
            server: walk.get(nth).copied().unwrap_or(0),
            out: keyspace::scan_request(bytes, there),
        }
    }

    /// How a SCAN (`bytes`) is sent (`scan`): whole to the server its
    /// cursor names, with that server's cursor; refused here when its
    /// cursor is not a number.
    pub(super) fn scan_plan(&self, bytes: &[u8]) -> Result<SendPlan, NotSent> {
        match self.scan(bytes) {
            Scan::Refused(out) => Err(NotSent::Answered(out.to_vec())),
            Scan::Send { server, out } => Ok(SendPlan::whole(
                ReplySlot::default(),
                server,
                Write::Bytes(out.into()),
            )),
        }
    }

    /// `server`'s reply to a SCAN, with the cursor the client is given
    /// (naming the server and its cursor there); `None` for other replies.
    pub(super) fn scan_reply(&self, server: usize, op: Op, bytes: &[u8]) -> Option<Vec<u8>> {
        match op {
            Op::Redis(op) if op.class == crate::proto::redis::CmdClass::Scan => {
                let walk = self.scan_walk();
                let nth = walk.iter().position(|&s| s == server)?;
                crate::proto::redis::keyspace::scan_reply(bytes, nth, walk.len())
            }
            _ => None,
        }
    }

    /// The servers a SCAN walks, in turn: the configured ones (not those a
    /// migration keeps for pulls); a cluster pool's masters, in server
    /// order (a failover during the walk can repeat or skip a node's keys).
    pub(super) fn scan_walk(&self) -> Vec<usize> {
        match &self.cluster {
            Some(c) => c.masters(),
            None => (0..self.cfg.servers.len()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proto::{Limits, Parse, Protocol};
    use std::path::Path;

    fn pool(yaml: &str) -> PoolRt {
        let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    const RD: &str = "rd:\n  listen: 127.0.0.1:22994\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 a\n    - 127.0.0.1:6380:1 b\n    - 127.0.0.1:6381:1 c\n";

    fn redis(args: &[&str]) -> Request {
        let mut b = format!("*{}\r\n", args.len());
        for a in args {
            b.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        match crate::proto::redis::parse_request(b.as_bytes(), &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn mc(b: &[u8]) -> Request {
        match Protocol::Memcache.parse_request(b, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    fn refused(b: &Broadcast) -> String {
        match b {
            Broadcast::Refused(out) => String::from_utf8_lossy(out).into_owned(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn every_configured_server() {
        let p = pool(RD);
        let all = vec![0, 1, 2];
        for cmd in [&["DBSIZE"][..], &["SCRIPT", "FLUSH"], &["RANDOMKEY"]] {
            assert_eq!(
                p.broadcast(&redis(cmd)),
                Broadcast::Send {
                    targets: all.clone(),
                    info: false
                },
                "{cmd:?}"
            );
        }
        assert_eq!(
            p.broadcast(&redis(&["INFO"])),
            Broadcast::Send {
                targets: all,
                info: true
            }
        );
    }

    #[test]
    fn flush_and_keys_only_when_allowed() {
        let p = pool(RD);
        assert!(refused(&p.broadcast(&redis(&["FLUSHALL"]))).contains("allow_flush: true"));
        assert!(refused(&p.broadcast(&redis(&["KEYS", "*"]))).contains("allow_keys: true"));
        let open = pool(&format!("{RD}  allow_flush: true\n  allow_keys: true\n"));
        for cmd in [&["FLUSHDB"][..], &["KEYS", "*"]] {
            assert!(matches!(
                open.broadcast(&redis(cmd)),
                Broadcast::Send { .. }
            ));
        }
    }

    #[test]
    fn memcached_flush_all_is_opt_in() {
        let yaml = "mc:\n  listen: 127.0.0.1:22993\n  servers:\n    - 127.0.0.1:11211:1 a\n    - 127.0.0.1:11212:1 b\n";
        let p = pool(yaml);
        assert!(!refused(&p.broadcast(&mc(b"flush_all\r\n"))).is_empty());
        // noreply: refused without a word.
        assert_eq!(refused(&p.broadcast(&mc(b"flush_all noreply\r\n"))), "");
        let open = pool(&format!("{yaml}  allow_flush: true\n"));
        assert_eq!(
            open.broadcast(&mc(b"flush_all\r\n")),
            Broadcast::Send {
                targets: vec![0, 1],
                info: false
            }
        );
    }

    #[test]
    fn a_scan_goes_to_the_server_its_cursor_names_with_that_servers_cursor() {
        let p = pool(RD);
        let scan = |cursor: &str| {
            let req = format!(
                "*4\r\n$4\r\nSCAN\r\n${}\r\n{cursor}\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n",
                cursor.len()
            );
            p.scan(req.as_bytes())
        };
        let to = |server: usize, there: &str| Scan::Send {
            server,
            out: format!(
                "*4\r\n$4\r\nSCAN\r\n${}\r\n{there}\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n",
                there.len()
            )
            .into_bytes(),
        };
        assert_eq!(scan("0"), to(0, "0"), "the walk starts on the first server");
        // Three servers: cursor 3 * 7 + 2 is the third's cursor 7.
        assert_eq!(scan("23"), to(2, "7"));
        assert_eq!(scan("x"), Scan::Refused(b"-ERR invalid cursor\r\n"));
    }

    #[test]
    fn a_scan_is_sent_whole_with_its_servers_cursor_or_answered_here() {
        let p = pool(RD);
        let req = b"*2\r\n$4\r\nSCAN\r\n$2\r\n23\r\n";
        let plan = p.scan_plan(req).expect("sent");
        assert_eq!((plan.servers(), plan.frag), (vec![2], None));
        let out = b"*2\r\n$4\r\nSCAN\r\n$1\r\n7\r\n";
        assert_eq!(plan.write, Write::Bytes(out.to_vec().into()));
        assert!(plan.slot.is_some_and(|s| s.multi.is_none()));
        let bad = b"*2\r\n$4\r\nSCAN\r\n$1\r\nx\r\n";
        assert_eq!(
            p.scan_plan(bad).unwrap_err(),
            NotSent::Answered(b"-ERR invalid cursor\r\n".to_vec())
        );
    }

    #[test]
    fn a_broadcast_is_a_fragment_per_server_and_info_asks_the_client_count_only_for_itself() {
        let p = pool(RD);
        let asked = std::cell::Cell::new(false);
        let clients = || {
            asked.set(true);
            3
        };
        let dbsize = p
            .broadcast_plan(&redis(&["DBSIZE"]), clients)
            .expect("sent");
        assert!(!asked.get());
        assert_eq!((dbsize.servers(), dbsize.frag), (vec![0, 1, 2], Some(0)));
        assert_eq!(dbsize.write, Write::Raw);
        let m = dbsize.slot.and_then(|s| s.multi).expect("merged");
        assert_eq!((m.frags.len(), m.remaining), (3, 3));
        assert_eq!(m.mode, MultiMode::Broadcast);
        let clients = || {
            asked.set(true);
            3
        };
        let info = p.broadcast_plan(&redis(&["INFO"]), clients).expect("sent");
        assert!(asked.get());
        let own = crate::proto::redis::info::INFO;
        assert_eq!(info.write, Write::Bytes(own.into()));
        let m = info.slot.and_then(|s| s.multi).expect("merged");
        assert!(matches!(m.mode, MultiMode::Info(f) if f.connected_clients == 3));
        assert!(matches!(
            p.broadcast_plan(&redis(&["KEYS", "*"]), || 0),
            Err(NotSent::Answered(out)) if !out.is_empty()
        ));
    }
}
