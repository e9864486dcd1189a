//! A client's output limit (`client_output_limit`): whether the replies
//! it keeps, written out to its output buffer and held in chunks, are
//! over it, as `Client` methods. The worker writes what the socket takes
//! or closes the client as they say; unit tests in
//! `client_limit_tests.rs` on a socket pair, without a worker.

use super::Client;
use crate::worker::conn::ReplySlot;

impl Client {
    /// The bytes of its output buffer when they are over `limit` (0: no
    /// limit): past it, the client is not reading its replies.
    #[inline]
    pub fn output_over(&self, limit: usize) -> Option<usize> {
        let out = self.wbuf.len();
        crate::worker::over_output_limit(limit, out).then_some(out)
    }

    /// The bytes it keeps, its output buffer and the large replies held
    /// in chunks for its slots, when they are over `limit`: held replies
    /// count like written-out ones, so a client that pipelines large
    /// reads and reads nothing is closed as it would be if they sat in
    /// its output buffer.
    pub fn kept_over(&self, limit: usize) -> Option<usize> {
        let held: usize = self.slots().map(ReplySlot::held_len).sum();
        let kept = held + self.wbuf.len();
        crate::worker::over_output_limit(limit, kept).then_some(kept)
    }
}

impl ReplySlot {
    /// Bytes of the replies this slot holds in chunks (its own and its
    /// fragments').
    fn held_len(&self) -> usize {
        let frags = self.multi.as_ref().map_or(0, |m| {
            m.frags
                .iter()
                .filter_map(|f| f.held.as_ref())
                .map(|h| h.len())
                .sum()
        });
        self.held.as_ref().map_or(0, |h| h.len()) + frags
    }
}

#[cfg(test)]
#[path = "client_limit_tests.rs"]
mod tests;
