//! Connection state: clients, servers, and the per-request slots that keep
//! a client's replies in the order it sent its requests.

pub use super::client_conn::Client;
pub use super::handle::{ClientRef, ServerRef};
pub use super::rep_stream::RepStream;
pub use super::req_stream::ReqStream;
pub use super::server_conn::Server;
use super::spool::{Spool, SpoolReader};
use crate::proto::{Op, Request};
use mio::Token;
use std::time::Instant;

/// The worker's pool of buffers and of its clients' reply queues.
pub type BufPool = super::buffer::Pools<ReplySlot>;

/// A reply being assembled for one client request, in request order.
#[derive(Debug, Default)]
pub struct ReplySlot {
    /// The reply is complete and can be written once earlier slots are.
    pub ready: bool,
    /// Reply bytes (empty until ready, except for a direct write).
    pub out: Vec<u8>,
    /// Close the client once this reply is written (quit, fatal error).
    pub close_after: bool,
    /// Fragments of a multi-key or broadcast request.
    pub multi: Option<Box<Multi>>,
    /// A read on a replicated pool: the other replicas to try on failure.
    pub retry: Option<Box<Retry>>,
    /// A request to a Redis Cluster: kept to follow MOVED and ASK.
    pub redirect: Option<Box<Redirect>>,
    /// A large reply held in chunks (instead of `out`): it passes to the
    /// client's output as that drains, at most [`HELD_HIGH`] at a time.
    pub held: Option<Box<Spool>>,
}

/// Most output a client gets from held replies before it drains it.
pub const HELD_HIGH: usize = 1024 * 1024;

/// A Redis Cluster request kept until its reply, to be sent again to the
/// node a `-MOVED` or `-ASK` names.
#[derive(Debug)]
pub struct Redirect {
    /// The request.
    pub req: Request,
    /// Its bytes (of a streamed request: its head, up to the large value).
    pub bytes: Vec<u8>,
    /// Redirections followed so far.
    pub hops: u8,
    /// TRYAGAIN replies waited out so far.
    pub tries: u8,
    /// A streamed request: every byte of it, kept in chunks as it passed
    /// (see `worker/cluster_stream.rs`).
    pub spool: Option<Spool>,
    /// The dedicated connection (and its id) it is being sent again on,
    /// from `spool`.
    pub feeding: Option<ServerRef>,
}

/// The servers a read asks in turn: inline up to four (a moved key's read
/// asks two or three; every such read would allocate otherwise).
pub type Servers = smallvec::SmallVec<[usize; 4]>;

/// A read's request bytes kept to send it again: inline up to 64 (a GET
/// of a key of up to 40 bytes; its box is then the one allocation).
pub type ReadBytes = smallvec::SmallVec<[u8; 64]>;

/// What a failed read of a replicated pool (or a missed read of a moved
/// key) needs to be sent again.
#[derive(Debug)]
pub struct Retry {
    /// The request.
    pub req: Request,
    /// Its bytes.
    pub bytes: ReadBytes,
    /// The replicas, in the order they are tried.
    pub replicas: Servers,
    /// Index of the next replica to try.
    pub next: usize,
    /// A miss is asked of the next server too: a migrating pool's read of
    /// a moved key, asked where the key may be (`migrate.rs`).
    pub on_miss: bool,
    /// Where such a read finds its key teaches the order of the next
    /// reads (`ReadOrder`): not when the order came from the migrator's
    /// map of moved keys.
    pub learns: bool,
    /// A miss of the last server pulls the key instead of being the
    /// answer: a memcached read of a key the migrator's map says moved,
    /// asked of its new owner only (`migrate.rs`, `Client::pull_after_miss`).
    pub pull_on_miss: bool,
}

