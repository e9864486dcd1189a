//! Modula distribution: each live server owns `weight` consecutive slots
//! (in configuration order) and a hash picks slot `hash % slots`.

use super::server::{Point, RingServer};

/// Builds the slot table for the live servers. `servers` pairs each
/// server with its index and is in twemproxy's server order.
pub fn build(servers: &[(usize, RingServer<'_>)]) -> Vec<Point> {
    servers
        .iter()
        .filter(|(_, s)| s.live)
        .flat_map(|&(index, s)| {
            (0..s.weight).map(move |_| Point {
                value: 0,
                index: index as u32,
            })
        })
        .collect()
}

/// Server index for `hash`; `None` if there are no slots.
pub fn dispatch(slots: &[Point], hash: u32) -> Option<usize> {
    if slots.is_empty() {
        return None;
    }
    slots
        .get((hash as usize) % slots.len())
        .map(|p| p.index as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_slots() {
        let servers = [
            RingServer {
                name: b"a",
                weight: 2,
                live: true,
            },
            RingServer {
                name: b"b",
                weight: 1,
                live: false,
            },
            RingServer {
                name: b"c",
                weight: 3,
                live: true,
            },
        ];
        let indexed: Vec<_> = servers.iter().copied().enumerate().collect();
        let slots = build(&indexed);
        let idx: Vec<u32> = slots.iter().map(|p| p.index).collect();
        assert_eq!(idx, vec![0, 0, 2, 2, 2]);
        assert_eq!(dispatch(&slots, 0), Some(0));
        assert_eq!(dispatch(&slots, 2), Some(2));
        assert_eq!(dispatch(&slots, 6), Some(0));
        assert_eq!(dispatch(&[], 6), None);
    }
}
