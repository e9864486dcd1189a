//! `ReqStream`: one large Redis request being forwarded as it arrives, its
//! state and what it decides. Its framing (what each byte of the client's
//! input is for) is `proto::redis::StreamMachine`'s; this type keeps where
//! the bytes go (the server connection of its own, an MSET's connection
//! per server, the bytes held before the key) and says what the worker
//! does next (`next`: an [`ReqAction`]), when the client pauses for its
//! server and reads again. The worker (`stream.rs`) moves the bytes and
//! opens the connections.

use super::buffer::Buffer;
use super::conn::{Fragment, Multi, MultiMode, ReplySlot, ServerRef};
use super::spool::Spool;
use super::STREAM_HIGH;
use crate::proto::redis::{StreamHead, StreamMachine, StreamStep};
use crate::proto::Op;
use std::ops::Range;

/// A large request being forwarded as it arrives (Redis): its head went to
/// the server (or, before its key, to `held`); the rest passes from the
/// client's input to the server's output as its framing says.
#[derive(Debug)]
pub struct ReqStream {
    /// The request's framing: what each byte of the client's input is for.
    machine: StreamMachine,
    /// The server connection and its id; `None`: the request already
    /// failed (no server), the rest of it is read and dropped.
    server: Option<ServerRef>,
    /// Not reading the client: the server's output is over the high mark.
    blocked: bool,
    /// An MSET sent pair by pair.
    pairs: Option<Box<PairStream>>,
    /// The start of a request whose large argument came before its key
    /// (an EVAL script), held in chunks until the key is read, then
    /// passed to the key's server as that connection drains.
    held: Option<Box<Spool>>,
}

/// An MSET with a large value, sent as one `MSET key value` per pair as
/// the pairs arrive; its reply joins theirs (a `Multi`, one fragment per
/// pair).
#[derive(Debug)]
struct PairStream {
    /// The client's slot for the joined reply.
    seq: u64,
    /// Per server: the connection of its own this MSET's pairs for that
    /// server go on, in order (a small pair never overtakes a large one
    /// for the same key), with its id.
    conns: Vec<(usize, ServerRef)>,
}

/// An MSET pair as the client's input gives it (see `StreamStep::Pair`).
#[derive(Debug, PartialEq, Eq)]
pub struct PairOut {
    /// The pair's index in the MSET.
    pub index: usize,
    /// Its key, in the client's input.
    pub key: Range<usize>,
    /// `MSET key value` as far as it is here.
    pub cmd: Vec<u8>,
    /// Bytes of the client's input it accounts for.
    pub len: usize,
    /// Its value passes as it arrives (after `cmd`).
    pub large: bool,
}

/// What the worker does next for a streamed request.
#[derive(Debug, PartialEq, Eq)]
pub enum ReqAction {
    /// Wait for more of the client's input.
    More,
    /// The key was read: the held bytes go to this server first (as its
    /// output drains, `feed`), then `next` again.
    FeedHeld(ServerRef),
    /// Pass the first `n` bytes of the client's input to the server
    /// (dropped when the request has none).
    Forward(usize),
    /// The key of a held request was read (its bytes are held): route the
    /// request by it and say where with `routed`.
    Route(Vec<u8>),
    /// Answered here (its bytes are consumed; the rest is read and
    /// dropped).
    Refused(Vec<u8>),
    /// Send this MSET pair (its bytes are still in the client's input).
    Pair(PairOut),
    /// A large MSET value passed whole to this server.
    PairEnd(ServerRef),
    /// The request is complete: its server's request ends there.
    Done(Option<ServerRef>),
    /// A protocol error: the client gets it and is closed.
    Fail(Vec<u8>),
}

/// What to do for a request's held bytes with the key's server's output
/// at a size (`ReqStream::feed`).
#[derive(Debug, PartialEq, Eq)]
pub enum FeedStep {
    /// Pass the first `n` held bytes.
    Pass(usize),
    /// All passed (or nothing held).
    Done,
    /// The server has enough queued: write it and wait if it lags.
    Full,
}

impl ReqStream {
    /// A request routed by the key in its head to `server` (none: it
    /// failed, the rest is read and dropped).
    pub fn single(machine: StreamMachine, server: Option<ServerRef>) -> ReqStream {
        ReqStream {
            machine,
            server,
            blocked: false,
            pairs: None,
            held: None,
        }
    }

    /// An MSET sent pair by pair, its joined reply at slot `seq`.
    pub fn pairs(machine: StreamMachine, seq: u64) -> ReqStream {
        ReqStream {
            pairs: Some(Box::new(PairStream {
                seq,
                conns: Vec::new(),
            })),
            ..ReqStream::single(machine, None)
        }
    }

    /// A request whose large argument comes before its key: `head` is held
    /// until the key is read.
    pub fn held(machine: StreamMachine, head: &[u8]) -> ReqStream {
        let mut held = Spool::default();
        held.push(head);
        ReqStream {
            held: Some(Box::new(held)),
            ..ReqStream::single(machine, None)
        }
    }

    /// The reply slot of an MSET sent pair by pair (`head`): one fragment
    /// per pair, joined as a split MSET's. With the number of pairs.
    pub fn pairs_slot(head: &StreamHead) -> (ReplySlot, usize) {
        let pairs = head.args_left / 2;
        let slot = ReplySlot {
            multi: Some(Box::new(Multi {
                req: head.req.clone(),
                bytes: Vec::new(),
                frags: (0..pairs)
                    .map(|i| Fragment {
                        keys: vec![i],
                        ..Fragment::default()
                    })
                    .collect(),
                remaining: pairs,
                error: None,
                mode: MultiMode::Split,
            })),
            ..ReplySlot::default()
        };
        (slot, pairs)
    }

