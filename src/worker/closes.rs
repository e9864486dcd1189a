//! Connections a decision ends, named as values ([`Close`]) by the type
//! that owns the decision: the once-a-second sweep (`sweep::each_second`),
//! the output budget (`OutputBudget::evictions`), the connections a client
//! or a channel held for itself ([`retire`]), a dedicated server
//! connection done with ([`done`]), a server connection left holding half
//! a streamed request ([`half_sent`]), a client over its output limit
//! (`Close::OverLimit`, with its log line, [`OverLimitLine`]), and the
//! connections a closed client or server connection leaves
//! ([`left_behind`], `Fallout::closes`). `Worker::close_all`
//! (`closing.rs`) carries them out in order, each checked to be still
//! there when its turn comes (an earlier close may have ended it, or
//! freed its slot for another).

use super::conn::{ClientRef, ConnTable, ServerRef};
use super::fault::ServerFault;
use mio::Token;
use std::time::Instant;

/// One connection to end.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Close {
    /// A client, by token; `error`: counted and logged as closed for an
    /// error, not at its end of input. Replies still coming from servers
    /// for it are dropped as they arrive.
    Client { token: Token, error: bool },
    /// A client, only while it is still the one named.
    Named { client: ClientRef, error: bool },
    /// A client the output budget evicts, holding `len` bytes of
    /// replies: only while eviction goes on (`OutputBudget::evicting`).
    Evict { token: Token, len: usize },
    /// A client keeping `bytes` of replies (as `how` says) over its
    /// `client_output_limit`: it does not read them.
    OverLimit {
        token: Token,
        bytes: usize,
        how: Kept,
    },
    /// A subscriber whose server connection (to `server` of `pool`) was
    /// lost: its subscriptions there are gone, so it is closed, as by a
    /// Redis of its own that went away; only while it is still the one
    /// named.
    Unsubscribed {
        client: ClientRef,
        pool: usize,
        server: usize,
    },
    /// The client whose transaction server connection `lost` was lost:
    /// closed once its replies are written, if the transaction was still
    /// on that connection (`Client::txn_lost`).
    Pinned { token: Token, lost: ServerRef },
    /// A server connection, its requests failed for `fault` at `at`.
    Server {
        token: Token,
        fault: ServerFault,
        at: Instant,
    },
    /// A dedicated server connection, only while it is still the one
    /// named: closed without fault (its request was answered, or its
    /// client left).
    Retire(ServerRef),
    /// A server connection holding half a streamed request, closed with
    /// `why` (the client's doing, so the server is not counted as
    /// failing).
    HalfSent { token: Token, why: ServerFault },
}

/// Where the replies a client is closed over its output limit for are
/// kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kept {
    /// In its output buffer (after a write, `Client::output_over`).
    Buffered,
    /// In its output and its large replies held in chunks, once one was
    /// filled in (`Client::kept_over`).
    Held,
    /// As `Held`, while a large reply is still arriving for it.
    BufferedOrHeld,
}

/// The line a client closed over its output limit is logged with: its
/// pool's name, what it kept and how, and the limit.
pub(super) struct OverLimitLine<'a> {
    pub pool: &'a str,
    pub bytes: usize,
    pub how: Kept,
    pub limit: usize,
}

impl std::fmt::Display for OverLimitLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.how {
            Kept::Buffered => "buffered",
            Kept::Held => "held",
            Kept::BufferedOrHeld => "buffered or held",
        };
        write!(
            f,
            "client on pool '{}' not reading its replies: {} bytes {how}, over client_output_limit {}; closing it",
            self.pool, self.bytes, self.limit
        )
    }
}

/// The dedicated server connection at `token` (its request answered, or
/// its client gone), retired: none when no server connection is there.
pub(super) fn done(conns: &impl ConnTable, token: Token) -> Option<Close> {
    let s = conns.server(token.0)?;
    Some(Close::Retire(ServerRef::new(token, s.id())))
}

/// Server connection `r` holds half a request that cannot be completed
/// (its client left, or sent a bad argument mid-stream): closed with
/// `why`, while it is still the one named (none when its slot is empty or
/// holds another connection since).
pub(super) fn half_sent(conns: &impl ConnTable, r: ServerRef, why: ServerFault) -> Option<Close> {
    conns.server_ref(r)?;
    Some(Close::HalfSent {
        token: r.token,
        why,
    })
}

