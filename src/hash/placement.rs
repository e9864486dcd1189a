//! The whole key -> server decision of a pool.

use super::ring::Ring;
use super::server::RingServer;
use super::{Distribution, HashKind};

/// The part of `key` that is hashed.
///
/// With a hash tag `[open, close]`: find the first `open`, then the first
/// `close` after it; if both exist and enclose at least one byte, only the
/// enclosed bytes are hashed. Otherwise the whole key is.
pub fn key_hash_input(key: &[u8], hash_tag: Option<[u8; 2]>) -> &[u8] {
    let Some([open, close]) = hash_tag else {
        return key;
    };
    let Some(start) = memchr::memchr(open, key) else {
        return key;
    };
    let inner = &key[start + 1..];
    match memchr::memchr(close, inner) {
        Some(end) if end > 0 => &inner[..end],
        _ => key,
    }
}

/// The name ketama hashes for a server without a configured name: `host`
/// alone when `port` is 11211, else `host:port`.
pub fn ketama_server_name(host: &str, port: u16) -> String {
    if port == 11211 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

/// A pool's placement: hash, distribution, hash tag and ring.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Key hash function.
    pub hash: HashKind,
    /// Key distribution.
    pub dist: Distribution,
    /// Optional two-byte hash tag, e.g. `*b"{}"`.
    pub hash_tag: Option<[u8; 2]>,
    /// The ring built from the servers.
    pub ring: Ring,
    /// Number of configured servers, live or not.
    pub nservers: usize,
}

