//! How a request goes out once the type that decides it has planned it
//! (the pool's placement, a zone pool's owners, a `Multi`'s fragments):
//! a [`SendPlan`] names the reply slot, the servers and what each is sent;
//! `Worker::send_plan` (`forward.rs`) carries it out without a decision of
//! its own. The planners (`key_groups.rs`, `zones.rs`, `keyspace.rs`,
//! `pool.rs`) build these values and are unit-tested on them. The copies
//! the proxy sends for itself, fire and forget (a shadow pool's, a write's
//! to the other zones, a warm-up copy's reads and store), and a pull's
//! commands, are planned the same way, as a [`CopyPlan`] that
//! `Worker::send_copy` carries out. A request on a server connection of
//! its own (a blocking command, a streamed one, an MSET's pair, a
//! transaction's or a subscriber's command) is a [`Dedicated`] that
//! `Worker::send_dedicated` (`dedicated.rs`) carries out.

use super::conn::{ReplySlot, ReplyTo, Waiter};
use super::fault::ServerFault;
use crate::proto::{Op, Protocol, Request};
use mio::Token;
use smallvec::SmallVec;
use std::borrow::Cow;

/// A split request's key indices per server: (server, indices in client
/// order), in the order the servers first appear.
pub(super) type KeyGroups = SmallVec<[(usize, Vec<usize>); 4]>;

/// How a request goes out, as the type that owns what it is decided on
/// planned it (the pool's placement, a `Multi`'s fragments): the reply
/// slot its client keeps for it, the servers it goes to and what each is
/// sent. `Worker::send_plan` carries it out and decides nothing.
#[derive(Debug)]
pub(super) struct SendPlan {
    /// The slot its client keeps for the reply (`None`: the request's
    /// slot is there already, as for keys sent again).
    pub slot: Option<ReplySlot>,
    /// The servers, in order, each with its fragment's keys (indices into
    /// the request's keys; empty unless `write` is `Fragment`).
    pub to: KeyGroups,
    /// The first server's fragment of the slot, the next ones' following
    /// (`None`: the request whole, to its one server).
    pub frag: Option<u32>,
    /// What each server is sent.
    pub write: Write,
    /// A zone pool's `async` write: per server (same index), whether it is
    /// a remote zone's, bounded as a copy is: not queued on a connection
    /// that already holds as much as a shadow's may (its fragment then
    /// fails, counted as a dropped copy), so that a stalled remote zone
    /// costs no memory. Empty for any other plan.
    pub bounded: SmallVec<[bool; 4]>,
}

/// A request the proxy sends for itself, as the type that owns its
/// decision planned it: a copy, fire and forget (`Shadows::copy`,
/// `PoolRt::zone_copy`, `Warms`), or a pull's command (`CopyPlan::own`).
/// Nothing of it reaches a client, and no client's slot waits for it.
/// `Worker::send_copy` carries it out and decides nothing.
#[derive(Debug)]
pub(super) struct CopyPlan {
    /// The pool whose servers it goes to.
    pub pool: usize,
    /// Its servers, in order, each with its fragment's keys (indices into
    /// the copied request's keys; empty unless `write` is `Fragment`).
    /// `None`: the pool has no live server for those keys, and that part
    /// is dropped.
    pub to: SmallVec<[(Option<usize>, Vec<usize>); 4]>,
    /// What each server is sent: the copied request (`Request`,
    /// `Fragment`) or the proxy's own bytes (`Bytes`).
    pub write: Write,
    /// What it is, to read its reply.
    pub op: Op,
    /// Who its reply goes to: nobody (`Waiter::Internal`), or the warm-up
    /// copy or the pull that reads it.
    pub waiter: Waiter,
    /// The client (token, id) whose connection slot to its server it
    /// takes (a pull's, queued behind that client's requests); `None`: the
    /// first slot.
    pub client: Option<(Token, u64)>,
    /// Bounded as a shadow's copy is: not queued on a connection that
    /// already holds as much as one may (`shadow::has_copy_room`), nor
    /// without a server, but dropped and counted (`shadow_dropped`), so
    /// that a stalled server costs no memory and no client waits.
    pub bounded: bool,
}

impl CopyPlan {
    /// The proxy's own request, `bytes` to `server` of pool `pool` (a
    /// warm-up copy's, a pull's), whose protocol is `proto`, its reply going
    /// to `waiter`, on `client`'s connection slot (`None`: the first);
    /// not bounded. `None` when it is not a request the protocol reads
    /// back, and so is not sent.
    pub(super) fn own(
        proto: Protocol,
        pool: usize,
        server: usize,
        client: Option<(Token, u64)>,
        waiter: Waiter,
        bytes: Vec<u8>,
    ) -> Option<CopyPlan> {
        let op = proto.own_request_op(&bytes)?;
        let mut to = SmallVec::new();
        to.push((Some(server), Vec::new()));
        Some(CopyPlan {
            pool,
            to,
            write: Write::Bytes(bytes.into()),
            op,
            waiter,
            client,
            bounded: false,
        })
    }

