//! The connections with output to write at the end of a pass of the loop:
//! every request or reply queued in a pass marks its connection, and each
//! is written once, after the pass, so a pipelined batch goes out in one
//! write per connection. Writing can give more output (a client read
//! again once written to sends requests), written in a few more rounds
//! (`Dirty::round_due`). The server connections given their first
//! request of the pass are listed too, to count what stays unwritten
//! after it (`Dirty::queued`). The connections paused by backpressure
//! that may read again are listed alike, and read each once (`resumed`).

use super::server_conn::Queued;
use mio::Token;

/// Most write rounds over marked connections in one pass of the loop.
const FLUSH_ROUNDS: usize = 4;

/// Server connections and clients marked to be written, and server
/// connections with requests to count at the end of the pass.
#[derive(Debug, Default)]
pub struct Dirty {
    servers: Vec<Token>,
    clients: Vec<Token>,
    counting: Vec<Token>,
}

impl Dirty {
    /// A client has output to write at the end of this pass. Its replies
    /// usually come one after another (a pipelined batch), so a repeat of
    /// the last mark is skipped here rather than left to the sort.
    #[inline]
    pub fn client(&mut self, token: Token) {
        mark(&mut self.clients, token);
    }

    /// A server connection has requests to write at the end of this pass
    /// (as [`Dirty::client`]).
    #[inline]
    pub fn server(&mut self, token: Token) {
        mark(&mut self.servers, token);
    }

    /// A request was queued on server connection `st`, as `q` says: its
    /// first request of the pass lists the connection to count (once),
    /// its first output marks it to be written.
    #[inline(always)]
    pub fn queued(&mut self, st: Token, q: Queued) {
        if q.first_uncounted {
            self.counting.push(st);
        }
        if q.first_out {
            self.server(st);
        }
    }

    /// The server connections given requests in this pass, each once, to
    /// count at its end (`server::count_queued`, which empties the list).
    pub fn counting(&mut self) -> &mut Vec<Token> {
        &mut self.counting
    }

    /// Nothing is marked.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty() && self.clients.is_empty()
    }

    /// Whether another write round is due after `rounds` of them in this
    /// pass: anything marked, and fewer than `FLUSH_ROUNDS` done. Writing
    /// to a client can resume one paused by `client_max_inflight`, whose
    /// next requests mark servers again: those go now rather than after
    /// the next (up to 1 s) wait; the rest of a long chain is left for a
    /// zero-timeout pass of the loop.
    pub fn round_due(&self, rounds: usize) -> bool {
        rounds < FLUSH_ROUNDS && !self.is_empty()
    }

    /// The server connections marked, each once, in token order; the
    /// marks are cleared. Give the list back with [`Dirty::give_servers`]
    /// to keep its allocation.
    pub fn take_servers(&mut self) -> Vec<Token> {
        take_marked(&mut self.servers)
    }

    /// The emptied list from [`Dirty::take_servers`]; servers marked
    /// meanwhile stay marked.
    pub fn give_servers(&mut self, servers: Vec<Token>) {
        give_back(&mut self.servers, servers);
    }

    /// The clients marked, each once, in token order (as
    /// [`Dirty::take_servers`]).
    pub fn take_clients(&mut self) -> Vec<Token> {
        take_marked(&mut self.clients)
    }

    /// The emptied list from [`Dirty::take_clients`]; clients marked
    /// meanwhile (given more of a held reply while these were written)
    /// stay marked for the next round.
    pub fn give_clients(&mut self, clients: Vec<Token>) {
        give_back(&mut self.clients, clients);
    }
}

/// The connections listed to be read again (paused by a stream's
/// backpressure or a client's bound, and now free to), each once, in
/// token order; `list` is left empty.
pub fn resumed(list: &mut Vec<Token>) -> Vec<Token> {
    take_marked(list)
}

/// Mark `token` in `list`, unless it was the last one marked.
#[inline]
fn mark(list: &mut Vec<Token>, token: Token) {
    if list.last() != Some(&token) {
        list.push(token);
    }
}

/// The marks of `list`, each once, in token order; `list` is left empty.
fn take_marked(list: &mut Vec<Token>) -> Vec<Token> {
    let mut taken = std::mem::take(list);
    taken.sort_unstable();
    taken.dedup();
    taken
}

/// `emptied` (a list `take_marked` gave) becomes `list` again, with the
/// marks made meanwhile, so its allocation is kept.
fn give_back(list: &mut Vec<Token>, mut emptied: Vec<Token>) {
    emptied.clear();
    emptied.append(list);
    *list = emptied;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_marked_connection_is_written_once_and_later_marks_stay() {
        let mut d = Dirty::default();
        assert!(d.is_empty());
        for t in [3, 3, 1, 3] {
            d.client(Token(t));
        }
        d.server(Token(7));
        d.server(Token(7));
        assert!(!d.is_empty());
        let servers = d.take_servers();
        assert_eq!(servers, vec![Token(7)]);
        let clients = d.take_clients();
        assert_eq!(clients, vec![Token(1), Token(3)]);
        // Marked while those were written: kept for the next round.
        d.client(Token(9));
        d.give_servers(servers);
        d.give_clients(clients);
        assert_eq!(d.take_servers(), Vec::<Token>::new());
        assert_eq!(d.take_clients(), vec![Token(9)]);
        assert!(d.is_empty());
    }

    #[test]
    fn a_pass_writes_in_a_few_rounds_while_anything_is_marked() {
        let mut d = Dirty::default();
        assert!(!d.round_due(0), "nothing marked");
        d.server(Token(2));
        assert!(d.round_due(0));
        assert!(d.round_due(FLUSH_ROUNDS - 1));
        assert!(
            !d.round_due(FLUSH_ROUNDS),
            "the rest waits for the next pass"
        );
        let _ = d.take_servers();
        d.client(Token(4));
        assert!(d.round_due(1), "a client marked");
    }

    #[test]
    fn a_queued_request_lists_its_connection_to_count_and_to_write_as_it_says() {
        let mut d = Dirty::default();
        let q = |first_out, first_uncounted| Queued {
            first_out,
            first_uncounted,
        };
        d.queued(Token(4), q(true, true));
        d.queued(Token(4), q(false, false));
        assert_eq!(d.counting(), &vec![Token(4)]);
        assert_eq!(d.take_servers(), vec![Token(4)]);
        // Output left from before: counted, not marked again.
        d.queued(Token(6), q(false, true));
        assert!(d.is_empty(), "nothing to write");
        assert_eq!(d.counting(), &vec![Token(4), Token(6)]);
        // The first output after a write in this pass: written again,
        // counted once.
        d.queued(Token(4), q(true, false));
        assert_eq!(d.take_servers(), vec![Token(4)]);
        assert_eq!(d.counting().len(), 2);
    }

    #[test]
    fn a_connection_resumed_twice_is_read_once() {
        let mut list = vec![Token(5), Token(2), Token(5), Token(9), Token(2)];
        assert_eq!(resumed(&mut list), vec![Token(2), Token(5), Token(9)]);
        assert!(list.is_empty());
    }
}
