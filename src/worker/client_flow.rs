//! When a client is read and parsed: the flags a pass over its input
//! leaves (end of stream, closing, paused, input to gather or discard, a
//! streamed request going alone, input left in the socket) and what the
//! worker does with the client follows from them (`read_now`,
//! `parse_now`, `must_pause`, `after_read`, `finished`), as `Client`
//! methods; what one parse pass used and left (`InputPass`), and how a
//! request it refused is logged (`BadRequest`). The worker
//! reads, parses, writes and closes as they say; unit tests in
//! `client_flow_tests.rs` on a socket pair, without a worker.

use super::Client;
use crate::worker::handle::ServerRef;
use crate::worker::pull::{PullPart, Step};
use crate::worker::stream::StreamStart;

/// A moved key's read let its client go on ([`Client::read_settled`]).
#[derive(Debug, PartialEq, Eq)]
pub struct ReadSettled {
    /// The key's newest old owner, and whether the new owner answered
    /// (`None`: not found, or the read does not teach the order).
    pub found_at: Option<(usize, bool)>,
    /// The client has input to parse.
    pub parse_on: bool,
}

impl ReadSettled {
    /// Carried out: the client (`token`) parsed again if it has input,
    /// and where the key was found counted for the pool's next reads'
    /// order (`migration`: the pool's, if it still migrates).
    #[inline]
    pub fn carry_out(
        self,
        token: mio::Token,
        resume: &mut Vec<mio::Token>,
        migration: Option<&mut crate::worker::migration_rt::MigrationRt>,
    ) {
        if self.parse_on {
            resume.push(token);
        }
        if let (Some((old, on_new)), Some(m)) = (self.found_at, migration) {
            m.read_found(old, on_new);
        }
    }
}

/// What follows a read of the client's input, once it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRead {
    /// Go on serving it.
    Keep,
    /// Close it: the peer ended in the middle of a streamed request
    /// (`error`), or left while blocked on a server connection that is
    /// still open (a BLPOP ... 0 may never be answered).
    Close { error: bool },
}

/// What one pass over a client's input parsed and left.
#[derive(Debug, Default)]
pub struct InputPass {
    /// Bytes used.
    pub off: usize,
    /// Parse again once the input holds this many bytes.
    pub need: usize,
    /// Input bytes still to discard (a refused value's data block).
    pub swallow: usize,
    /// Reading stops until replies drain.
    pub paused: bool,
    /// A streamed request started: its rest passes as it arrives.
    pub streamed: bool,
    /// Requests parsed (the worker's request counter).
    pub requests: u64,
}

impl InputPass {
    /// What a large request's head, `len` bytes, becoming a streamed one
    /// leaves: started, its head is used and its rest passes as it
    /// arrives (the client's input is parsed again for it); waiting for
    /// the earlier replies, reading pauses and nothing more is needed to
    /// parse again; not streamable, it is gathered whole as parsed.
    pub(in crate::worker) fn stream_start(&mut self, len: usize, start: StreamStart) {
        match start {
            StreamStart::Started => {
                self.off += len;
                self.need = 0;
                self.streamed = true;
            }
            StreamStart::Wait => {
                self.need = 0;
                self.paused = true;
            }
            StreamStart::No => {}
        }
    }

    /// A refused request that is not closed on takes `skip` bytes (at
    /// least one) of the `left` still unparsed: past them when they are
    /// there, else all of them and the rest discarded as it comes.
    /// Whether parsing goes on.
    pub fn skip_refused(&mut self, skip: usize, left: usize) -> bool {
        let skip = skip.max(1);
        if skip > left {
            self.swallow = skip - left;
            self.off += left;
            return false;
        }
        self.off += skip;
        true
    }
}

/// A request the parser refused, as `-v 11` logs it
/// ([`Client::bad_request`]): the client's peer, its pool, the error it
/// got and the first bytes it sent. The peer is looked up only when the
/// line is written.
pub struct BadRequest<'a> {
    client: &'a Client,
    pool: &'a str,
    reply: &'a [u8],
    input: &'a [u8],
}

/// Most of the refused input a log line shows: enough to recognise the
/// request, not a whole value.
const BAD_HEAD: usize = 64;

impl std::fmt::Display for BadRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = &self.input[..self.input.len().min(BAD_HEAD)];
        write!(
            f,
            "client {} of pool '{}': bad request: {} (it began {:?})",
            crate::net::peer_of(std::os::fd::AsRawFd::as_raw_fd(self.client.sock())),
            self.pool,
            String::from_utf8_lossy(self.reply).trim_end(),
            String::from_utf8_lossy(head)
        )
    }
}