    /// The servers it goes to, in order.
    #[cfg(test)]
    pub(super) fn servers(&self) -> Vec<Option<usize>> {
        self.to.iter().map(|&(s, _)| s).collect()
    }
}

/// What each server of a `SendPlan` is sent.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Write {
    /// The request, as its protocol writes it for a server.
    Request,
    /// The request's bytes as they came (a broadcast).
    Raw,
    /// These bytes (a SCAN with its server's cursor, INFO's own).
    Bytes(Cow<'static, [u8]>),
    /// The fragment of the request naming the server's keys.
    Fragment,
}

/// A request that a plan does not send.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotSent {
    /// No server to send it to: the pool's error.
    NoServer,
    /// Answered here with these bytes (empty: nothing, a memcached
    /// `noreply` refusal).
    Answered(Vec<u8>),
}

impl SendPlan {
    /// The request whole to `server`, written as `write`, its reply into
    /// `slot`.
    pub(super) fn whole(slot: ReplySlot, server: usize, write: Write) -> SendPlan {
        let mut to = KeyGroups::new();
        to.push((server, Vec::new()));
        SendPlan {
            slot: Some(slot),
            to,
            frag: None,
            write,
            bounded: SmallVec::new(),
        }
    }

    /// The request to each of `servers`, a fragment each (from 0) of
    /// `slot`, written as `write`.
    pub(super) fn each(
        slot: ReplySlot,
        servers: impl IntoIterator<Item = usize>,
        write: Write,
    ) -> SendPlan {
        SendPlan {
            slot: Some(slot),
            to: servers.into_iter().map(|s| (s, Vec::new())).collect(),
            frag: Some(0),
            write,
            bounded: SmallVec::new(),
        }
    }

    /// The servers it goes to, in order.
    #[cfg(test)]
    pub(super) fn servers(&self) -> Vec<usize> {
        self.to.iter().map(|&(s, _)| s).collect()
    }
}

/// How a request goes out on a connection of its own, as its feature
/// planned it.
#[derive(Debug)]
pub(super) struct Dedicated<'a> {
    pub pool: usize,
    /// The server (none: no server is up, the pool's error is the reply).
    pub server: Option<usize>,
    pub op: Op,
    /// The connection it goes on: one the request's feature holds already
    /// (an MSET's for this server), or none and one is opened.
    pub conn: Option<Token>,
    /// What the connection is for.
    pub usage: Usage,
    /// Where the reply goes.
    pub reply: Reply,
    /// The key noted for the hot-key sample and the slow log once the
    /// connection is there (none: noted already, or not at all).
    pub note: Option<&'a [u8]>,
    /// What is queued on it.
    pub write: Sent<'a>,
}

/// What a connection of its own is for: how it is named once opened,
/// and whether the rest of the request streams to it after what is
/// queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Usage {
    /// A blocking command: the client blocks on it (`block_on`).
    Blocking,
    /// A streamed request, the rest passed as it arrives.
    Stream,
    /// A pair of an MSET sent pair by pair, for this server: the MSET's
    /// next pairs for it go on it too; `large`: its value streams.
    Pair { server: usize, large: bool },
    /// A transaction's, opened for its command `name`: pinned to its
    /// client, and the MULTI answered here sent first when `Txn::pinned`
    /// says so.
    Pin { name: &'static str },
    /// A subscriber's push connection: what its server sends goes to the
    /// client as it arrives (`Subs::opened`).
    Push,
}

/// What a connection of its own that could not be opened leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failed {
    /// The error in the request's slot, counted as a forward error (and a
    /// cluster node maybe failed over), as any request's.
    Counted,
    /// The error sent to the client at once, not counted: a transaction's
    /// command, whose client is told its connection could not be had.
    Told,
    /// Nothing said: a subscriber's command, which its server would have
    /// confirmed (the client's count stays as it was).
    Silent,
}

impl Usage {
    /// What a failure to open the connection leads to.
    pub(super) fn failed(self) -> Failed {
        match self {
            Usage::Pin { .. } => Failed::Told,
            Usage::Push => Failed::Silent,
            Usage::Blocking | Usage::Stream | Usage::Pair { .. } => Failed::Counted,
        }
    }

    /// The rest of the request streams to the connection.
    pub(super) fn streams(self) -> bool {
        matches!(self, Usage::Stream | Usage::Pair { large: true, .. })
    }
}

