//! Large requests streamed to Redis Cluster nodes.
//!
//! A request to a cluster pool can be answered `-MOVED`, `-ASK` or
//! `-TRYAGAIN`, and is then sent again to another node (or later), so its
//! bytes are kept until its reply (`ReplySlot::redirect`). A request whose large
//! argument is streamed (`stream.rs`: routed by its key's slot once its head
//! is parsed, on a dedicated connection to that slot's node) is kept as it
//! passes in a [`Spool`]: a list of 64 KiB chunks. The chunk list exists so
//! that a value of hundreds of megabytes is held without one allocation of
//! its size, and without the client's input buffer or the server's output
//! buffer ever holding it whole: the bytes leave those as they are
//! forwarded. It is bounded by the pool's largest value, which the parser
//! enforces, and freed with the request's slot when the final reply arrives.
//!
//! On a redirection the request goes again on a new dedicated connection to
//! the node named (after `ASKING`, as `cluster.rs` does), fed from the spool
//! as that connection's output drains: never more than `STREAM_HIGH` bytes
//! queued on it. A client that goes away while its request is being sent
//! again leaves that connection with half a command: it is closed.

use super::conn::{Client, Conn, ConnTable, Feed, Redirect, ReplySlot, ReplyTo, ServerRef};
use super::dirty::Dirty;
use super::spool::{Spool, SpoolReader};
use super::{STREAM_HIGH, STREAM_LOW};
use crate::proto::Request;
use crate::stats::shm::StatsSlot;
use crate::stats::ServerField;
use mio::Token;
use std::time::Instant;

/// The spool of the kept request of slot `seq` of a client.
pub(super) fn kept_spool(c: &Client, seq: u64) -> Option<&Spool> {
    c.slot(seq)?.redirect.as_ref()?.spool.as_ref()
}

/// Keep the first `n` bytes of a client's input, passing to the server its
/// streamed request goes to, in that request's spool (its slot is the
/// client's last: nothing else is parsed while it streams).
pub(super) fn spool_passing(c: &mut Client, n: usize) {
    c.keep_input_in_last(n);
}

/// A client leaves: the connection its kept request is being sent again
/// on, which holds half a command (to be closed).
pub(super) fn half_resent(conns: &slab::Slab<Conn>, c: &Client) -> Option<ServerRef> {
    let r = c.head()?.redirect.as_ref()?.feeding?;
    conns
        .server_ref(r)
        .is_some_and(|s| s.feed().is_some())
        .then_some(r)
}

impl ReplySlot {
    /// The reply slot of a streamed request whose head is `head`: in a
    /// cluster pool (`cluster`) it keeps the request (the head now, the rest as it
    /// passes) to follow MOVED and ASK.
    pub(super) fn streamed(cluster: bool, req: &Request, head: &[u8]) -> ReplySlot {
        if !cluster {
            return ReplySlot::default();
        }
        let mut spool = Spool::default();
        spool.push(head);
        ReplySlot {
            redirect: Some(Box::new(Redirect {
                req: req.clone(),
                bytes: head.to_vec(),
                hops: 0,
                tries: 0,
                spool: Some(spool),
                feeding: None,
            })),
            ..ReplySlot::default()
        }
    }
}

/// Connection `st` sends the request kept for reply `to` again, fed from
/// its spool from `at`: the slot names it as the connection feeding
/// (`Redirect::feeding`).
pub(super) fn start_feed(conns: &mut slab::Slab<Conn>, st: Token, to: ReplyTo, at: SpoolReader) {
    let (Some(seq), Some(s)) = (to.seq, conns.server_mut(st.0)) else {
        return;
    };
    s.set_feed(Some(Feed {
        client: to.token,
        client_id: to.id,
        seq,
        at,
    }));
    let sid = s.id();
    let slot = conns.client_mut(to.token.0).and_then(|c| c.slot_mut(seq));
    if let Some(rd) = slot.and_then(|s| s.redirect.as_mut()) {
        rd.feeding = Some(ServerRef::new(st, sid));
    }
}

/// What feeding a connection from the spool of the request it sends
/// again came to ([`feed`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fed {
    /// Nothing: it is not fed, or its output is not low enough yet.
    Idle,
    /// This many bytes queued (none when the spool holds no more yet).
    Queued(usize),
    /// Its client went away (or its request with it): the connection,
    /// id given, holds half a command and is to be closed.
    ClientLeft(u64),
}

impl Fed {
    /// Bytes were queued: the connection is written again.
    pub(super) fn queued(&self) -> bool {
        matches!(*self, Fed::Queued(n) if n > 0)
    }
}

