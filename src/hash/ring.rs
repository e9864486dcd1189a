//! The placement structure of a pool (twemproxy's "continuum").

use super::server::{server_order, Point, RingServer};
use super::{ketama, modula, random, Distribution};

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
    ///
    /// twemproxy sorts a pool's servers by name (see [`server_order`])
    /// before building; the ring is built in that order, and the indexes
    /// it returns still point into `servers` as given.
    pub fn build(dist: Distribution, servers: &[RingServer<'_>]) -> Ring {
        let ordered: Vec<(usize, RingServer<'_>)> = server_order(servers)
            .into_iter()
            .filter_map(|i| servers.get(i).map(|s| (i, *s)))
            .collect();
        let points = match dist {
            Distribution::Ketama => ketama::build(&ordered),
            Distribution::Modula => modula::build(&ordered),
            Distribution::Random => random::build(&ordered),
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
    #[inline]
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
    fn servers_sort_by_length_then_bytes() {
        let s = |name: &'static [u8]| RingServer {
            name,
            weight: 1,
            live: true,
        };
        let servers = [
            s(b"gamma_2"),
            s(b"beta-1"),
            s(b"delta.3"),
            s(b"alpha"),
            s(b"b"),
        ];
        assert_eq!(server_order(&servers), vec![4, 3, 1, 2, 0]);
    }

    #[test]
    fn modula_slots_follow_name_order() {
        let servers = [
            RingServer {
                name: b"bb",
                weight: 1,
                live: true,
            },
            RingServer {
                name: b"a",
                weight: 2,
                live: true,
            },
        ];
        let ring = Ring::build(Distribution::Modula, &servers);
        let idx: Vec<u32> = ring.points().iter().map(|p| p.index).collect();
        assert_eq!(idx, vec![1, 1, 0]);
    }

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
