//! `RepStream`: one large Redis reply passed to its client as it arrives,
//! its state and what it decides: whether a reply streams at all and
//! whether it is held for its slot (`start`), where each piece goes (to the
//! client, into the hold, dropped), when the server connection pauses for a
//! lagging client and reads again, when the rest is moved out of the way
//! (`spool_rest`), and when a client that reads none of it is stalled. The
//! worker (`stream_reply.rs`) moves the bytes.

use super::conn::{ClientRef, Conn, ConnTable, Inflight, MultiMode, Waiter};
use super::spool::Spool;
use super::{over_output_limit, STREAM_HIGH, STREAM_STALL, STREAM_THRESHOLD};
use crate::proto::redis::{self, ReplyCursor};
use crate::proto::ResponseError;
use std::time::Instant;

/// A large reply kept for a slot that cannot take it yet.
#[derive(Debug)]
pub struct Hold {
    /// The bytes so far.
    pub spool: Box<Spool>,
    /// The request's sequence number.
    pub seq: u64,
    /// Its fragment, for a split request.
    pub frag: Option<u32>,
}

impl Hold {
    fn new(seq: u64, frag: Option<u32>) -> Hold {
        Hold {
            spool: Box::default(),
            seq,
            frag,
        }
    }
}

/// A large reply (a bulk string, or an aggregate of any shape and size)
/// passed to its client as it arrives (the client was waiting for it at
/// the head of its replies).
#[derive(Debug)]
pub struct RepStream {
    /// The client and its id; `None` when it went away (the rest of the
    /// reply is read and dropped).
    client: Option<ClientRef>,
    /// Where the reply is: what was consumed of it, what it still owes.
    cursor: ReplyCursor,
    /// Bytes of the reply handed on so far (to the client, or dropped).
    passed: usize,
    /// The reply cannot pass yet (an earlier reply of its client is still
    /// awaited, or it is one fragment of a split MGET): it is held in
    /// chunks and handed to its slot whole at the end.
    hold: Option<Hold>,
    /// Not reading the server: the client's output is over the high mark.
    blocked: bool,
    /// When bytes last passed (a client that stops reading is closed).
    progress: Instant,
}

/// Where the next piece of a streamed reply goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// Into the hold, for this client's slot.
    Hold(ClientRef),
    /// To this client's output.
    Pass(ClientRef),
    /// Nowhere: the client went away.
    Drop,
}

/// Whether a reply starting `input` (incomplete; `hint`: the length the
/// input must reach, 0 if unknown) is large enough to stream: a bulk string
/// or an aggregate whose declared size, or the part of it already here,
/// reaches [`STREAM_THRESHOLD`]. Error replies stay whole (a cluster pool
/// reads redirections in them); a one-line reply has nothing to pass
/// before its end.
#[inline]
pub fn streams(input: &[u8], hint: usize) -> bool {
    redis::reply::may_stream(input.first())
        && (hint > STREAM_THRESHOLD || input.len() >= STREAM_THRESHOLD)
}

/// Where a large reply for slot `seq` (`frag`: of a split request's
/// fragment; `multi`: the slot's split request) goes: `Some(None)` passed
/// at once (its slot is the head, `at_head`), `Some(Some(hold))` held for
/// its slot, `None` not streamed (buffered whole). Of split requests only
/// MGET replies carry values.
fn hold_for(
    seq: u64,
    frag: Option<u32>,
    multi: Option<(MultiMode, crate::proto::Op)>,
    at_head: bool,
) -> Option<Option<Hold>> {
    match (frag, multi) {
        (None, None) if at_head => Some(None),
        (None, None) => Some(Some(Hold::new(seq, frag))),
        (Some(_), Some((MultiMode::Split, crate::proto::Op::Redis(op))))
            if op.class == redis::CmdClass::MGet =>
        {
            Some(Some(Hold::new(seq, frag)))
        }
        _ => None,
    }
}

impl RepStream {
    /// The streamed reply that the reply starting `input` (see [`streams`])
    /// to request `front` begins, if it streams: its client waits for it
    /// at the head of its replies, or it is held for its slot; not a
    /// fragment of a multi-key request other than a split MGET's, nor a
    /// read that may be retried on another replica.
    pub fn start(
        conns: &slab::Slab<Conn>,
        input: &[u8],
        hint: usize,
        front: &Inflight,
    ) -> Option<RepStream> {
        if !streams(input, hint) {
            return None;
        }
        let Waiter::Client {
            token: ct,
            id,
            seq,
            frag,
        } = front.waiter
        else {
            return None;
        };
        let c = conns.client(ct.0)?;
        let f = c.slot(seq)?;
        if c.id() != id || f.ready || f.retry.is_some() {
            return None;
        }
        let multi = f.multi.as_ref().map(|m| (m.mode, m.req.op));
        let hold = hold_for(seq, frag, multi, c.head_seq() == seq)?;
        Some(RepStream::new(ClientRef::new(ct, id), hold, Instant::now()))
    }

