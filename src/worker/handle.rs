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

/// One fragment of a client's multi-key request: the client (token and
/// id), its reply slot and the fragment's index there.
#[derive(Debug, Clone, Copy)]
pub struct FragOf {
    /// Client token.
    pub token: Token,
    /// Client id.
    pub id: u64,
    /// The request's reply sequence number.
    pub seq: u64,
    /// The fragment's index.
    pub fi: usize,
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
