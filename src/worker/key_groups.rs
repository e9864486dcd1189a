//! Where a request's keys go in a pool: grouped by server (or, in a
//! Redis Cluster pool, by slot) for a split, whether the keys of a command
//! that runs on one server live apart, the server of a command without a
//! key, and of a request sent on a connection of its own; what a split
//! request becomes once grouped (`Split`), and where a failed fragment's
//! keys go next in a replicated pool (`next_replicas`). Questions of the
//! pool's placement, asked by the executors (`forward.rs`, `blocking.rs`,
//! `stream.rs`).

use super::conn::zone_tag;
use super::conn::{Multi, MultiMode, ReadBytes, ReplySlot, Retry};
use super::forward::{NotSent, SendPlan, Write};
use super::pool::PoolRt;
use crate::proto::redis::CmdClass;
use crate::proto::{Op, Request};
use smallvec::SmallVec;
use std::time::Instant;

/// A split request's key indices per server: (server, indices in client
/// order), in the order the servers first appear.
pub(super) type KeyGroups = SmallVec<[(usize, Vec<usize>); 4]>;

/// Key `i` goes to server `s`: into its group, or a new group with room
/// for the `left` keys from `i` on (one allocation per group, not a
/// growth per few keys).
#[inline]
pub(super) fn add_key(groups: &mut KeyGroups, s: usize, i: usize, left: usize) {
    match groups.iter_mut().find(|(gs, _)| *gs == s) {
        Some((_, v)) => v.push(i),
        None => {
            let mut v = Vec::with_capacity(left);
            v.push(i);
            groups.push((s, v));
        }
    }
}

/// What a split request (`proto::Route::Multi`) does once its keys are
/// grouped by server.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Split {
    /// Refused with this reply: only one server can promise what the
    /// command does (MSETNX, a blocking pop over keys, ...), and its keys
    /// live on several.
    Refused(Vec<u8>),
    /// Sent as a single-key request: its keys are on one server.
    Whole,
    /// One fragment per group, the replies merged.
    Fragments,
}

/// The servers a request for a key several servers hold goes to, and
/// how (`PoolRt::replicas`, `replica_read`, `zone_owners`): the worker
/// sends it as this says (`Worker::send_owners`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owners {
    /// A read: to the first, the others kept to fail over to in order.
    Read(Vec<usize>),
    /// A write: to every one, answered with the first success once all
    /// have answered.
    Write(Vec<usize>),
    /// A zone pool's `async` write: to every zone, answered by the local
    /// zone, or by the next that succeeds when it fails.
    ZoneWrite(Vec<usize>),
}

/// Where a request for one server goes (`PoolRt::place`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// To this server.
    Server(usize),
    /// Refused with this reply: a command that runs on one server names
    /// keys that live apart (`keys_apart`).
    Apart(Vec<u8>),
    /// No server to go to (every one ejected).
    NoServer,
}

impl PoolRt {
    /// `replicas: n`: the servers of `req`'s key on the ring (the ring
    /// rebuilt first if an ejection's time is up); a memcached read goes
    /// to one after another, anything else to every one.
    pub(super) fn replicas(&mut self, req: &Request, bytes: &[u8], now: Instant) -> Owners {
        let key = req.routing_key(bytes);
        let key = key.as_ref();
        let _ = self.server_for(key, now);
        let r = self.cfg.replicas as usize;
        let mut replicas = Vec::with_capacity(r);
        self.placement.replicas_for(key, r, &mut replicas);
        if matches!(req.op, Op::Mc(op) if op.is_read()) {
            Owners::Read(replicas)
        } else {
            Owners::Write(replicas)
        }
    }