/// The server connections a closed client leaves (`Client::left`), in
/// order: the one holding half its streamed request and the one half
/// resending it for a cluster redirect (`resent`), each while it is
/// still there, then the ones it held alone. A client that held none
/// leaves none, without allocating.
pub(super) fn left_behind(
    conns: &impl ConnTable,
    streamed: Option<ServerRef>,
    resent: Option<ServerRef>,
    own: Vec<ServerRef>,
) -> impl Iterator<Item = Close> {
    let streamed = streamed.and_then(|r| half_sent(conns, r, ServerFault::HalfSentClientLeft));
    let resent = resent.and_then(|r| half_sent(conns, r, ServerFault::HalfResentClientLeft));
    streamed.into_iter().chain(resent).chain(retire(own))
}

/// The dedicated server connections `conns`, retired.
pub(super) fn retire(conns: impl IntoIterator<Item = ServerRef>) -> impl Iterator<Item = Close> {
    conns.into_iter().map(Close::Retire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::worker::conn::{Client, Conn, Server};

    /// A table of one server connection (id 7) and one client, with the
    /// peers of their sockets kept open.
    fn table() -> (slab::Slab<Conn>, usize, usize, [mio::net::UnixStream; 2]) {
        let now = Instant::now();
        let (sock, peer) = mio::net::UnixStream::pair().expect("socket pair");
        let server = Server::new(Stream::Unix(sock), 7, (0, 0, 0), now, false);
        let (sock, peer2) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let client = Client::new(Stream::Unix(sock), 1, 0, session, now);
        let mut conns = slab::Slab::new();
        let s = conns.insert(Conn::Server(Box::new(server)));
        let c = conns.insert(Conn::Client(Box::new(client)));
        (conns, s, c, [peer, peer2])
    }

    #[test]
    fn a_client_over_its_output_limit_is_logged_with_what_it_kept_and_how() {
        let line = |how| {
            let pool = "cache";
            OverLimitLine {
                pool,
                bytes: 2048,
                how,
                limit: 1024,
            }
            .to_string()
        };
        assert_eq!(
            line(Kept::Buffered),
            "client on pool 'cache' not reading its replies: 2048 bytes buffered, over client_output_limit 1024; closing it"
        );
        assert!(line(Kept::Held).contains(": 2048 bytes held, over"));
        assert!(line(Kept::BufferedOrHeld).contains(" bytes buffered or held, over"));
    }

    #[test]
    fn a_server_connection_done_with_is_retired_by_its_id() {
        let (conns, s, c, _peers) = table();
        assert_eq!(
            done(&conns, Token(s)),
            Some(Close::Retire(ServerRef::new(Token(s), 7)))
        );
        assert_eq!(done(&conns, Token(c)), None, "a client is not retired");
        assert_eq!(done(&conns, Token(c + 1)), None, "nor an empty slot");
    }

    #[test]
    fn half_a_request_closes_its_connection_only_while_it_is_the_one_named() {
        let (conns, s, c, _peers) = table();
        let why = ServerFault::HalfSentClientLeft;
        assert_eq!(
            half_sent(&conns, ServerRef::new(Token(s), 7), why.clone()),
            Some(Close::HalfSent {
                token: Token(s),
                why: why.clone()
            })
        );
        let reused = ServerRef::new(Token(s), 6);
        assert_eq!(
            half_sent(&conns, reused, why.clone()),
            None,
            "another connection"
        );
        let client = ServerRef::new(Token(c), 1);
        assert_eq!(half_sent(&conns, client, why.clone()), None, "a client");
        let empty = ServerRef::new(Token(c + 1), 7);
        assert_eq!(half_sent(&conns, empty, why), None, "an empty slot");
    }

    #[test]
    fn a_closed_client_leaves_its_half_sent_connection_then_its_own() {
        let (conns, s, c, _peers) = table();
        let r = ServerRef::new(Token(s), 7);
        let own = ServerRef::new(Token(9), 9);
        let left: Vec<_> = left_behind(&conns, Some(r), None, vec![own]).collect();
        let why = ServerFault::HalfSentClientLeft;
        let half = Close::HalfSent {
            token: Token(s),
            why,
        };
        assert_eq!(left, vec![half, Close::Retire(own)]);
        let gone = ServerRef::new(Token(c), 7);
        let left: Vec<_> = left_behind(&conns, None, Some(gone), Vec::new()).collect();
        assert_eq!(left, vec![], "one no longer there is not closed");
        let why = ServerFault::HalfResentClientLeft;
        let resent = left_behind(&conns, None, Some(r), Vec::new());
        assert_eq!(
            resent.collect::<Vec<_>>(),
            vec![Close::HalfSent {
                token: Token(s),
                why
            }]
        );
    }
}
