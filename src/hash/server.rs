//! What a ring is built from and made of: the servers in configuration
//! order, their twemproxy sort order, and the points of a continuum. Kept
//! apart from `ring.rs` so the distributions (`ketama.rs`, `modula.rs`,
//! `random.rs`) depend on these types, and the ring on them, one way.

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

/// The order in which twemproxy lays out a pool's servers: sorted by name
/// (the ketama name of [`RingServer`]), shorter names first, names of equal
/// length bytewise. twemproxy sorts while checking for duplicate names and
/// keeps the sorted order, so it decides modula's slot order (and the
/// order of servers in twemproxy's stats). Returns indexes into `servers`;
/// equal names keep their configuration order.
pub fn server_order(servers: &[RingServer<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (servers[a].name, servers[b].name);
        x.len().cmp(&y.len()).then_with(|| x.cmp(y))
    });
    order
}