impl Client {
    /// The log line of a request of pool `pool` refused with `reply`,
    /// the unparsed `input` starting with it.
    #[cold]
    pub fn bad_request<'a>(
        &'a self,
        pool: &'a str,
        reply: &'a [u8],
        input: &'a [u8],
    ) -> BadRequest<'a> {
        BadRequest {
            client: self,
            pool,
            reply,
            input,
        }
    }

    /// A request the parser refused (`err`, at the start of the unparsed
    /// `input`) in the pool named `pool`, logged (`bad_request`). A
    /// request routed in its place is returned
    /// (`proto::RequestError::forward`); else its error reply is queued,
    /// and a transaction being queued aborts at EXEC, as redis-server's
    /// does.
    #[cold]
    pub fn refuse(
        &mut self,
        err: crate::proto::RequestError,
        pool: &str,
        input: &[u8],
    ) -> Option<Box<crate::proto::Request>> {
        crate::log_pverb!("{}", self.bad_request(pool, &err.reply, input));
        if err.forward.is_some() {
            return err.forward;
        }
        if let Some(t) = self.txn_mut() {
            t.refused();
        }
        self.push_ready(err.reply, err.close);
        None
    }

    /// The peer closed its side.
    #[inline]
    pub fn is_eof(&self) -> bool {
        self.eof
    }

    /// Note that the peer closed its side.
    #[inline]
    pub fn set_eof(&mut self) {
        self.eof = true;
    }

    /// A quit or fatal error is queued: nothing more is read.
    #[inline]
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Read nothing more: close once the queued replies are written.
    #[inline]
    pub fn close_after_replies(&mut self) {
        self.closing = true;
    }

    /// Input bytes still to discard.
    #[inline]
    pub fn swallow(&self) -> usize {
        self.swallow
    }

    /// Discard the next `n` input bytes (carried over from a predecessor).
    #[inline]
    pub fn swallow_next(&mut self, n: usize) {
        self.swallow = n;
    }

    /// Discard what input is still to be swallowed; whether more is.
    #[inline]
    pub fn swallow_input(&mut self) -> bool {
        if self.swallow == 0 {
            return false;
        }
        let n = self.swallow.min(self.rbuf.len());
        self.rbuf.consume(n);
        self.swallow -= n;
        self.swallow > 0
    }

    /// Where a parse pass stopped: the input it needs before parsing
    /// again, the input still to discard, and whether reading pauses.
    #[inline]
    pub fn end_pass(&mut self, need: usize, swallow: usize, paused: bool) {
        self.need = need;
        self.swallow = swallow;
        self.paused = paused;
    }

    /// The input holds enough to parse again, and reading goes on.
    #[inline]
    pub fn ready_to_parse(&self) -> bool {
        self.rbuf.len() >= self.need && !self.closing
    }

    /// A streamed request goes next: nothing more is parsed until every
    /// earlier reply is written.
    #[inline]
    pub fn go_solo(&mut self) {
        self.solo = true;
    }

    /// The next request must wait for every earlier reply (a streamed one
    /// goes alone); once they are written, it no longer waits.
    #[inline]
    pub fn solo_waits(&mut self) -> bool {
        if !self.solo {
            return false;
        }
        if !self.pending.is_empty() {
            return true;
        }
        self.solo = false;
        false
    }

    /// The read of a moved key in slot `seq` has its answer (`found`: a
    /// value, not a miss everywhere or an error): the client's hold
    /// ([`Client::hold_for_read`]) ends if it waited for that read. Then:
    /// where the key was found (its newest old owner, and whether the new
    /// owner answered), for the pool's next reads' order, and whether to
    /// parse what the client sent meanwhile (a client that waits for each
    /// answer sent nothing, and reading its socket again would only find
    /// it empty).
    pub fn read_settled(&mut self, seq: u64, found: bool) -> Option<ReadSettled> {
        // The read held for is the last request queued: nothing was
        // parsed after it.
        if !self.moved_read || seq + 1 != self.next_seq() {
            return None;
        }
        self.moved_read = false;
        let found_at = self
            .slot_mut(seq)
            .and_then(|s| s.retry.as_ref())
            .and_then(|r| r.found_at())
            .filter(|_| found);
        Some(ReadSettled {
            found_at,
            parse_on: self.must_read_again() || !self.input().is_empty(),
        })
    }

    /// Input was left in the socket and nothing stops reading it now: the
    /// worker must read it itself, as no event will say it is there.
    #[inline]
    pub fn must_read_again(&self) -> bool {
        self.unread
            && !self.paused
            && !self.closing
            && !self.moved_read
            && !self.rare.as_ref().is_some_and(|r| {
                r.gate.is_some() || r.stream.as_ref().is_some_and(|s| s.is_blocked())
            })
    }

    /// Resume reading a paused client once its replies drained below
    /// `max_inflight` (half of it, plus one) and `max_out` bytes of output
    /// (a solo client: all of them). Whether it was resumed.
    #[inline]
    pub fn resume_if_drained(&mut self, max_inflight: usize, max_out: usize) -> bool {
        if self.paused
            && self.pending.len() < max_inflight / 2 + 1
            && (!self.solo || self.pending.is_empty())
            && self.wbuf.len() < max_out
        {
            self.paused = false;
            return true;
        }
        false
    }

    /// Whether its input is left in the socket for now: it is closing,
    /// paused (`client_max_inflight`), held behind a request that waits
    /// (a pull, the fleet), or streaming to a server that is full.
    #[inline]
    fn reading_held(&self) -> bool {
        self.closing
            || self.paused
            || self.moved_read
            || self.rare.as_ref().is_some_and(|r| {
                r.gate.is_some() || r.stream.as_ref().is_some_and(|s| s.is_blocked())
            })
    }

    /// Whether it is served here before it may be handed over: a
    /// streamed request, input or a request larger than the `carry` a
    /// handover takes, a subscriber or a transaction (their server
    /// connections are this worker's).
    pub fn stays_for_handover(&self, carry: usize) -> bool {
        self.stream().is_some()
            || self.rbuf.len() > carry
            || self.need > carry
            || self.is_stateful()
    }

    /// Whether to read its socket now (noting whether input is left
    /// there). `handover`: while the worker hands its clients over, the
    /// most a handover carries; what a client sends then waits in the
    /// socket for the successor, unless the peer closed or failed
    /// (`hup`): then it is read to the end to see it go (a client blocked
    /// or owed replies here, which then leaves, must not keep the worker
    /// until the graceful timeout).
    #[inline]
    pub fn read_now(&mut self, handover: Option<usize>, hup: bool) -> bool {
        let held = self.reading_held()
            || handover.is_some_and(|carry| !hup && !self.stays_for_handover(carry));
        self.unread = held;
        !held
    }

    /// Whether its input may be parsed now (before a streamed request
    /// takes its share): not while a request waits for its keys (the next
    /// ones wait behind it), nor while handing over (`handover` as in
    /// `read_now`: the input goes to the successor unparsed), nor while
    /// input is still to be discarded (discarded here), nor once closing.
    #[inline]
    pub fn parse_now(&mut self, handover: Option<usize>) -> bool {
        if self.moved_read || self.rare.as_ref().is_some_and(|r| r.gate.is_some()) {
            return false;
        }
        if handover.is_some_and(|carry| !self.stays_for_handover(carry)) {
            return false;
        }
        !self.swallow_input() && !self.closing
    }

    /// Reading stops before the next request: `max_inflight` requests are
    /// in flight, or a streamed request waits for the earlier replies.
    #[inline]
    pub fn must_pause(&mut self, max_inflight: usize) -> bool {
        self.pending.len() >= max_inflight || self.solo_waits()
    }

    /// What follows a read, its input parsed: `live` says whether a
    /// blocking request's server connection is still open.
    pub fn after_read(&self, live: impl Fn(ServerRef) -> bool) -> AfterRead {
        if !self.eof {
            return AfterRead::Keep;
        }
        if self.stream().is_some() {
            return AfterRead::Close { error: true };
        }
        if self.blocked().iter().any(|&r| live(r)) {
            return AfterRead::Close { error: false };
        }
        AfterRead::Keep
    }

    /// It has nothing more to do: it quit or its peer left, every reply
    /// is in and written.
    #[inline]
    pub fn finished(&self) -> bool {
        (self.closing || self.eof) && self.pending.is_empty() && self.wbuf.is_empty()
    }

    /// Its output drained below `low` with a held reply (a large one kept
    /// in chunks) at the head of its replies: pass it more.
    #[inline]
    pub fn wants_held_reply(&self, low: usize) -> bool {
        self.head().is_some_and(|s| s.ready && s.held.is_some()) && self.wbuf.len() < low
    }
}

impl Client {
    /// A reply to pull `idx`'s command `part` (`None`: its server could
    /// not be reached), for this client if it is still the one that asked
    /// (`id`): what follows (`Pulls::reply`). `Wait` when it is not, or
    /// nothing is held any more.
    pub(in crate::worker) fn pull_reply(
        &mut self,
        id: u64,
        idx: u32,
        part: PullPart,
        reply: Option<&[u8]>,
    ) -> Step {
        if self.id() != id {
            return Step::Wait;
        }
        match self.gate_mut() {
            Some(g) => g.pulls.reply(idx as usize, part, reply),
            None => Step::Wait,
        }
    }
}

#[cfg(test)]
#[path = "client_flow_tests.rs"]
mod tests;