    /// The request's operation.
    pub fn op(&self) -> Op {
        self.machine.op()
    }

    /// The server connection the request streams to.
    pub fn server(&self) -> Option<ServerRef> {
        self.server
    }

    /// The client is not read: its server lags.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Of an MSET sent pair by pair: its reply slot.
    pub fn pairs_seq(&self) -> Option<u64> {
        self.pairs.as_ref().map(|ps| ps.seq)
    }

    /// An MSET's pairs not sent yet (they fail when it ends early).
    pub fn pairs_unsent(&self) -> Range<usize> {
        self.machine.pairs_unsent()
    }

    /// The connection of its own this MSET's pairs for `server` went on.
    pub fn pair_conn(&self, server: usize) -> Option<ServerRef> {
        let ps = self.pairs.as_ref()?;
        ps.conns.iter().find(|e| e.0 == server).map(|e| e.1)
    }

    /// The pairs for `server` now go on `conn`.
    pub fn set_pair_conn(&mut self, server: usize, conn: ServerRef) {
        if let Some(ps) = self.pairs.as_mut() {
            ps.conns.retain(|e| e.0 != server);
            ps.conns.push((server, conn));
        }
    }

    /// The request (a held one once its key was read, one whose key was
    /// in its head, a large MSET value) was routed to `target` (none: it
    /// failed, its error is the reply; any held bytes are dropped and the
    /// rest of the request is read and dropped).
    pub fn routed(&mut self, target: Option<ServerRef>) {
        self.server = target;
        if target.is_none() {
            self.held = None;
        }
    }

    /// The held bytes (passed to the server as it drains).
    pub fn held_mut(&mut self) -> Option<&mut Spool> {
        self.held.as_deref_mut()
    }

    /// The next thing to do for the client's `input` (held and refused
    /// bytes are consumed here; forwarded and pair bytes by the worker).
    pub fn next(&mut self, input: &mut Buffer) -> ReqAction {
        loop {
            if !self.machine.holding() && self.held.is_some() {
                // The key was read: the held bytes go first.
                match self.server {
                    Some(r) if self.held.as_ref().is_some_and(|h| !h.is_empty()) => {
                        return ReqAction::FeedHeld(r)
                    }
                    // Passed, or the server failed: its error is the
                    // reply, the rest of the request is dropped.
                    _ => self.held = None,
                }
                continue;
            }
            let bytes = input.bytes();
            return match self.machine.step(bytes) {
                StreamStep::More => ReqAction::More,
                StreamStep::Forward(n) => ReqAction::Forward(n),
                StreamStep::Hold(n) => {
                    if let Some(held) = self.held.as_mut() {
                        held.push(&bytes[..n]);
                    }
                    input.consume(n);
                    continue;
                }
                StreamStep::Route { key, len } => {
                    let key = bytes[key].to_vec();
                    if let Some(held) = self.held.as_mut() {
                        held.push(&bytes[..len]);
                    }
                    input.consume(len);
                    ReqAction::Route(key)
                }
                StreamStep::Refuse { reply, len } => {
                    input.consume(len);
                    self.held = None;
                    ReqAction::Refused(reply)
                }
                StreamStep::Pair {
                    index,
                    key,
                    cmd,
                    len,
                    large,
                } => ReqAction::Pair(PairOut {
                    index,
                    key,
                    cmd,
                    len,
                    large,
                }),
                StreamStep::PairEnd => match self.server.take() {
                    Some(r) => ReqAction::PairEnd(r),
                    None => continue,
                },
                StreamStep::Done => ReqAction::Done(self.server),
                StreamStep::Fail(reply) => ReqAction::Fail(reply),
            };
        }
    }

    /// After forwarding, the server's output holds `queued` bytes: whether
    /// the client pauses until it drains (it lags, over the high mark).
    pub fn pause_if_lagging(&mut self, queued: usize) -> bool {
        let lags = self.server.is_some() && queued > STREAM_HIGH;
        if lags {
            self.blocked = true;
        }
        lags
    }

    /// What to pass of the held bytes with `queued` bytes on the server's
    /// output: at most the room below the high mark.
    pub fn feed(&self, queued: usize) -> FeedStep {
        let Some(held) = self.held.as_ref() else {
            return FeedStep::Done;
        };
        let n = held.front().len().min(STREAM_HIGH.saturating_sub(queued));
        if n > 0 {
            FeedStep::Pass(n)
        } else if held.is_empty() {
            FeedStep::Done
        } else {
            FeedStep::Full
        }
    }

    /// The client waits for its server to drain.
    pub fn pause(&mut self) {
        self.blocked = true;
    }

    /// The server drained: whether the client was paused and reads again.
    pub fn resume(&mut self) -> bool {
        std::mem::take(&mut self.blocked)
    }

    /// The server connection `lost` closed: if this request streams to
    /// it, the rest of the request is dropped as it arrives. Whether the
    /// client was paused for that connection and must read again.
    pub fn server_lost(&mut self, lost: ServerRef) -> bool {
        if self.server != Some(lost) {
            return false;
        }
        self.server = None;
        std::mem::take(&mut self.blocked)
    }
}

#[cfg(test)]
#[path = "req_stream_tests.rs"]
mod tests;
