//! Random distribution: one slot per live server (weights are ignored),
//! picked uniformly for each request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::server::{Point, RingServer};

/// Builds the slot table: one slot per live server. `servers` pairs each
/// server with its index.
pub fn build(servers: &[(usize, RingServer<'_>)]) -> Vec<Point> {
    servers
        .iter()
        .filter(|(_, s)| s.live)
        .map(|&(index, _)| Point {
            value: 0,
            index: index as u32,
        })
        .collect()
}

/// A lock-free xorshift64* generator. Concurrent callers may observe the
/// same state and draw the same number, which is harmless here.
#[derive(Debug)]
pub struct Rng(AtomicU64);

impl Rng {
    /// A generator seeded from the clock and the process id.
    pub fn new() -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
        Rng(AtomicU64::new(seed | 1))
    }

    /// The next pseudo-random 32-bit value.
    pub fn next_u32(&self) -> u32 {
        let mut x = self.0.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

impl Default for Rng {
    fn default() -> Self {
        Rng::new()
    }
}

/// A random server index from the slots; `None` if there are none.
pub fn dispatch(slots: &[Point], rng: &Rng) -> Option<usize> {
    if slots.is_empty() {
        return None;
    }
    slots
        .get(rng.next_u32() as usize % slots.len())
        .map(|p| p.index as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_only_live_servers() {
        let servers = [
            RingServer {
                name: b"a",
                weight: 5,
                live: true,
            },
            RingServer {
                name: b"b",
                weight: 1,
                live: false,
            },
            RingServer {
                name: b"c",
                weight: 1,
                live: true,
            },
        ];
        let indexed: Vec<_> = servers.iter().copied().enumerate().collect();
        let slots = build(&indexed);
        assert_eq!(slots.len(), 2);
        let rng = Rng::new();
        let mut seen = [0usize; 3];
        for _ in 0..1000 {
            if let Some(i) = dispatch(&slots, &rng) {
                seen[i] += 1;
            }
        }
        assert_eq!(seen[1], 0);
        assert!(seen[0] > 300 && seen[2] > 300, "{seen:?}");
        assert_eq!(dispatch(&[], &rng), None);
    }
}