impl Retry {
    /// For a read of a moved key (`on_miss`, servers in `ReadOrder`'s
    /// order: the new owner last), the key's newest old owner and whether
    /// the server that answered was the new owner.
    pub fn found_at(&self) -> Option<(usize, bool)> {
        if !self.learns {
            return None;
        }
        let new = *self.replicas.last()?;
        let old = self.replicas.iter().copied().find(|&s| s != new)?;
        let from = self.replicas.get(self.next.checked_sub(1)?)?;
        Some((old, *from == new))
    }

    /// The next replica to try, taken; `None` once every one was.
    pub fn take_next(&mut self) -> Option<usize> {
        let server = *self.replicas.get(self.next)?;
        self.next += 1;
        Some(server)
    }
}

/// Which connection to a server a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Its slot's shared connection, opened if there is none.
    Shared,
    /// A new connection for one request only (a streamed, blocking or
    /// pinned one, a subscriber's): it takes no other request, so none
    /// waits behind it, and closes once that request is answered (or its
    /// client leaves). Its slot still gives its protocol (RESP2 or RESP3).
    Dedicated,
    /// The slot's connection for a health probe: opened even while the
    /// server rests after failures.
    Probe,
}

/// How a request split across servers is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiMode {
    /// Keys split per server, replies merged in key order.
    Split,
    /// The same request to every server; replies merged by the protocol.
    Broadcast,
    /// Redis `INFO` to every server, merged with the proxy's own figures
    /// for the pool, taken when the request was read.
    Info(crate::proto::redis::info::ProxyFigures),
    /// A write to every replica: the reply of the first replica that
    /// answered (a replica that could not be reached does not fail it).
    Replicate,
    /// A zone pool's write with `zone_writes: async`: to every zone, one
    /// fragment each in zone order, answered as soon as the first zone
    /// that did not fail (not reached, or an error) has answered, without
    /// waiting for the zones after it: the local zone's reply while it is
    /// there, the next zone's when it is lost.
    Zones,
}

/// A multi-key (or broadcast) request waiting for its fragments.
#[derive(Debug)]
pub struct Multi {
    /// The parsed request (its key ranges point into `bytes`).
    pub req: Request,
    /// The request's bytes.
    pub bytes: Vec<u8>,
    /// Per fragment: the key indices it carries and its reply.
    pub frags: Vec<Fragment>,
    /// Fragments still to answer.
    pub remaining: usize,
    /// The first failure, as the error reply to send instead of a merge.
    pub error: Option<Vec<u8>>,
    /// How the replies are joined.
    pub mode: MultiMode,
}

impl Multi {
    /// Fragment `frag` failed and its keys go again as new fragments, one
    /// per list of `keys` (their `attempt`): it answers nothing now, and
    /// the new ones are counted before any is sent, so none completes the
    /// request early. The index of the first new fragment.
    pub fn refragment<'a>(
        &mut self,
        frag: usize,
        keys: impl IntoIterator<Item = &'a Vec<usize>>,
        attempt: u8,
    ) -> usize {
        self.frags[frag].keys.clear();
        self.frags[frag].reply.clear();
        let base = self.frags.len();
        for keys in keys {
            self.frags.push(Fragment {
                keys: keys.clone(),
                attempt,
                ..Fragment::default()
            });
            self.remaining += 1;
        }
        base
    }
}

/// The zone of server `s` as a fragment's `attempt` carries it.
pub(super) fn zone_tag(routing: &crate::config::Routing, s: usize) -> u8 {
    routing.zone_of(s).min(u8::MAX as usize) as u8
}

impl ReplySlot {
    /// The reply slot of a request to a Redis Cluster: the request kept
    /// until its reply, to be sent again where a MOVED or ASK says.
    pub(super) fn redirected(req: &Request, bytes: &[u8]) -> ReplySlot {
        ReplySlot {
            redirect: Some(Box::new(Redirect {
                req: req.clone(),
                bytes: bytes.to_vec(),
                hops: 0,
                tries: 0,
                spool: None,
                feeding: None,
            })),
            ..ReplySlot::default()
        }
    }

