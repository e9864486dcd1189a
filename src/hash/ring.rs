//! The placement structure of a pool (twemproxy's "continuum").

use super::{ketama, modula, random, Distribution};

/// Input for building a ring: one entry per configured server, in
/// configuration order.
///
/// `name` is what ketama hashes. twemproxy's rule: the server's configured
/// name (`host:port:weight name`) if it has one; otherwise the `host:port`
/// text, or just `host` when the port is 11211 (libmemcached
/// compatibility). See [`super::ketama_server_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingServer<'a> {
    /// Name hashed by ketama (see the type's docs).
    pub name: &'a [u8],
    /// Configured weight; modula gives a server this many slots.
    pub weight: u32,
    /// `false` while the server is ejected: it then leaves the ring.
    pub live: bool,
}

/// One point of a continuum: a hash value owned by a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// Position on the ring (0 for modula and random slots).
    pub value: u32,
    /// Server index, into the configuration-order list.
    pub index: u32,
}

/// The immutable placement structure of a pool.
#[derive(Debug)]
pub struct Ring {
    dist: Distribution,
    points: Vec<Point>,
    rng: random::Rng,
}

impl Ring {
    /// Builds the ring for `dist` from the servers in configuration order.
    /// Servers with `live == false` are left out, as twemproxy does while a
    /// server is ejected.
    pub fn build(dist: Distribution, servers: &[RingServer<'_>]) -> Ring {
        let points = match dist {
            Distribution::Ketama => ketama::build(servers),
            Distribution::Modula => modula::build(servers),
            Distribution::Random => random::build(servers),
        };
        Ring {
            dist,
            points,
            rng: random::Rng::new(),
        }
    }

    /// The distribution this ring was built for.
    pub fn distribution(&self) -> Distribution {
        self.dist
    }

    /// The points (ketama) or slots (modula, random) of the ring.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// `true` if no server is live.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Server index for `hash`; `None` if no server is live. For
    /// [`Distribution::Random`] the hash is ignored and a random live
    /// server is picked.
    pub fn dispatch(&self, hash: u32) -> Option<usize> {
        match self.dist {
            Distribution::Ketama => ketama::dispatch(&self.points, hash),
            Distribution::Modula => modula::dispatch(&self.points, hash),
            Distribution::Random => random::dispatch(&self.points, &self.rng),
        }
    }

    /// A uniformly random live server (the random distribution's choice);
    /// `None` if no server is live.
    pub fn random_dispatch(&self) -> Option<usize> {
        random::dispatch(&self.points, &self.rng)
    }
}

impl Clone for Ring {
    fn clone(&self) -> Ring {
        Ring {
            dist: self.dist,
            points: self.points.clone(),
            rng: random::Rng::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ring_dispatches_nothing() {
        for dist in [
            Distribution::Ketama,
            Distribution::Modula,
            Distribution::Random,
        ] {
            let servers = [RingServer {
                name: b"a",
                weight: 1,
                live: false,
            }];
            let ring = Ring::build(dist, &servers);
            assert!(ring.is_empty());
            assert_eq!(ring.dispatch(7), None);
            assert_eq!(ring.random_dispatch(), None);
            assert_eq!(Ring::build(dist, &[]).dispatch(7), None);
        }
    }
}