impl Placement {
    /// Builds the placement of a pool from its servers in configuration
    /// order.
    pub fn new(
        hash: HashKind,
        dist: Distribution,
        hash_tag: Option<[u8; 2]>,
        servers: &[RingServer<'_>],
    ) -> Placement {
        Placement {
            hash,
            dist,
            hash_tag,
            ring: Ring::build(dist, servers),
            nservers: servers.len(),
        }
    }

    /// Rebuilds the ring, e.g. after a server was ejected or came back.
    pub fn rebuild(&mut self, servers: &[RingServer<'_>]) {
        self.ring = Ring::build(self.dist, servers);
        self.nservers = servers.len();
    }

    /// Hash of `key` as the distribution sees it: the hash tag applied,
    /// and 0 for an empty hash input.
    pub fn key_hash(&self, key: &[u8]) -> u32 {
        let input = key_hash_input(key, self.hash_tag);
        if input.is_empty() {
            0
        } else {
            self.hash.hash(input)
        }
    }

    /// Index of the server `key` goes to; `None` if no server is live.
    /// A pool with a single server skips hashing.
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        if self.nservers == 1 {
            return Some(0);
        }
        match self.dist {
            Distribution::Random => self.ring.random_dispatch(),
            Distribution::Ketama | Distribution::Modula => self.ring.dispatch(self.key_hash(key)),
        }
    }

    /// Whether [`Self::server_for`] places a key by its [`Self::key_hash`]
    /// (a live ring of more than one server, by ketama or modula), so that
    /// [`Self::server_for_hash`] may place it from a hash made once: a
    /// migrating pool places every key on its earlier rings too.
    #[inline]
    pub fn hashes(&self) -> bool {
        self.nservers > 1 && self.dist != Distribution::Random && !self.ring.is_empty()
    }

    /// What [`Self::server_for`] gives for a key whose `key_hash` is `h`,
    /// when [`Self::hashes`].
    #[inline]
    pub fn server_for_hash(&self, h: u32) -> Option<usize> {
        self.ring.dispatch(h)
    }
}

impl Placement {
    /// The `r` distinct live servers that hold `key` in a replicated pool:
    /// the owner `server_for` gives, then the next distinct servers met
    /// walking the ring (ketama) or the slot table (modula) onwards. Fewer
    /// than `r` when fewer servers are live.
    pub fn replicas_for(&self, key: &[u8], r: usize, out: &mut Vec<usize>) {
        out.clear();
        let points = self.ring.points();
        if points.is_empty() || r == 0 {
            return;
        }
        // One replica is the owner alone: the walk below would hash the
        // key twice to find it (every request of a migrating pool asks).
        if r == 1 {
            out.extend(self.server_for(key));
            return;
        }
        let start = match self.dist {
            Distribution::Ketama => {
                let h = self.key_hash(key);
                let pos = points.partition_point(|p| p.value < h);
                if pos == points.len() {
                    0
                } else {
                    pos
                }
            }
            Distribution::Modula => (self.key_hash(key) as usize) % points.len(),
            Distribution::Random => match self.server_for(key) {
                Some(s) => points
                    .iter()
                    .position(|p| p.index as usize == s)
                    .unwrap_or(0),
                None => 0,
            },
        };
        for i in 0..points.len() {
            let idx = points[(start + i) % points.len()].index as usize;
            if !out.contains(&idx) {
                out.push(idx);
                if out.len() == r {
                    break;
                }
            }
        }
        // A one-server pool skips hashing; keep the owner first anyway.
        if let Some(owner) = self.server_for(key) {
            if let Some(pos) = out.iter().position(|&s| s == owner) {
                out[..=pos].rotate_right(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: Option<[u8; 2]> = Some(*b"{}");

    #[test]
    fn hash_tags() {
        assert_eq!(key_hash_input(b"user{42}:x", TAG), b"42");
        assert_eq!(key_hash_input(b"a{}b", TAG), b"a{}b");
        assert_eq!(key_hash_input(b"a{b", TAG), b"a{b");
        assert_eq!(key_hash_input(b"a}b{c}", TAG), b"c");
        assert_eq!(key_hash_input(b"{x}{y}", TAG), b"x");
        assert_eq!(key_hash_input(b"{{x}", TAG), b"{x");
        assert_eq!(key_hash_input(b"user{42}:x", None), b"user{42}:x");
        assert_eq!(key_hash_input(b"", TAG), b"");
        assert_eq!(key_hash_input(b"a$$b$c", Some(*b"$$")), b"a$$b$c");
        assert_eq!(key_hash_input(b"a$x$b", Some(*b"$$")), b"x");
    }

    #[test]
    fn ketama_names() {
        assert_eq!(ketama_server_name("127.0.0.1", 11211), "127.0.0.1");
        assert_eq!(ketama_server_name("127.0.0.1", 11212), "127.0.0.1:11212");
    }

    fn servers(live: [bool; 3]) -> Vec<RingServer<'static>> {
        let names: [&'static [u8]; 3] = [b"s1", b"s2", b"s3"];
        names
            .iter()
            .zip(live)
            .map(|(&name, live)| RingServer {
                name,
                weight: 1,
                live,
            })
            .collect()
    }

    #[test]
    fn single_server_skips_hashing() {
        let one = [RingServer {
            name: b"only",
            weight: 1,
            live: true,
        }];
        for dist in [
            Distribution::Ketama,
            Distribution::Modula,
            Distribution::Random,
        ] {
            let p = Placement::new(HashKind::Md5, dist, None, &one);
            assert_eq!(p.server_for(b"anything"), Some(0));
        }
        let dead = [RingServer {
            name: b"only",
            weight: 1,
            live: false,
        }];
        let p = Placement::new(HashKind::Md5, Distribution::Ketama, None, &dead);
        assert_eq!(p.server_for(b"anything"), None);
    }

    #[test]
    fn empty_key_hashes_to_zero() {
        let p = Placement::new(
            HashKind::Fnv1a_64,
            Distribution::Modula,
            None,
            &servers([true; 3]),
        );
        assert_eq!(p.key_hash(b""), 0);
        assert_eq!(p.server_for(b""), Some(0));
    }

    #[test]
    fn ejection_moves_keys_off_dead_server() {
        let mut p = Placement::new(
            HashKind::Fnv1a_64,
            Distribution::Ketama,
            None,
            &servers([true; 3]),
        );
        p.rebuild(&servers([true, false, true]));
        for i in 0..200 {
            let key = format!("key:{i}");
            assert_ne!(p.server_for(key.as_bytes()), Some(1));
        }
    }

    #[test]
    fn modula_uses_hash_mod_slots() {
        let p = Placement::new(
            HashKind::Crc32a,
            Distribution::Modula,
            TAG,
            &servers([true; 3]),
        );
        let h = HashKind::Crc32a.hash(b"42");
        assert_eq!(p.server_for(b"user{42}:x"), Some(h as usize % 3));
    }

    #[test]
    fn replicas_are_distinct_and_start_at_the_owner() {
        let names: Vec<String> = (0..5).map(|i| format!("10.0.0.{i}:11211")).collect();
        let ring: Vec<RingServer> = names
            .iter()
            .map(|n| RingServer {
                name: n.as_bytes(),
                weight: 1,
                live: true,
            })
            .collect();
        for dist in [Distribution::Ketama, Distribution::Modula] {
            let p = Placement::new(HashKind::Fnv1a_64, dist, None, &ring);
            let mut out = Vec::new();
            for k in 0..200 {
                let key = format!("key:{k}");
                p.replicas_for(key.as_bytes(), 3, &mut out);
                assert_eq!(out.len(), 3);
                assert_eq!(Some(out[0]), p.server_for(key.as_bytes()));
                let mut d = out.clone();
                d.sort();
                d.dedup();
                assert_eq!(d.len(), 3);
                // One replica is the first of three (the owner alone).
                let first = out[0];
                p.replicas_for(key.as_bytes(), 1, &mut out);
                assert_eq!(out, [first]);
            }
        }
    }
}