    /// A Sentinel pool's single-key read: to a replica of its key's
    /// master that is up, by `read_from` and the client (`read_order`),
    /// the master kept to fail over to. `None` when the master serves it
    /// (not a read, no replica up, or `read_from` picked the master).
    pub(super) fn replica_read(
        &mut self,
        req: &Request,
        bytes: &[u8],
        client_id: u64,
        now: Instant,
    ) -> Option<Owners> {
        let Op::Redis(op) = req.op else {
            return None;
        };
        if req.keys.is_empty() || !crate::proto::redis::commands::is_read_command(op.cmd.name()) {
            return None;
        }
        let key = req.routing_key(bytes);
        let master = self.server_for(key.as_ref(), now)?;
        self.read_order(master, client_id, now).map(Owners::Read)
    }

    /// How a request for a key the servers `owners` hold is sent: as a
    /// read (`replicated_read`), a write (`replicated_write`) or a zone
    /// pool's `async` write (`zone_write`) says. `NoServer` when there is
    /// none.
    pub(super) fn owners_plan(
        &self,
        owners: Owners,
        req: &Request,
        bytes: &[u8],
        client_id: u64,
    ) -> Result<SendPlan, NotSent> {
        match owners {
            Owners::Read(s) => self.replicated_read(req, bytes, s, client_id),
            Owners::Write(s) => self.replicated_write(req, s),
            Owners::ZoneWrite(s) => self.zone_write(req, s),
        }
        .ok_or(NotSent::NoServer)
    }

    /// A read of a key the servers `replicas` hold (`Owners::Read`): to
    /// the first, the others kept in the slot to fail over to in order
    /// (`replica_read_random`: turned by the time and the client, so
    /// clients spread over them). `None`: no server.
    pub(super) fn replicated_read(
        &self,
        req: &Request,
        bytes: &[u8],
        mut replicas: Vec<usize>,
        client_id: u64,
    ) -> Option<SendPlan> {
        let first = *replicas.first()?;
        let first = if self.cfg.replica_read_random && replicas.len() > 1 {
            let n = (crate::util::epoch_us() as usize ^ client_id as usize) % replicas.len();
            replicas.rotate_left(n);
            replicas[0]
        } else {
            first
        };
        let slot = ReplySlot {
            retry: Some(Box::new(Retry {
                req: req.clone(),
                bytes: ReadBytes::from_slice(bytes),
                replicas: replicas.into(),
                next: 1,
                on_miss: false,
                learns: false,
                pull_on_miss: false,
            })),
            ..ReplySlot::default()
        };
        Some(SendPlan::whole(slot, first, Write::Request))
    }

    /// A write of a key the servers `replicas` hold (`Owners::Write`): to
    /// every one, a fragment each knowing its server's zone, answered with
    /// the first success. `None`: no server.
    pub(super) fn replicated_write(&self, req: &Request, replicas: Vec<usize>) -> Option<SendPlan> {
        if replicas.is_empty() {
            return None;
        }
        let routing = &self.cfg.routing;
        let zones: SmallVec<[u8; 4]> = replicas.iter().map(|&s| zone_tag(routing, s)).collect();
        let slot = ReplySlot::for_owners(req, &zones, MultiMode::Replicate);
        Some(SendPlan::each(slot, replicas, Write::Request))
    }

    /// The server of `req`, a request for one server: its key's owner, or
    /// for a command without a key (`keyless`) the keyless server;
    /// refused when it names several keys that live apart.
    #[inline]
    pub(super) fn place(
        &mut self,
        req: &Request,
        bytes: &[u8],
        keyless: bool,
        client_id: u64,
        now: Instant,
    ) -> Placed {
        if let Op::Redis(r) = req.op {
            if crate::proto::redis::names_more_keys(r.cmd)
                && self.keys_apart(r.cmd, req, bytes, now)
            {
                let mut out = Vec::new();
                crate::proto::redis::reply::cross_server(r.cmd.name(), false, &mut out);
                return Placed::Apart(out);
            }
        }
        let server = if keyless {
            self.keyless_server(client_id, now)
        } else {
            self.server_for(req.routing_key(bytes).as_ref(), now)
        };
        server.map_or(Placed::NoServer, Placed::Server)
    }