/// Feed connection `st` more of the spool its request is kept in, up to
/// `STREAM_HIGH` bytes, once its output is below `STREAM_LOW`; what is
/// queued is counted as its server's request bytes, and the connection
/// marked to be written. Once the spool is queued whole the request's
/// slot no longer names it as the connection feeding
/// (`Redirect::feeding`). Out of line: only a request sent again from its
/// spool is fed, and the write it follows is every request's.
#[inline(never)]
pub(super) fn feed(
    conns: &mut slab::Slab<Conn>,
    stats: &StatsSlot,
    dirty: &mut Dirty,
    st: Token,
    now: Instant,
) -> Fed {
    let Some(s) = conns.server(st.0) else {
        return Fed::Idle;
    };
    let Some(f) = s.feed() else {
        return Fed::Idle;
    };
    if s.wbuf().len() >= STREAM_LOW {
        return Fed::Idle;
    }
    let (ct, cid, seq) = (f.client, f.client_id, f.seq);
    let fed = match conns.get2_mut(st.0, ct.0) {
        Some((Conn::Server(s), Conn::Client(c))) if c.id() == cid => kept_spool(c, seq)
            .and_then(|sp| s.feed_more(sp, STREAM_HIGH, now))
            .map(|(added, done)| (added, done, s.pool(), s.server())),
        _ => None,
    };
    let Some((added, done, pool, server)) = fed else {
        return Fed::ClientLeft(conns.server(st.0).map_or(0, |s| s.id()));
    };
    if done {
        if let Some(c) = conns.client_mut(ct.0) {
            if let Some(rd) = c.slot_mut(seq).and_then(|s| s.redirect.as_mut()) {
                rd.feeding = None;
            }
        }
    }
    stats.server_add(pool, server, ServerField::RequestBytes, added as u64);
    stats.server_add(pool, server, ServerField::InQueueBytes, added as u64);
    if added > 0 {
        dirty.server(st);
    }
    Fed::Queued(added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::proto::{Limits, Parse, Protocol};
    use crate::stats::carry::Names;
    use crate::stats::shm::Region;
    use crate::worker::conn::Server;

    fn region() -> Region {
        let names = Names {
            pools: vec!["p".into()],
            servers: vec![vec!["a".into(), "b".into()]],
            routes: vec![Vec::new()],
        };
        Region::new(names.layout(), 1).expect("stats region")
    }

    /// Client `Token(0)` (id 10) keeping a request of `len` bytes in the
    /// spool of its slot, and a connection at `Token(1)` fed from it.
    fn table(len: usize) -> (slab::Slab<Conn>, u64) {
        let mut conns = slab::Slab::new();
        let bytes = b"*1\r\n$4\r\nPING\r\n";
        let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(bytes, &Limits::default()) else {
            panic!("request parses");
        };
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        let seq = c.next_seq();
        let mut slot = ReplySlot::streamed(true, &req, bytes);
        let kept = slot.redirect.as_mut().and_then(|r| r.spool.as_mut());
        kept.expect("a spool").push(&vec![b'x'; len]);
        let at = SpoolReader::new(
            slot.redirect
                .as_ref()
                .and_then(|r| r.spool.as_ref())
                .expect("a spool"),
        );
        c.push_reply(slot);
        let ct = Token(conns.insert(Conn::Client(Box::new(c))));
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let mut s = Server::new(Stream::Unix(sock), 20, (0, 1, 0), Instant::now(), true);
        s.set_connected();
        s.set_feed(Some(Feed {
            client: ct,
            client_id: 10,
            seq,
            at,
        }));
        let st = Token(conns.insert(Conn::Server(Box::new(s))));
        if let Some(rd) = conns
            .client_mut(ct.0)
            .and_then(|c| c.slot_mut(seq))
            .and_then(|s| s.redirect.as_mut())
        {
            rd.feeding = Some(ServerRef::new(st, 20));
        }
        (conns, seq)
    }

    fn feeding(conns: &slab::Slab<Conn>, seq: u64) -> Option<ServerRef> {
        conns.client(0)?.slot(seq)?.redirect.as_ref()?.feeding
    }

    fn queued(conns: &slab::Slab<Conn>) -> usize {
        conns.server(1).map_or(0, |s| s.wbuf().len())
    }

    #[test]
    fn a_spool_is_fed_up_to_the_high_mark_then_waits_for_the_output_to_drain() {
        let t = Instant::now();
        let region = region();
        let stats = region.slot(0);
        let mut dirty = Dirty::default();
        let (mut conns, seq) = table(2 * STREAM_HIGH);
        let Fed::Queued(added) = feed(&mut conns, &stats, &mut dirty, Token(1), t) else {
            panic!("fed");
        };
        assert!(added >= STREAM_HIGH && added == queued(&conns));
        assert_eq!(dirty.take_servers(), vec![Token(1)], "to be written");
        assert!(feeding(&conns, seq).is_some(), "more to come");
        assert_eq!(
            feed(&mut conns, &stats, &mut dirty, Token(1), t),
            Fed::Idle,
            "output not drained"
        );
        assert_eq!(
            feed(&mut conns, &stats, &mut dirty, Token(5), t),
            Fed::Idle,
            "no such connection"
        );
    }

    #[test]
    fn a_spool_queued_whole_ends_the_feed() {
        let t = Instant::now();
        let region = region();
        let stats = region.slot(0);
        let mut dirty = Dirty::default();
        let (mut conns, seq) = table(100);
        let whole = 14 + 100;
        let fed = feed(&mut conns, &stats, &mut dirty, Token(1), t);
        assert_eq!(fed, Fed::Queued(whole));
        assert!(fed.queued());
        assert_eq!(queued(&conns), whole);
        assert_eq!(feeding(&conns, seq), None, "the slot no longer names it");
        let fed = feed(&mut conns, &stats, &mut dirty, Token(1), t);
        assert_eq!(fed, Fed::Idle, "fed from nothing");
        assert!(!fed.queued());
    }

    #[test]
    fn a_client_gone_leaves_half_a_command() {
        let t = Instant::now();
        let region = region();
        let stats = region.slot(0);
        let mut dirty = Dirty::default();
        let (mut conns, _) = table(100);
        conns.remove(0);
        let fed = feed(&mut conns, &stats, &mut dirty, Token(1), t);
        assert_eq!(fed, Fed::ClientLeft(20));
        assert!(dirty.take_servers().is_empty());
        assert_eq!(queued(&conns), 0, "nothing queued");
    }
}
