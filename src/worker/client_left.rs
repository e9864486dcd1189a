//! A module of `client_conn.rs`: what a client holds on others' behalf
//! as it closes, as a `Client` method (`left`, a `ClientLeft`): the
//! server connection its large request streamed to, the streamed reply
//! waiting on its output, the connections it held alone. The worker
//! closes or lets go of each in turn (`Worker::close_all`). Unit tests
//! below on a socket pair.

use super::Client;
use crate::worker::handle::ServerRef;

/// What a closed client leaves behind ([`Client::left`]).
#[derive(Debug, PartialEq, Eq)]
pub struct ClientLeft {
    /// The server connection its large request was streaming to: it
    /// holds half a request that cannot be completed.
    pub streamed: Option<ServerRef>,
    /// The server connection whose streamed reply waited for this
    /// client's output to drain: it reads on, the rest of the reply
    /// dropped.
    pub reply_wait: Option<ServerRef>,
    /// The connections it held alone (its transaction's, its
    /// subscriptions', its blocked requests'): they end with it. Empty,
    /// and not allocated, for a client that held none.
    pub own: Vec<ServerRef>,
}

impl Client {
    /// This client closes: what it leaves behind, taken from it (asked
    /// again, it leaves nothing).
    pub fn left(&mut self) -> ClientLeft {
        ClientLeft {
            streamed: self.take_stream().and_then(|s| s.server()),
            reply_wait: self.release_reply_wait(),
            own: self.take_own_conns(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::client_conn::tests::client_and_peer;
    use crate::worker::transaction::Txn;
    use mio::Token;

    #[test]
    fn a_client_with_nothing_pending_leaves_nothing_and_allocates_nothing() {
        let (mut c, _peer) = client_and_peer();
        let left = c.left();
        assert_eq!((left.streamed, left.reply_wait), (None, None));
        assert!(left.own.is_empty());
        assert_eq!(left.own.capacity(), 0, "nothing allocated");
    }

    #[test]
    fn the_connections_a_client_held_alone_and_a_reply_waiting_are_left_once() {
        let (mut c, _peer) = client_and_peer();
        let r = |t: usize| ServerRef::new(Token(t), t as u64 + 100);
        let mut txn = Txn::default();
        let _ = txn.pinned(r(1), 0, "WATCH");
        c.set_txn(Some(Box::new(txn)));
        c.block_on(vec![r(4)], r(5));
        c.wait_on_reply(r(6));
        let left = c.left();
        assert_eq!(left.own, vec![r(1), r(4), r(5)]);
        assert_eq!(left.reply_wait, Some(r(6)));
        assert_eq!(
            c.left(),
            ClientLeft {
                streamed: None,
                reply_wait: None,
                own: Vec::new()
            },
            "once"
        );
    }
}