    /// The reply slot of a request sent to several owners of its key, a
    /// fragment each, in the order of `zones` (each owner's zone: a zone
    /// pool's fragments know their zone, see `finish_multi`).
    pub(super) fn for_owners(req: &Request, zones: &[u8], mode: MultiMode) -> ReplySlot {
        ReplySlot {
            multi: Some(Box::new(Multi {
                req: req.clone(),
                bytes: Vec::new(),
                frags: zones
                    .iter()
                    .map(|&zone| Fragment {
                        attempt: zone,
                        ..Fragment::default()
                    })
                    .collect(),
                remaining: zones.len(),
                error: None,
                mode,
            })),
            ..ReplySlot::default()
        }
    }
}

/// One server's share of a multi-key request.
#[derive(Debug, Default)]
pub struct Fragment {
    /// Indices into the request's keys.
    pub keys: Vec<usize>,
    /// The server's reply.
    pub reply: Vec<u8>,
    /// Or, when it was large, the reply held in chunks.
    pub held: Option<Box<Spool>>,
    /// The server could not be reached (the reply is the error to send).
    pub failed: bool,
    /// Which replica of its keys this fragment went to (0 = the owner; in
    /// a zone pool, the zone, 0 = the local one).
    pub attempt: u8,
    /// Its reply came (or it failed).
    pub answered: bool,
    /// Redis Cluster redirections followed for this fragment.
    pub hops: u8,
    /// Redis Cluster TRYAGAIN replies waited out for this fragment.
    pub tries: u8,
    /// A zone pool's read of keys another zone's fragment missed: when it
    /// fails, its keys are misses rather than the request's error.
    pub fallback: bool,
}

/// A (dedicated) server connection that carries a streamed request.
#[derive(Debug)]
pub struct SrvStream {
    /// The client sending it.
    pub client: Token,
    /// That client's id.
    pub client_id: u64,
}

/// A (dedicated) server connection a kept, streamed request is sent again
/// on from its spool (Redis Cluster, after MOVED or ASK), filled as the
/// connection's output drains.
#[derive(Debug)]
pub struct Feed {
    /// The client the request is of.
    pub client: Token,
    /// That client's id.
    pub client_id: u64,
    /// The request's sequence number (its slot holds the spool).
    pub seq: u64,
    /// How far the spool was queued.
    pub at: SpoolReader,
}

/// What a server reply answers.
#[derive(Debug, Clone, Copy)]
pub enum Waiter {
    /// A client's request (or one fragment of it): a [`ReplyTo`] with its
    /// reply slot, built by [`ReplyTo::waiter`] and read back by
    /// [`Waiter::reply_to`]. Its fields are kept apart rather than as a
    /// `ReplyTo` because the slot is never absent here: an optional one
    /// would widen every in-flight request by 8 bytes.
    Client {
        /// Client token.
        token: Token,
        /// Client id (stale if the client is gone).
        id: u64,
        /// Request sequence number.
        seq: u64,
        /// Fragment index for multi-key requests.
        frag: Option<u32>,
    },
    /// A request of the proxy's own (AUTH, SELECT on connect): the reply is dropped.
    Internal,
    /// `CLUSTER SLOTS` of a Redis Cluster pool: the reply is the new slot map.
    SlotMap,
    /// A read of a key being copied from a warm pool to a cold one
    /// (`warm.rs`; the state is the worker's `warms[idx]`).
    Warm {
        /// Index into the worker's warm copies.
        idx: u32,
    },
    /// One step of pulling a moved key to its new owner for a held
    /// request (see `migrate.rs`).
    Pull {
        /// Client token.
        token: Token,
        /// Client id.
        id: u64,
        /// Index of the key in the client's gate.
        idx: u32,
        /// Which step.
        part: super::pull::PullPart,
    },
}

