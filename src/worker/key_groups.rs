//! Where a request's keys go in a pool: grouped by server (or, in a
//! Redis Cluster pool, by slot) for a split, whether the keys of a command
//! that runs on one server live apart, the server of a command without a
//! key, and of a request sent on a connection of its own. Questions of
//! the pool's placement, asked by the executors (`forward.rs`,
//! `blocking.rs`, `stream.rs`).

use super::pool::PoolRt;
use crate::proto::Request;
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

impl PoolRt {
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
        let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        let first = p.server_for(names[0].as_bytes(), now);
        let other = names
            .iter()
            .find(|n| p.server_for(n.as_bytes(), now) != first)
            .unwrap();
        let apart = format!(
            "*3\r\n$6\r\nRENAME\r\n${}\r\n{}\r\n${}\r\n{}\r\n",
            names[0].len(),
            names[0],
            other.len(),
            other
        );
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
}
