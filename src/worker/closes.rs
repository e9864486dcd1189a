//! Connections a decision ends, named as values ([`Close`]) by the type
//! that owns the decision: the once-a-second sweep (`sweep::each_second`),
//! the output budget (`OutputBudget::evictions`), the connections a client
//! or a channel held for itself ([`retire`]). `Worker::close_all` carries
//! them out in order, each checked to be still there when its turn comes
//! (an earlier close may have ended it, or freed its slot for another).

use super::conn::{ClientRef, ConnTable, ServerRef};
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
                Close::Server { token, fault, at } => self.close_server(token, fault, at),
                Close::Retire(r) => {
                    if self.conns.server_ref(r).is_some() {
                        self.retire_server(r.token);
                    }
                }
            }
        }
    }
}
