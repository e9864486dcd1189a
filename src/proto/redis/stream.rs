//! One request streamed to its server as it arrives (a bulk argument too
//! large to buffer whole): a state machine that reads the client's input
//! and says what to do with it, one [`StreamStep`] at a time. It does no
//! I/O and holds no bytes; the data path moves them.
//!
//! Built from the head [`super::stream_head`] found, it frames what
//! follows the head:
//!
//! * [`StreamKind::Single`]: the large argument passes as it is, then each
//!   argument after it (header, value and CRLF) as soon as its header is
//!   read and checked ([`super::stream_arg`]).
//! * [`StreamKind::Pairs`] (MSET): each key-value pair becomes
//!   `MSET key value`, the generated header sent in the place of the
//!   pair's own bytes and a large value passed after it as it arrives.
//! * [`StreamKind::Spool`] (an EVAL-like script before its key): the
//!   script and numkeys are held, numkeys checked as redis-server checks
//!   it ([`super::eval_numkeys`]), and the key read whole routes the
//!   request; the held bytes go first, then it continues as `Single`.
//!
//! Each step names how many bytes at the start of the input it accounts
//! for; the caller consumes exactly those before the next step.

use super::reply;
use super::request::{eval_numkeys, stream_arg, stream_pair, whole_arg, Pair};
use super::resp::parse_int;
use super::{StreamHead, StreamKind};
use crate::proto::{Limits, Op};
use std::ops::Range;

/// What to do with the start of the client's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStep {
    /// Nothing to do until more input arrives.
    More,
    /// Pass the first `n` bytes as they are to the server the request (or
    /// the current MSET pair) goes to; dropped when it has none (refused,
    /// or its server failed).
    Forward(usize),
    /// Keep the first `n` bytes: they go to the server once
    /// [`StreamStep::Route`] names it, before anything forwarded after.
    Hold(usize),
    /// The key that routes the request is `key` (a range of the input);
    /// the first `len` bytes (the key's argument) are held with the rest.
    Route {
        /// The key.
        key: Range<usize>,
        /// Bytes of the key's argument.
        len: usize,
    },
    /// Answer the request with `reply` (the connection stays open): the
    /// held bytes and the first `len` are dropped, and so is the rest of
    /// the request as it arrives (it is still framed).
    Refuse {
        /// The error reply.
        reply: Vec<u8>,
        /// Bytes dropped now.
        len: usize,
    },
    /// An MSET pair: `cmd` (`MSET key value`, or with a large value its
    /// head up to the value) goes to the server of `key` (a range of the
    /// input) in the place of the first `len` bytes. A large value then
    /// passes as [`StreamStep::Forward`] steps, ended by
    /// [`StreamStep::PairEnd`].
    Pair {
        /// The pair's index (its fragment of the joined reply).
        index: usize,
        /// The key.
        key: Range<usize>,
        /// What the server is sent now.
        cmd: Vec<u8>,
        /// Bytes of the input it stands for.
        len: usize,
        /// A large value follows.
        large: bool,
    },
    /// The large value of the current pair has passed whole.
    PairEnd,
    /// The request has passed whole: the next input is the next request.
    Done,
    /// A protocol error: reply with it and close the connection (as
    /// redis-server does); the request is abandoned half sent.
    Fail(Vec<u8>),
}

/// Where the machine is between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Arguments framed one by one and forwarded.
    Args,
    /// Held until the key: the next whole argument is numkeys (`key`
    /// false) or the key.
    Held { key: bool },
    /// MSET pairs; `large`: a large value is passing.
    Pairs { large: bool },
    /// Done or failed.
    End,
}

/// The state of one streamed request (see the module's doc).
#[derive(Debug, Clone)]
pub struct StreamMachine {
    phase: Phase,
    /// Bytes of the current argument still to pass (or to hold).
    left: usize,
    /// Arguments after the current one.
    args_left: usize,
    /// The request's arguments (numkeys is checked against them).
    argc: usize,
    /// An MSET sent pair by pair.
    pairs: bool,
    /// Index of the next MSET pair.
    next_pair: usize,
    op: Op,
    limits: Limits,
    /// Smallest MSET value passed as it arrives rather than whole.
    threshold: usize,
}

impl StreamMachine {
    /// The machine for the request `head` starts (its `req.len` bytes are
    /// the head, consumed by the caller); `threshold` is the one `head`
    /// was found with.
    pub fn new(head: &StreamHead, limits: Limits, threshold: usize) -> StreamMachine {
        let phase = match head.kind {
            StreamKind::Single => Phase::Args,
            StreamKind::Pairs => Phase::Pairs { large: false },
            StreamKind::Spool => Phase::Held { key: false },
        };
        StreamMachine {
            phase,
            left: head.body,
            args_left: head.args_left,
            argc: head.args_left + 2,
            pairs: head.kind == StreamKind::Pairs,
            next_pair: 0,
            op: head.req.op,
            limits,
            threshold,
        }
    }

