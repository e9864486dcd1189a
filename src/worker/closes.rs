//! Connections a decision ends, named as values ([`Close`]) by the type
//! that owns the decision: the once-a-second sweep (`sweep::each_second`),
//! the output budget (`OutputBudget::evictions`), the connections a client
//! or a channel held for itself ([`retire`]), a dedicated server
//! connection done with ([`done`]), a server connection left holding half
//! a streamed request ([`half_sent`]), a client over its output limit
//! (`Close::OverLimit`, with its log line, [`OverLimitLine`]).
//! `Worker::close_all` carries
//! them out in order, each checked to be still there when its turn comes
//! (an earlier close may have ended it, or freed its slot for another).

use super::conn::{ClientRef, Conn, ConnTable, ServerRef};
use super::fault::ServerFault;
use super::Worker;
use mio::Token;
use std::time::Instant;

/// One connection to end.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Close {
    /// A client, by token; `error` as `Worker::close_client` takes it.
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

/// The dedicated server connections `conns`, retired.
pub(super) fn retire(conns: impl IntoIterator<Item = ServerRef>) -> impl Iterator<Item = Close> {
    conns.into_iter().map(Close::Retire)
}

impl Worker<'_> {
    /// End the connections `closes` names, in order (off the data path:
    /// a sweep's, an eviction's, a client's own connections as it goes).
    #[cold]
    #[inline(never)]
    pub(super) fn close_all(&mut self, closes: impl IntoIterator<Item = Close>) {
        for close in closes {
            match close {
                Close::Client { token, error } => self.close_client(token, error),
                Close::Named { client, error } => {
                    if self.conns.client_ref(client).is_some() {
                        self.close_client(client.token, error);
                    }
                }
                Close::Evict { token, len } => {
                    if !self.out.evicting() {
                        continue;
                    }
                    let (bytes, budget) = self.out.figures();
                    crate::log_notice!(
                        "{bytes} bytes of replies buffered, over buffer_budget {budget}: closing the client holding {len} of them"
                    );
                    self.close_client(token, true);
                }
                Close::OverLimit { token, bytes, how } => {
                    let Some(c) = self.conns.client(token.0) else {
                        continue;
                    };
                    let p = &self.pools[c.pool()];
                    let line = OverLimitLine {
                        pool: &p.cfg.name,
                        bytes,
                        how,
                        limit: self.ctl.output_limit(p),
                    };
                    crate::log_notice!("{line}");
                    self.close_client(token, true);
                }
                Close::Server { token, fault, at } => self.close_server(token, fault, at),
                Close::Retire(r) => {
                    if self.conns.server_ref(r).is_none() {
                        continue;
                    }
                    let Conn::Server(mut s) = self.conns.remove(r.token.0) else {
                        continue;
                    };
                    let _ = self.poll.registry().deregister(s.sock_mut());
                    self.pools[s.pool()].conn_closed(r.token, &mut s, &self.stats);
                }
                Close::HalfSent { token, why } => {
                    crate::log_info!("closing a server connection holding half a request: {why}");
                    self.close_server(token, why, Instant::now());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::worker::conn::{Client, Server};

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
}
