//! Handles that name a connection of the worker from elsewhere (a
//! request, a client, another connection) without borrowing it.

use mio::Token;

/// A server connection as a request or client remembers it: its slab
/// token and its id. Tokens are reused once a connection closes; the id is
/// not, so a handle whose id no longer matches names a connection gone
/// (see `Worker::server_ref`). Same size as the pair it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerRef {
    /// Slab token.
    pub token: Token,
    /// Connection id.
    pub id: u64,
}

impl ServerRef {
    /// The connection `id` at `token`.
    #[inline]
    pub fn new(token: Token, id: u64) -> ServerRef {
        ServerRef { token, id }
    }
}

/// A client connection as a server connection remembers it (a reply
/// streamed to it, a subscriber connection pushing to it): its slab token
/// and its id, so a token reused by a later client is not mistaken for it
/// (see `Worker::client_ref`). Same size as the pair it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRef {
    /// Slab token.
    pub token: Token,
    /// Client id.
    pub id: u64,
}

impl ClientRef {
    /// The client `id` at `token`.
    #[inline]
    pub fn new(token: Token, id: u64) -> ClientRef {
        ClientRef { token, id }
    }
}

/// Where connection ids come from: each connection the worker opens or
/// takes gets the next, never one given before (a token is reused once
/// its connection closes, an id is not: see [`ServerRef`], [`ClientRef`]).
#[derive(Debug)]
pub struct ConnIds {
    last: u64,
}

impl Default for ConnIds {
    /// No id given yet: the first is 2.
    fn default() -> ConnIds {
        ConnIds { last: 1 }
    }
}

impl ConnIds {
    /// The next connection id.
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_ids_are_never_given_twice() {
        let mut ids = ConnIds::default();
        assert_eq!(ids.next(), 2, "the worker's first id");
        assert_eq!(ids.next(), 3);
        let seen: std::collections::HashSet<u64> = (0..1000).map(|_| ids.next()).collect();
        assert_eq!(seen.len(), 1000);
        assert!(!seen.contains(&2) && !seen.contains(&3));
    }
}