impl Waiter {
    /// Where the reply goes, when a client waits for it.
    #[inline]
    pub fn reply_to(&self) -> Option<ReplyTo> {
        match *self {
            Waiter::Client {
                token,
                id,
                seq,
                frag,
            } => Some(ReplyTo::new(token, id, Some(seq), frag)),
            _ => None,
        }
    }
}

/// Where a request's reply goes: its client (the token, and the id, so a
/// token reused by a later client is not mistaken for it), the request's
/// place in that client's order of replies (`None`: a noreply request,
/// answered nowhere) and, for a request split over servers, its fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    /// Client token.
    pub token: Token,
    /// Client id.
    pub id: u64,
    /// Reply sequence number.
    pub seq: Option<u64>,
    /// Fragment index of a split request.
    pub frag: Option<u32>,
}

impl ReplyTo {
    /// Client `id` at `token`: its reply slot `seq`, and the fragment of a
    /// split request.
    pub fn new(token: Token, id: u64, seq: Option<u64>, frag: Option<u32>) -> ReplyTo {
        ReplyTo {
            token,
            id,
            seq,
            frag,
        }
    }

    /// Client `id` at `token`, before its reply slot is reserved.
    pub fn client(token: Token, id: u64) -> ReplyTo {
        ReplyTo {
            token,
            id,
            seq: None,
            frag: None,
        }
    }

    /// What waits for the server's reply (nothing for a noreply request).
    pub fn waiter(self) -> Option<Waiter> {
        self.seq.map(|seq| Waiter::Client {
            token: self.token,
            id: self.id,
            seq,
            frag: self.frag,
        })
    }
}

/// A request sent (or queued) to a server, waiting for its reply.
#[derive(Debug, Clone, Copy)]
pub struct Inflight {
    /// Who gets the reply.
    pub waiter: Waiter,
    /// Operation (reply parsing depends on it).
    pub op: Op,
    /// Request bytes (queue gauges).
    pub len: usize,
    /// When the request was queued (latency).
    pub sent_at: Instant,
    /// Where its timeout counts from: `sent_at`, or the end of a streamed
    /// request queued before it.
    pub timed_from: Instant,
    /// First key of the request, kept while the slow log is on.
    pub key: crate::stats::slowlog::KeyPrefix,
}

impl Inflight {
    /// What this request, lost with its server connection (`fault`),
    /// leads to; the worker carries it out (`Worker::close_all`).
    pub fn lost(&self, fault: &super::fault::ServerFault, proto: crate::proto::Protocol) -> Lost {
        match self.waiter {
            Waiter::Client {
                token,
                id,
                seq,
                frag,
            } => {
                let mut reply = Vec::new();
                fault.write_reply(proto, self.op, &mut reply);
                Lost::Fail {
                    to: ReplyTo::new(token, id, Some(seq), frag),
                    reply,
                }
            }
            Waiter::Internal => Lost::Nothing,
            Waiter::SlotMap => Lost::SlotMap,
            Waiter::Warm { idx } => Lost::Warm { idx },
            Waiter::Pull {
                token,
                id,
                idx,
                part,
            } => Lost::Pull {
                token,
                id,
                idx,
                part,
            },
        }
    }
}

/// What a request lost with its server connection leads to
/// ([`Inflight::lost`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Lost {
    /// A request of the proxy's own: nothing waits for it.
    Nothing,
    /// The cluster pool's `CLUSTER SLOTS` got no answer: the map refresh
    /// failed (another may be asked).
    SlotMap,
    /// A step of a pull got no answer (the pull gives up on that key).
    Pull {
        token: Token,
        id: u64,
        idx: u32,
        part: super::pull::PullPart,
    },
    /// A warm-up read got no answer (the key is not copied).
    Warm { idx: u32 },
    /// The client is answered with the connection's error, `reply`.
    Fail { to: ReplyTo, reply: Vec<u8> },
}

/// Where a request came from: its client's connection and id, and its pool.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    pub token: Token,
    pub client_id: u64,
    pub pool: usize,
}