    pub(super) fn new(client: ClientRef, hold: Option<Hold>, now: Instant) -> RepStream {
        RepStream {
            client: Some(client),
            cursor: ReplyCursor::new(),
            passed: 0,
            hold,
            blocked: false,
            progress: now,
        }
    }

    /// The server connection is not read: the client lags.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Follow the reply over `input`, the server's unread input: the bytes
    /// of it there and whether it ends with them; `None` when nothing can
    /// pass yet. An error when the reply is malformed.
    pub fn advance(
        &mut self,
        input: &[u8],
        now: Instant,
    ) -> Result<Option<(usize, bool)>, ResponseError> {
        let (n, done) = self.cursor.advance(input)?;
        if n == 0 && !done {
            return Ok(None);
        }
        self.passed += n;
        self.progress = now;
        Ok(Some((n, done)))
    }

    /// Where the bytes just passed go.
    pub fn dest(&self) -> Dest {
        match (self.client, self.hold.is_some()) {
            (Some(c), true) => Dest::Hold(c),
            (Some(c), false) => Dest::Pass(c),
            (None, _) => Dest::Drop,
        }
    }

    /// The client went away: the rest of the reply is read and dropped.
    pub fn drop_client(&mut self) {
        self.hold = None;
        self.client = None;
    }

    /// Hold `bytes` for the slot, its client having `client_out` bytes of
    /// output and an output limit of `limit` (0: none). Past the limit the
    /// client is dropped (it goes) and what it held is returned.
    pub fn keep(&mut self, bytes: &[u8], client_out: usize, limit: usize) -> Option<usize> {
        let h = self.hold.as_mut()?;
        h.spool.push(bytes);
        let kept = h.spool.len() + client_out;
        if !over_output_limit(limit, kept) {
            return None;
        }
        self.drop_client();
        Some(kept)
    }

    /// Bytes passed to a client that now has `client_out` bytes of output:
    /// whether the server pauses until it drains (the reply goes on and
    /// the client is over the high mark).
    pub fn pause_if_lagging(&mut self, client_out: usize, done: bool) -> bool {
        let lags = !done && client_out > STREAM_HIGH;
        if lags {
            self.blocked = true;
        }
        lags
    }

    /// The client took some of its output: not stalled.
    pub fn progressed(&mut self, now: Instant) {
        self.progress = now;
    }

    /// Let the server read again (`drop_client`: the client went away);
    /// whether it was paused.
    pub fn unblock(&mut self, drop_client: bool) -> bool {
        if drop_client {
            self.client = None;
        }
        std::mem::take(&mut self.blocked)
    }

    /// Paused for its client's passing (not held): that client (`None` if
    /// it went away). `None` when not paused so.
    pub fn paused_for(&self) -> Option<Option<ClientRef>> {
        (self.blocked && self.hold.is_none()).then_some(self.client)
    }

    /// Someone else waits on the paused connection: it reads on, and the
    /// rest of the reply is held for its client's slot `seq` (the head of
    /// its replies), behind what already passed.
    pub fn spool_rest(&mut self, seq: Option<u64>) {
        self.blocked = false;
        if let Some(seq) = seq {
            self.hold = Some(Hold::new(seq, None));
        }
    }

    /// The client of a paused reply that has read none of it for
    /// [`STREAM_STALL`] at `now`.
    pub fn stalled(&self, now: Instant) -> Option<ClientRef> {
        (self.blocked && now.duration_since(self.progress) > STREAM_STALL)
            .then_some(self.client)
            .flatten()
    }

    /// The server connection closed in the middle of the reply: the
    /// client that got part of it, which cannot be answered (one that got
    /// none of it, or whose reply was held, gets the error instead).
    pub fn half_answered(self) -> Option<ClientRef> {
        (self.passed > 0 && self.hold.is_none())
            .then_some(self.client)
            .flatten()
    }

    /// The reply ended: the bytes it passed, its client, what it held.
    pub fn end(self) -> (usize, Option<ClientRef>, Option<Hold>) {
        (self.passed, self.client, self.hold)
    }
}

#[cfg(test)]
#[path = "rep_stream_tests.rs"]
mod tests;