    /// What `req`, its keys in `groups` groups, does: refused when a
    /// one-server command's keys are apart, sent whole when they are on
    /// one server, else split; a replicated pool's split request and a
    /// zone pool's multi-key read stay split even on one server (they fall
    /// over per key).
    pub(super) fn split(&self, req: &Request, groups: usize) -> Split {
        if let Op::Redis(r) = req.op {
            if groups > 1 && matches!(r.class, CmdClass::OneServer | CmdClass::Blocking) {
                let mut out = Vec::new();
                let cluster = self.cluster.is_some();
                crate::proto::redis::reply::cross_server(r.cmd.name(), cluster, &mut out);
                return Split::Refused(out);
            }
        }
        if groups <= 1 && !self.route.keeps_split(req.op) {
            return Split::Whole;
        }
        Split::Fragments
    }

    /// A replicated pool's split read whose fragment `frag` failed: its
    /// keys grouped by their next replica, and the attempt that is. `None`
    /// when they have no further replica (or the request is not a split).
    pub(super) fn next_replicas(&self, m: &Multi, frag: usize) -> Option<(u8, KeyGroups)> {
        let r = self.cfg.replicas as usize;
        let f = m.frags.get(frag)?;
        let attempt = f.attempt as usize + 1;
        if r <= 1 || attempt >= r || m.mode != MultiMode::Split {
            return None;
        }
        let mut replicas = Vec::with_capacity(r);
        let mut groups = KeyGroups::new();
        for &i in &f.keys {
            let Some(range) = m.req.keys.get(i) else {
                continue;
            };
            self.placement
                .replicas_for(&m.bytes[range.clone()], r, &mut replicas);
            add_key(
                &mut groups,
                *replicas.get(attempt)?,
                i,
                m.req.keys.len() - i,
            );
        }
        Some((attempt as u8, groups))
    }

    /// The server a request `op` on `key` goes to when it is sent on a
    /// connection of its own (a blocking command, a streamed request): in
    /// a cluster pool the node of its slot, else the pool's placement
    /// (`None`: no server).
    pub(super) fn key_server(
        &mut self,
        key: &[u8],
        op: crate::proto::Op,
        client_id: u64,
        now: Instant,
    ) -> Option<usize> {
        if self.cluster.is_some() {
            return Some(self.cluster_server(key, op, client_id));
        }
        self.server_for(key, now)
    }