/// Where a dedicated request's reply goes.
#[derive(Debug)]
pub(super) enum Reply {
    /// A new slot of its client, this one once the request is queued (a
    /// default one holds a failure's error); `noreply`: none.
    New { slot: ReplySlot, noreply: bool },
    /// A slot its client holds already (an MSET pair's fragment).
    At(ReplyTo),
    /// None: what the server sends back is pushed to the client as it
    /// arrives (a subscriber's command).
    Pushed,
}

/// What a dedicated request queues.
#[derive(Debug, Clone, Copy)]
pub(super) enum Sent<'a> {
    /// These bytes as they are.
    Bytes(&'a [u8]),
    /// The request, as its protocol writes it for a server.
    Request(&'a Request, &'a [u8]),
}

/// A request that was not sent to its server, and where its error goes
/// (`Worker::fail_unsent` carries it out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unsent {
    /// Its reply slot was pushed (`seq` `None`: a noreply request, which
    /// nobody waits for): the error fills it as its server's reply would,
    /// and may send it on to another server.
    Slot(ReplyTo),
    /// Refused before a slot was pushed for it (no server owns it): the
    /// error is a ready reply of its own, none for a noreply request.
    Ready { token: Token, noreply: bool },
}

impl From<ReplyTo> for Unsent {
    fn from(to: ReplyTo) -> Unsent {
        Unsent::Slot(to)
    }
}

impl Unsent {
    /// No server for `req` of `token`'s client.
    pub(super) fn no_server(token: Token, req: &Request) -> Unsent {
        Unsent::Ready {
            token,
            noreply: req.noreply,
        }
    }

    /// The error for `fault` that its client waits for (`op` in
    /// `proto`'s wording), if one does.
    pub(super) fn reply(&self, fault: &ServerFault, proto: Protocol, op: Op) -> Option<Vec<u8>> {
        let waits = match self {
            Unsent::Slot(to) => to.seq.is_some(),
            Unsent::Ready { noreply, .. } => !noreply,
        };
        waits.then(|| {
            let mut out = Vec::new();
            fault.write_reply(proto, op, &mut out);
            out
        })
    }

    /// Whether a server was picked for it and could not be reached: in a
    /// cluster pool, its node may have failed over.
    pub(super) fn tried(&self) -> bool {
        matches!(self, Unsent::Slot(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxys_own_request_goes_whole_unbounded_to_its_server_if_it_reads_it_back() {
        let get = b"mg k v f t\r\n".to_vec();
        let client = Some((Token(7), 3));
        let waiter = Waiter::Internal;
        let own = CopyPlan::own(Protocol::Memcache, 2, 5, client, waiter, get.clone());
        let own = own.expect("a request memcached answers");
        assert_eq!(
            (own.pool, own.servers(), own.client),
            (2, vec![Some(5)], client)
        );
        assert_eq!(own.write, Write::Bytes(get.clone().into()));
        assert_eq!(Some(own.op), Protocol::Memcache.own_request_op(&get));
        assert!(!own.bounded, "not dropped for a full queue");
        let junk = b"no such thing\r\n".to_vec();
        assert!(CopyPlan::own(Protocol::Memcache, 2, 5, None, waiter, junk).is_none());
    }

    #[test]
    fn an_unsent_requests_error_goes_to_whoever_waits_for_it() {
        let get = b"get k\r\n";
        let req = match Protocol::Memcache.parse_request(get, &Default::default()) {
            Ok(crate::proto::Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        };
        let (mc, op) = (Protocol::Memcache, req.op);
        let fault = ServerFault::NoServer;
        let refused = Some(b"SERVER_ERROR Connection refused\r\n".to_vec());
        let t = Token(7);
        let ready = Unsent::no_server(t, &req);
        assert_eq!(
            ready,
            Unsent::Ready {
                token: t,
                noreply: false
            }
        );
        assert_eq!(ready.reply(&fault, mc, op), refused);
        assert!(!ready.tried(), "no server was picked");
        let quiet = Unsent::Ready {
            token: t,
            noreply: true,
        };
        assert_eq!(quiet.reply(&fault, mc, op), None);
        let slot = Unsent::from(ReplyTo::new(t, 1, Some(3), None));
        assert!(slot.tried());
        let timed_out = Some(b"SERVER_ERROR Connection timed out\r\n".to_vec());
        assert_eq!(slot.reply(&ServerFault::TimedOut, mc, op), timed_out);
        let noreply = Unsent::from(ReplyTo::new(t, 1, None, None));
        assert_eq!(noreply.reply(&fault, mc, op), None, "a noreply request");
    }
}