impl Origin {
    /// Where the request's one reply goes: its client, in order.
    pub fn reply_to(self) -> ReplyTo {
        ReplyTo::client(self.token, self.client_id)
    }
}

/// A connection of the worker.
#[derive(Debug)]
pub enum Conn {
    /// Client side.
    Client(Box<Client>),
    /// Server side.
    Server(Box<Server>),
}

/// The worker's connections by token index, looked up by the kind wanted:
/// `None` when the slot is free or holds the other kind (a token outlives
/// its connection: a reply may come for a client that has gone).
pub trait ConnTable {
    /// The client at `i`.
    fn client(&self, i: usize) -> Option<&Client>;
    /// The client at `i`, to change.
    fn client_mut(&mut self, i: usize) -> Option<&mut Client>;
    /// The server connection at `i`.
    fn server(&self, i: usize) -> Option<&Server>;
    /// The server connection at `i`, to change.
    fn server_mut(&mut self, i: usize) -> Option<&mut Server>;

    /// The client `r` names, if it is still connected (its token was not
    /// reused by a later client since).
    #[inline]
    fn client_ref(&self, r: ClientRef) -> Option<&Client> {
        self.client(r.token.0).filter(|c| c.id() == r.id)
    }

    /// [`ConnTable::client_ref`], to change it.
    #[inline]
    fn client_ref_mut(&mut self, r: ClientRef) -> Option<&mut Client> {
        self.client_mut(r.token.0).filter(|c| c.id() == r.id)
    }

    /// Queue a reply the proxy composed itself for the client at
    /// `token` ([`Client::push_ready`]), if it is still connected.
    #[inline]
    fn push_ready(&mut self, token: Token, out: Vec<u8>, close_after: bool) {
        if let Some(c) = self.client_mut(token.0) {
            c.push_ready(out, close_after);
        }
    }

    /// Whether the client at `token` speaks RESP3 (it said `HELLO 3`):
    /// its requests take the connections that did too
    /// (`PoolRt::slot_for`). A client gone speaks RESP2.
    #[inline]
    fn resp3(&self, token: Token) -> bool {
        matches!(self.client(token.0), Some(c) if c.session().resp3)
    }

    /// Reserve the next reply slot of the client at `token`, `slot`: the
    /// sequence its reply fills. `None` for a noreply request (no reply
    /// comes to wait for) or a client that has gone.
    #[inline]
    fn push_slot(&mut self, token: Token, noreply: bool, slot: ReplySlot) -> Option<u64> {
        if noreply {
            return None;
        }
        let c = self.client_mut(token.0)?;
        let seq = c.next_seq();
        c.push_reply(slot);
        Some(seq)
    }

    /// The server connection `r` names, if it is still open (its token
    /// was not reused by another connection since).
    #[inline]
    fn server_ref(&self, r: ServerRef) -> Option<&Server> {
        self.server(r.token.0).filter(|s| s.id() == r.id)
    }

    /// [`ConnTable::server_ref`], to change it.
    #[inline]
    fn server_ref_mut(&mut self, r: ServerRef) -> Option<&mut Server> {
        self.server_mut(r.token.0).filter(|s| s.id() == r.id)
    }
}

impl ConnTable for slab::Slab<Conn> {
    #[inline]
    fn client(&self, i: usize) -> Option<&Client> {
        match self.get(i) {
            Some(Conn::Client(c)) => Some(c),
            _ => None,
        }
    }

    #[inline]
    fn client_mut(&mut self, i: usize) -> Option<&mut Client> {
        match self.get_mut(i) {
            Some(Conn::Client(c)) => Some(c),
            _ => None,
        }
    }

    #[inline]
    fn server(&self, i: usize) -> Option<&Server> {
        match self.get(i) {
            Some(Conn::Server(s)) => Some(s),
            _ => None,
        }
    }

    #[inline]
    fn server_mut(&mut self, i: usize) -> Option<&mut Server> {
        match self.get_mut(i) {
            Some(Conn::Server(s)) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