    /// Whether the keys of a command that names several (RENAME, SMOVE,
    /// SUNIONSTORE, BITOP, EVAL, ...) live on different servers. Such a
    /// command runs on one server, which sees only its own keys: routed
    /// by its first key it would answer wrongly without an error (a COPY
    /// to a key of another server, a BITOP over keys it does not hold), so
    /// it is refused, as a Redis Cluster node answers CROSSSLOT.
    pub(super) fn keys_apart(
        &mut self,
        cmd: crate::proto::redis::Cmd,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> bool {
        let keys = crate::proto::redis::command_keys(cmd, req, bytes);
        let mut first = None;
        for k in &keys {
            let s = self.server_for(k, now);
            match first {
                None => first = Some(s),
                Some(f) if f != s => return true,
                Some(_) => {}
            }
        }
        false
    }

    /// The server a Redis command without a key goes to (TIME, EVAL with
    /// numkeys 0): `keyless_server: first` takes the first server of the
    /// list that is not ejected, `random` any of them, per request.
    pub(super) fn keyless_server(&mut self, client_id: u64, now: Instant) -> Option<usize> {
        // Brings back ejected servers whose retry time came, as for a key.
        self.server_for(b"", now)?;
        // The configured servers only (not replicas found at run time).
        let live: SmallVec<[usize; 8]> = (0..self.cfg.servers.len().min(self.servers.len()))
            .filter(|&i| self.servers[i].ejected_until.is_none_or(|t| t <= now))
            .collect();
        if self.cfg.keyless_random && !live.is_empty() {
            let n = (crate::util::epoch_us() ^ client_id.rotate_left(17)) as usize;
            return live.get(n % live.len()).copied();
        }
        live.first().copied()
    }

    /// Key indices grouped by server, in client order; `None` when a key
    /// has no server to go to.
    #[inline]
    pub(super) fn server_groups(
        &mut self,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Option<KeyGroups> {
        let mut groups = KeyGroups::new();
        for (i, r) in req.keys.iter().enumerate() {
            let s = self.server_for(&bytes[r.clone()], now)?;
            add_key(&mut groups, s, i, req.keys.len() - i);
        }
        Some(groups)
    }

    /// A cluster pool's key indices grouped by hash slot (a cluster node
    /// refuses keys of different slots), in client order, each group with
    /// its slot's node.
    pub(super) fn slot_groups(&self, client_id: u64, req: &Request, bytes: &[u8]) -> KeyGroups {
        let mut groups = KeyGroups::new();
        let mut by_slot: std::collections::HashMap<u16, usize> = Default::default();
        for (i, r) in req.keys.iter().enumerate() {
            let key = &bytes[r.clone()];
            let slot = crate::proto::redis::cluster::key_slot(key);
            let g = *by_slot.entry(slot).or_insert_with(|| {
                groups.push((
                    self.cluster_server(key, req.op, client_id),
                    Vec::with_capacity(req.keys.len() - i),
                ));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::proto::{Limits, Parse, Protocol};
    use std::path::Path;

    fn pool(extra: &str) -> PoolRt {
        let yaml = format!(
            "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n{extra}  servers:\n    - 127.0.0.1:6379:1 a\n    - 127.0.0.1:6380:1 b\n    - 127.0.0.1:6381:1 c\n"
        );
        let c = Config::from_str(&yaml, Path::new("t.yml")).expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    fn request(bytes: &[u8]) -> Request {
        match Protocol::Redis.parse_request(bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_grouped_by_server_in_client_order() {
        let mut p = pool("");
        let now = Instant::now();
        let bytes = b"*7\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n";
        let req = request(bytes);
        let groups = p
            .server_groups(&req, bytes, now)
            .expect("every key has a server");
        let mut seen: Vec<usize> = groups.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5], "each key once");
        for (s, keys) in &groups {
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "in client order");
            for &k in keys {
                let key = &bytes[req.keys[k].clone()];
                assert_eq!(p.server_for(key, now), Some(*s));
            }
        }
        let servers: Vec<usize> = groups.iter().map(|(s, _)| *s).collect();
        let mut distinct = servers.clone();
        distinct.dedup();
        assert_eq!(servers, distinct, "one group per server");
    }

    /// A RENAME of two plain keys that `p` places on different servers.
    fn rename_apart(p: &mut PoolRt, now: Instant) -> String {
        let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        let first = p.server_for(names[0].as_bytes(), now);
        let other = names
            .iter()
            .find(|n| p.server_for(n.as_bytes(), now) != first)
            .expect("two keys on different servers");
        format!(
            "*3\r\n$6\r\nRENAME\r\n${}\r\n{}\r\n${}\r\n{}\r\n",
            names[0].len(),
            names[0],
            other.len(),
            other
        )
    }

    #[test]
    fn keys_apart_when_any_two_servers_differ() {
        let mut p = pool("  hash_tag: \"{}\"\n");
        let now = Instant::now();
        // A hash tag puts both keys of a RENAME on one server.
        let together = b"*3\r\n$6\r\nRENAME\r\n$7\r\n{u}:old\r\n$7\r\n{u}:new\r\n";
        let req = request(together);
        let crate::proto::Op::Redis(op) = req.op else {
            panic!()
        };
        assert!(!p.keys_apart(op.cmd, &req, together, now));
        // Some pair of plain keys lives apart on three servers.
        let apart = rename_apart(&mut p, now);
        let req = request(apart.as_bytes());
        assert!(p.keys_apart(op.cmd, &req, apart.as_bytes(), now));
    }

    #[test]
    fn a_keyless_command_goes_to_the_first_server_not_ejected() {
        let mut p = pool("");
        let now = Instant::now();
        assert_eq!(p.keyless_server(7, now), Some(0));
        p.servers[0].ejected_until = Some(now + std::time::Duration::from_secs(30));
        assert_eq!(p.keyless_server(7, now), Some(1));
        let mut r = pool("  keyless_server: random\n");
        let picks: Vec<usize> = (0..50).filter_map(|c| r.keyless_server(c, now)).collect();
        assert!(picks.len() == 50 && picks.iter().all(|&s| s < 3));
    }

    fn groups_of(p: &mut PoolRt, bytes: &[u8]) -> (Request, KeyGroups) {
        let req = request(bytes);
        let groups = p
            .server_groups(&req, bytes, Instant::now())
            .expect("servers");
        (req, groups)
    }

    #[test]
    fn a_split_request_is_refused_sent_whole_or_split() {
        let mut p = pool("  hash_tag: \"{}\"\n");
        // MSETNX runs on one server: its keys together go whole ...
        let (req, g) = groups_of(
            &mut p,
            b"*5\r\n$6\r\nMSETNX\r\n$4\r\n{u}a\r\n$1\r\n1\r\n$4\r\n{u}b\r\n$1\r\n2\r\n",
        );
        assert_eq!(g.len(), 1);
        assert_eq!(p.split(&req, g.len()), Split::Whole);
        // ... apart they are refused as a cluster node would.
        let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        let bulk = |n: &str| format!("${}\r\n{}\r\n", n.len(), n);
        let mut mget = format!("*{}\r\n$4\r\nMGET\r\n", names.len() + 1);
        let mut msetnx = format!("*{}\r\n$6\r\nMSETNX\r\n", 2 * names.len() + 1);
        for n in &names {
            mget += &bulk(n);
            msetnx += &(bulk(n) + &bulk("1"));
        }
        let (req, g) = groups_of(&mut p, mget.as_bytes());
        assert!(g.len() > 1, "twenty keys on three servers");
        assert_eq!(p.split(&req, g.len()), Split::Fragments);
        let (req, g) = groups_of(&mut p, msetnx.as_bytes());
        let Split::Refused(out) = p.split(&req, g.len()) else {
            panic!("MSETNX over several servers goes");
        };
        assert!(out.starts_with(b"-") && out.ends_with(b"\r\n"), "{out:?}");
        assert!(String::from_utf8_lossy(&out).contains("MSETNX"), "{out:?}");
        // An MGET of keys on one server is sent as one GET would be.
        let (req, g) = groups_of(&mut p, b"*3\r\n$4\r\nMGET\r\n$4\r\n{u}a\r\n$4\r\n{u}b\r\n");
        assert_eq!(p.split(&req, g.len()), Split::Whole);
    }

    /// A replicated memcached pool: two servers, each key on both.
    fn replicated() -> PoolRt {
        let yaml = "m:\n  listen: 127.0.0.1:22121\n  replicas: 2\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n";
        let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
        PoolRt::new(&c.pools[0], &[])
    }

    #[test]
    fn a_replicated_split_read_falls_over_to_the_next_replica_once() {
        let mut p = replicated();
        let now = Instant::now();
        let bytes = b"get a b c\r\n";
        let req = match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        };
        let groups = p.server_groups(&req, bytes, now).expect("servers");
        // Split even when every key's owner is one server: per key it
        // falls over.
        assert_eq!(p.split(&req, 1), Split::Fragments);
        let mut m = Multi {
            req,
            bytes: bytes.to_vec(),
            frags: groups
                .iter()
                .map(|(_, keys)| crate::worker::conn::Fragment {
                    keys: keys.clone(),
                    ..Default::default()
                })
                .collect(),
            remaining: groups.len(),
            error: None,
            mode: MultiMode::Split,
        };
        let (attempt, next) = p.next_replicas(&m, 0).expect("a second replica");
        assert_eq!(attempt, 1);
        let mut replicas = Vec::new();
        for (server, keys) in &next {
            for &k in keys {
                p.placement
                    .replicas_for(&bytes[m.req.keys[k].clone()], 2, &mut replicas);
                assert_eq!(replicas[1], *server, "the key's second replica");
                assert_ne!(replicas[0], *server);
            }
        }
        let moved: Vec<usize> = next.iter().flat_map(|(_, k)| k.clone()).collect();
        assert_eq!(moved, groups[0].1, "the failed fragment's keys, in order");
        let (n, remaining) = (m.frags.len(), m.remaining);
        let base = m.refragment(0, next.iter().map(|(_, k)| k), attempt);
        assert_eq!(base, n);
        assert!(m.frags[0].keys.is_empty(), "the failed one answers nothing");
        assert_eq!(m.remaining, remaining + next.len());
        assert!(m.frags[base..].iter().all(|f| f.attempt == 1));
        // The second replica was the last: its failure is the answer.
        assert_eq!(p.next_replicas(&m, base), None);
        assert_eq!(p.next_replicas(&m, 99), None, "no such fragment");
        // A pool of one copy per key never falls over.
        let redis = pool("");
        let mget = b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n";
        let one = Multi {
            req: request(mget),
            bytes: mget.to_vec(),
            frags: vec![crate::worker::conn::Fragment {
                keys: vec![0, 1],
                ..Default::default()
            }],
            remaining: 1,
            error: None,
            mode: MultiMode::Split,
        };
        assert_eq!(redis.next_replicas(&one, 0), None);
    }

    #[test]
    fn a_failed_read_tries_each_replica_once_in_order() {
        let mut r = crate::worker::conn::Retry {
            req: request(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"),
            bytes: b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"[..].into(),
            replicas: [4, 2, 7].into_iter().collect(),
            next: 1,
            on_miss: false,
            learns: false,
            pull_on_miss: false,
        };
        assert_eq!(r.take_next(), Some(2));
        assert_eq!(r.take_next(), Some(7));
        assert_eq!(r.take_next(), None);
        assert_eq!(r.take_next(), None);
    }

    #[test]
    fn a_request_for_one_server_goes_to_its_key_or_is_refused() {
        let mut p = pool("  hash_tag: \"{}\"\n");
        let now = Instant::now();
        let get = b"*2\r\n$3\r\nGET\r\n$6\r\n{u}abc\r\n";
        let owner = p.server_for(b"u", now).expect("a server");
        assert_eq!(
            p.place(&request(get), get, false, 1, now),
            Placed::Server(owner)
        );
        let time = b"*1\r\n$4\r\nTIME\r\n";
        assert_eq!(
            p.place(&request(time), time, true, 1, now),
            Placed::Server(0)
        );
        // RENAME's keys on two servers: refused, naming the command.
        let rename = rename_apart(&mut p, now);
        let Placed::Apart(out) = p.place(
            &request(rename.as_bytes()),
            rename.as_bytes(),
            false,
            1,
            now,
        ) else {
            panic!("refused");
        };
        assert!(out.starts_with(b"-") && String::from_utf8_lossy(&out).contains("RENAME"));
        // Every server ejected: nowhere to go.
        for s in &mut p.servers {
            s.ejected_until = Some(now + std::time::Duration::from_secs(30));
        }
        assert_eq!(
            p.place(&request(time), time, true, 1, now),
            Placed::NoServer
        );
    }

    fn mc(bytes: &[u8]) -> Request {
        match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
            Ok(Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replicated_read_tries_each_replica_in_turn_and_a_write_goes_to_all() {
        let mut p = replicated();
        let now = Instant::now();
        let mut ring = Vec::new();
        p.placement.replicas_for(b"k", 2, &mut ring);
        assert_eq!(ring.len(), 2);
        let get = b"get k\r\n";
        assert_eq!(p.replicas(&mc(get), get, now), Owners::Read(ring.clone()));
        let set = b"set k 0 0 1\r\nv\r\n";
        assert_eq!(p.replicas(&mc(set), set, now), Owners::Write(ring.clone()));
        let delete = b"delete k\r\n";
        assert_eq!(p.replicas(&mc(delete), delete, now), Owners::Write(ring));
    }

    #[test]
    fn a_sentinel_read_goes_to_a_replica_that_is_up_with_its_master_kept() {
        let mut p = pool("  sentinels:\n    - 127.0.0.1:26379\n  read_from: prefer-replica\n");
        let now = Instant::now();
        let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let master = p.server_for(b"k", now).expect("a master");
        assert_eq!(
            p.replica_read(&request(get), get, 1, now),
            None,
            "no replica known"
        );
        // Another server stands for the master's replica.
        let replica = (master + 1) % 3;
        p.replicas_of[master] = vec![replica];
        assert_eq!(
            p.replica_read(&request(get), get, 1, now),
            Some(Owners::Read(vec![replica, master]))
        );
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        assert_eq!(p.replica_read(&request(set), set, 1, now), None, "a write");
        let time = b"*1\r\n$4\r\nTIME\r\n";
        assert_eq!(p.replica_read(&request(time), time, 1, now), None, "no key");
        // The replica resting after a failure: the master serves it.
        p.servers[replica].retry_at = Some(now + std::time::Duration::from_secs(5));
        assert_eq!(p.replica_read(&request(get), get, 1, now), None);
    }

    #[test]
    fn a_replicated_read_keeps_the_others_to_fall_over_to_and_a_write_is_a_fragment_each() {
        let p = replicated();
        let get = b"get k\r\n";
        let r = p
            .replicated_read(&mc(get), get, vec![1, 0], 7)
            .expect("a server");
        assert_eq!(
            (r.servers(), r.frag, &r.write),
            (vec![1], None, &Write::Request)
        );
        let slot = r.slot.expect("a slot");
        let retry = slot.retry.expect("kept to fall over");
        assert_eq!((&retry.replicas[..], retry.next), (&[1, 0][..], 1));
        assert!(slot.multi.is_none());
        assert!(
            p.replicated_read(&mc(get), get, vec![], 7).is_none(),
            "none"
        );
        let set = b"set k 0 0 1\r\nv\r\n";
        let w = p.replicated_write(&mc(set), vec![0, 1]).expect("servers");
        assert_eq!((w.servers(), w.frag), (vec![0, 1], Some(0)));
        assert!(w.bounded.is_empty(), "every write waited for");
        let slot = w.slot.expect("a slot");
        let m = slot.multi.expect("one fragment per server");
        assert_eq!(
            (m.frags.len(), m.remaining, m.mode),
            (2, 2, MultiMode::Replicate)
        );
        assert!(slot.retry.is_none());
        assert!(p.replicated_write(&mc(set), vec![]).is_none(), "none");
        assert_eq!(
            p.owners_plan(Owners::Write(vec![]), &mc(set), set, 7)
                .unwrap_err(),
            NotSent::NoServer
        );
    }

    #[test]
    fn a_random_replicated_read_starts_anywhere_but_keeps_every_replica_once() {
        let mut p = replicated();
        p.cfg.replica_read_random = true;
        let get = b"get k\r\n";
        for id in 0..8 {
            let r = p.replicated_read(&mc(get), get, vec![0, 1, 2], id).unwrap();
            let retry = r.slot.as_ref().unwrap().retry.as_ref().unwrap();
            assert_eq!(
                r.servers(),
                vec![retry.replicas[0]],
                "the first of the order"
            );
            let mut all = retry.replicas.to_vec();
            all.sort_unstable();
            assert_eq!(all, vec![0, 1, 2]);
        }
    }
}
