//! Replies coming back: filling a client's slot, joining the fragments of
//! split requests, and retrying failed reads on other replicas.

use super::conn::{Conn, Multi, MultiMode};
use super::Worker;
use mio::Token;

impl Worker<'_> {
    /// Deliver a reply for one request or fragment. `is_error`: the reply
    /// is an error; `unreachable`: the server could not be reached (the
    /// reply is the error to send if no other replica can answer).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fragment_done(
        &mut self,
        token: Token,
        id: u64,
        seq: u64,
        frag: Option<u32>,
        reply: Vec<u8>,
        is_error: bool,
        unreachable: bool,
    ) {
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        if c.id != id {
            return;
        }
        let pool = c.pool;
        if unreachable {
            let has_retry = c.slot_mut(seq).is_some_and(|s| s.retry.is_some());
            if frag.is_none() && has_retry && self.retry_read(token, id, seq, pool) {
                return;
            }
            if let Some(fi) = frag {
                if self.retry_fragment(token, id, seq, fi as usize, pool) {
                    self.fragment_settled(token, seq);
                    return;
                }
            }
        }
        let proto = self.pools[pool].proto;
        let Some(Conn::Client(c)) = self.conns.get_mut(token.0) else {
            return;
        };
        let Some(slot) = c.slot_mut(seq) else {
            return;
        };
        match (frag, slot.multi.as_mut()) {
            (Some(fi), Some(m)) => {
                if let Some(f) = m.frags.get_mut(fi as usize) {
                    f.failed = unreachable;
                    if is_error && m.mode == MultiMode::Split && m.error.is_none() {
                        m.error = Some(reply);
                    } else {
                        f.reply = reply;
                    }
                }
                m.remaining = m.remaining.saturating_sub(1);
                if m.remaining == 0 {
                    if let Some(m) = slot.multi.take() {
                        slot.out = match m.error {
                            Some(e) => e,
                            None => merge(proto, &m),
                        };
                    }
                    slot.ready = true;
                }
            }
            _ => {
                slot.out = reply;
                slot.ready = true;
                slot.retry = None;
            }
        }
        if seq == c.head_seq {
            let added = c.drain_ready();
            if !c.wbuf.is_empty() {
                self.dirty_clients.push(token);
            }
            self.add_out(added);
        }
    }

    /// A fragment was replaced by retries: count it as answered.
    fn fragment_settled(&mut self, token: Token, seq: u64) {
        if let Some(Conn::Client(c)) = self.conns.get_mut(token.0) {
            if let Some(m) = c.slot_mut(seq).and_then(|s| s.multi.as_mut()) {
                m.remaining = m.remaining.saturating_sub(1);
            }
        }
    }
}

fn merge(proto: crate::proto::Protocol, m: &Multi) -> Vec<u8> {
    let mut out = Vec::new();
    match m.mode {
        MultiMode::Broadcast => {
            let replies: Vec<&[u8]> = m.frags.iter().map(|f| f.reply.as_slice()).collect();
            proto.merge_broadcast(&replies, &mut out);
        }
        MultiMode::Replicate => {
            let pick = m
                .frags
                .iter()
                .find(|f| !f.failed)
                .or_else(|| m.frags.first());
            if let Some(f) = pick {
                out.extend_from_slice(&f.reply);
            }
        }
        MultiMode::Split => {
            let frags: Vec<(&[usize], &[u8])> = m
                .frags
                .iter()
                .map(|f| (f.keys.as_slice(), f.reply.as_slice()))
                .collect();
            proto.merge_responses(&m.bytes, &m.req, &frags, &mut out);
        }
    }
    out
}