    /// The request's operation.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Still holding: the key that routes the request is not read yet.
    pub fn holding(&self) -> bool {
        matches!(self.phase, Phase::Held { .. })
    }

    /// An MSET's pairs not sent yet, from the index of the next: those
    /// that fail when the request ends early.
    pub fn pairs_unsent(&self) -> Range<usize> {
        if self.pairs {
            self.next_pair..self.next_pair + self.args_left / 2
        } else {
            0..0
        }
    }

    /// An MSET sent pair by pair.
    pub fn pairs(&self) -> bool {
        self.pairs
    }

    /// The next step for `input`, the start of the client's unread input
    /// (see [`StreamStep`] for the bytes each accounts for).
    pub fn step(&mut self, input: &[u8]) -> StreamStep {
        loop {
            if self.left > 0 {
                let n = self.left.min(input.len());
                if n == 0 {
                    return StreamStep::More;
                }
                self.left -= n;
                return if self.holding() {
                    StreamStep::Hold(n)
                } else {
                    StreamStep::Forward(n)
                };
            }
            match self.phase {
                Phase::End => return StreamStep::Done,
                Phase::Held { key } => return self.held_arg(input, key),
                Phase::Pairs { large: true } => {
                    self.phase = Phase::Pairs { large: false };
                    return StreamStep::PairEnd;
                }
                Phase::Pairs { large: false } => return self.pair(input),
                Phase::Args if self.args_left == 0 => {
                    self.phase = Phase::End;
                    return StreamStep::Done;
                }
                Phase::Args => match stream_arg(input, &self.limits) {
                    Ok(None) => return StreamStep::More,
                    // The header passes as part of the argument.
                    Ok(Some((header, n))) => {
                        self.args_left -= 1;
                        self.left = header + n + 2;
                    }
                    Err(reply) => return self.fail(reply),
                },
            }
        }
    }

    /// numkeys or the key, read whole while the script is held.
    fn held_arg(&mut self, input: &[u8], key: bool) -> StreamStep {
        let (value, len) = match whole_arg(input, &self.limits) {
            Ok(None) => return StreamStep::More,
            Ok(Some(arg)) => arg,
            Err(reply) => return self.fail(reply),
        };
        self.args_left = self.args_left.saturating_sub(1);
        if key {
            self.phase = Phase::Args;
            return StreamStep::Route { key: value, len };
        }
        let name = match self.op {
            Op::Redis(op) => op.cmd.name(),
            Op::Mc(_) => "",
        };
        match eval_numkeys(parse_int(&input[value]), self.argc, name) {
            Ok(()) => {
                self.phase = Phase::Held { key: true };
                StreamStep::Hold(len)
            }
            Err(reply) => {
                self.phase = Phase::Args;
                StreamStep::Refuse { reply, len }
            }
        }
    }

    /// The next MSET pair, once its key and value header (and a small
    /// value whole) are there.
    fn pair(&mut self, input: &[u8]) -> StreamStep {
        if self.args_left == 0 {
            self.phase = Phase::End;
            return StreamStep::Done;
        }
        let pair = match stream_pair(input, &self.limits, self.threshold) {
            Ok(None) => return StreamStep::More,
            Ok(Some(pair)) => pair,
            Err(reply) => return self.fail(reply),
        };
        let index = self.next_pair;
        self.next_pair += 1;
        self.args_left = self.args_left.saturating_sub(2);
        let (key, len, body) = match &pair {
            Pair::Small { key, len, .. } => (key.clone(), *len, 0),
            Pair::Large { key, head, body } => (key.clone(), *head, *body),
        };
        let mut cmd = Vec::with_capacity(len + 32);
        reply::array(3, &mut cmd);
        reply::bulk(b"MSET", &mut cmd);
        reply::bulk(&input[key.clone()], &mut cmd);
        match &pair {
            Pair::Small { value, .. } => reply::bulk(&input[value.clone()], &mut cmd),
            Pair::Large { body, .. } => {
                cmd.extend_from_slice(format!("${}\r\n", body - 2).as_bytes())
            }
        }
        self.left = body;
        self.phase = Phase::Pairs { large: body > 0 };
        StreamStep::Pair {
            index,
            key,
            cmd,
            len,
            large: body > 0,
        }
    }

    fn fail(&mut self, reply: Vec<u8>) -> StreamStep {
        self.phase = Phase::End;
        StreamStep::Fail(reply)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
