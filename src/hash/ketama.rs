//! Ketama consistent hashing, point for point as twemproxy builds it.
//!
//! For each live server, in configuration order:
//! `pct = weight / total_live_weight` and
//! `points = floor(pct * 160 / 4 * n_live + 1e-10) * 4`, evaluated with
//! 32-bit floats (the `1e-10` is added in double precision and the sum
//! rounded back to float before the floor). For `i` in `0..points / 4`
//! the string `"NAME-i"` (cut to [`MAX_NAME_LEN`] bytes) is MD5-hashed and
//! each of the digest's four little-endian words becomes one point. Points
//! are sorted by value, ties keeping insertion order; a hash maps to the
//! first point whose value is >= the hash, wrapping to the first point.

use super::md5;
use super::server::{Point, RingServer};

/// Points per server for an average-weight server.
const POINTS_PER_SERVER: u32 = 160;
/// Points taken from one MD5 digest.
const POINTS_PER_HASH: u32 = 4;
/// Longest `"NAME-i"` string that is hashed; longer ones are cut.
pub const MAX_NAME_LEN: usize = 272;

/// Number of points a server with `weight` gets among `nlive` live
/// servers whose weights sum to `total_weight`.
pub fn points_for(weight: u32, total_weight: u32, nlive: u32) -> u32 {
    let pct = weight as f32 / total_weight as f32;
    let scaled = pct * POINTS_PER_SERVER as f32 / 4.0f32 * nlive as f32;
    let nudged = (f64::from(scaled) + 0.000_000_000_1) as f32;
    // `as u32` saturates (NaN -> 0), so odd weights cannot panic.
    (nudged.floor() as u32).saturating_mul(4)
}

/// The string hashed for point group `i` of a server called `name`.
pub fn point_name(name: &[u8], i: u32) -> Vec<u8> {
    let mut s = Vec::with_capacity(name.len() + 11);
    s.extend_from_slice(name);
    s.push(b'-');
    s.extend_from_slice(i.to_string().as_bytes());
    s.truncate(MAX_NAME_LEN);
    s
}

/// Builds the sorted continuum for the live servers. `servers` pairs each
/// server with its index and is in twemproxy's server order.
pub fn build(servers: &[(usize, RingServer<'_>)]) -> Vec<Point> {
    let live = servers.iter().filter(|(_, s)| s.live);
    let nlive = live.clone().count() as u32;
    let total_weight = live.fold(0u32, |t, (_, s)| t.wrapping_add(s.weight));
    let mut points = Vec::new();
    for &(index, server) in servers {
        if !server.live {
            continue;
        }
        let n = points_for(server.weight, total_weight, nlive);
        for i in 0..n / POINTS_PER_HASH {
            let digest = md5::digest(&point_name(server.name, i));
            for group in 0..POINTS_PER_HASH as usize {
                points.push(Point {
                    value: md5::digest_word(&digest, group),
                    index: index as u32,
                });
            }
        }
    }
    // Stable, like glibc's merge-sort qsort: equal values keep their order.
    points.sort_by_key(|p| p.value);
    points
}

/// Server index for `hash` on a sorted continuum; `None` if it is empty.
pub fn dispatch(points: &[Point], hash: u32) -> Option<usize> {
    let pos = points.partition_point(|p| p.value < hash);
    points
        .get(pos)
        .or_else(|| points.first())
        .map(|p| p.index as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srv(name: &[u8], weight: u32) -> RingServer<'_> {
        RingServer {
            name,
            weight,
            live: true,
        }
    }

    fn indexed<'a>(servers: &[RingServer<'a>]) -> Vec<(usize, RingServer<'a>)> {
        servers.iter().copied().enumerate().collect()
    }

    #[test]
    fn equal_weights_get_160_points() {
        assert_eq!(points_for(1, 3, 3), 160);
        assert_eq!(points_for(7, 7, 1), 160);
        assert_eq!(points_for(1, 1, 1), 160);
    }

    #[test]
    fn weighted_points() {
        // pct = 1/6: 1/6 * 40 * 3 = 20 -> 80 points.
        assert_eq!(points_for(1, 6, 3), 80);
        assert_eq!(points_for(2, 6, 3), 160);
        assert_eq!(points_for(3, 6, 3), 240);
        // 1/3 * 40 * 2 = 26.67 -> 26 * 4.
        assert_eq!(points_for(1, 3, 2), 104);
        assert_eq!(points_for(0, 0, 0), 0);
    }

    #[test]
    fn point_names() {
        assert_eq!(point_name(b"server1", 8), b"server1-8".to_vec());
        let long = vec![b'x'; 300];
        assert_eq!(point_name(&long, 0).len(), MAX_NAME_LEN);
    }

    #[test]
    fn continuum_is_sorted_and_sized() {
        let servers = [srv(b"a", 1), srv(b"b", 2), srv(b"c", 3)];
        let pts = build(&indexed(&servers));
        assert_eq!(pts.len(), 80 + 160 + 240);
        assert!(pts.windows(2).all(|w| w[0].value <= w[1].value));
    }

    #[test]
    fn dead_servers_leave_the_ring() {
        let mut servers = [srv(b"a", 1), srv(b"b", 1)];
        servers[0].live = false;
        let pts = build(&indexed(&servers));
        assert_eq!(pts.len(), 160);
        assert!(pts.iter().all(|p| p.index == 1));
    }

    #[test]
    fn dispatch_wraps_and_breaks_ties_to_first() {
        let pts = [
            Point {
                value: 10,
                index: 0,
            },
            Point {
                value: 20,
                index: 1,
            },
            Point {
                value: 20,
                index: 2,
            },
        ];
        assert_eq!(dispatch(&pts, 0), Some(0));
        assert_eq!(dispatch(&pts, 10), Some(0));
        assert_eq!(dispatch(&pts, 11), Some(1));
        assert_eq!(dispatch(&pts, 20), Some(1));
        assert_eq!(dispatch(&pts, 21), Some(0));
        assert_eq!(dispatch(&pts, u32::MAX), Some(0));
        assert_eq!(dispatch(&[], 5), None);
    }
}
