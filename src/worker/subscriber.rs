//! A subscribed client's state, and what its commands and its servers'
//! pushes do to it, without sockets (`pubsub.rs` says where channels
//! live and why the counts are kept here). `Subs::command` takes a
//! (P|S)(UN)SUBSCRIBE with the client's pool and says what the client is
//! answered here and which commands go to which servers;
//! `Subs::pushed` takes one frame from a server and says what the client
//! gets. The worker opens the connections and moves the bytes.

use super::handle::ServerRef;
use super::pool::PoolRt;
use crate::proto::redis::{cluster, pubsub, reply};
use std::time::Instant;

/// A client's subscriptions.
#[derive(Debug, Default)]
pub struct Subs {
    /// Per server listened on: (server, connection).
    pub conns: Vec<(usize, ServerRef)>,
    /// Channels subscribed.
    pub channels: Vec<Vec<u8>>,
    /// Patterns subscribed.
    pub patterns: Vec<Vec<u8>>,
    /// Sharded channels subscribed (SSUBSCRIBE).
    pub shard_channels: Vec<Vec<u8>>,
    /// The count in the confirmations passed so far.
    pub count: i64,
    /// The count of sharded channels, confirmed apart, as redis-server
    /// counts them.
    pub shard_count: i64,
    /// Per server listened on: the last counts its connection confirmed
    /// (classic, sharded). A confirmation adds what its server's count
    /// moved by, so a channel subscribed twice counts once, as on one
    /// redis-server, and a pattern held by every server counts once.
    pub server_counts: Vec<(usize, i64, i64)>,
}

/// What a client's command leads to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sends {
    /// The client's answer from here (empty: none; the servers confirm).
    pub reply: Vec<u8>,
    /// Commands for servers, in order: (server, command bytes).
    pub to: Vec<(usize, Vec<u8>)>,
}

/// A server, and a cluster slot (0 when slots do not matter).
type ServerSlot = (usize, u16);

/// Which of a client's lists an UNSUBSCRIBE names.
type Held = fn(&mut Subs) -> &mut Vec<Vec<u8>>;

pub use crate::proto::redis::pubsub::subscribe_op;

/// What a request does on the pub/sub path (`offer`).
#[derive(Debug, PartialEq, Eq)]
pub enum SubsStep {
    /// Not pub/sub's: routed as any request.
    Pass,
    /// Answered here: a subscribed RESP2 client's PING, or a command it
    /// may not send.
    Answer(Vec<u8>),
    /// A (P|S)(UN)SUBSCRIBE: its client's subscriptions change
    /// ([`Subs::command`]).
    Command,
}

/// What command `name` (`bytes`; `is_pubsub`: of the pub/sub class;
/// `quit`: a QUIT) does on the pub/sub path, from a client `subscribed` or
/// not, speaking RESP3 or not. A RESP2 client in subscribed mode may send
/// only (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING and QUIT, as redis-server
/// enforces; a RESP3 client may send anything (its messages are push
/// frames).
pub fn offer(
    name: &str,
    is_pubsub: bool,
    bytes: &[u8],
    subscribed: bool,
    resp3: bool,
    quit: bool,
) -> SubsStep {
    if is_pubsub {
        SubsStep::Command
    } else if !subscribed || resp3 || quit {
        SubsStep::Pass
    } else if name == "PING" {
        SubsStep::Answer(pubsub::subscribed_pong(bytes))
    } else {
        SubsStep::Answer(pubsub::not_allowed_subscribed(name))
    }
}

impl Subs {
    /// Nothing subscribed or being confirmed.
    pub fn is_idle(&self) -> bool {
        self.count == 0
            && self.shard_count == 0
            && self.channels.is_empty()
            && self.patterns.is_empty()
            && self.shard_channels.is_empty()
    }

    /// Worth keeping on its client: it holds connections or subscriptions.
    pub fn keep(&self) -> bool {
        !self.conns.is_empty() || !self.is_idle()
    }

    /// The connection it holds to `server`, if any (maybe closed since).
    pub fn conn(&self, server: usize) -> Option<ServerRef> {
        self.conns.iter().find(|(s, _)| *s == server).map(|e| e.1)
    }

    /// A new connection to `server` carries its pushes: that server holds
    /// nothing of the client's yet.
    pub fn opened(&mut self, server: usize, r: ServerRef) {
        self.conns.retain(|(s, _)| *s != server);
        self.conns.push((server, r));
        self.server_counts.retain(|(s, ..)| *s != server);
        self.conns.sort_unstable();
    }

    /// (P|S)SUBSCRIBE and (P|S)UNSUBSCRIBE (`name`, upper case) with its
    /// arguments, from client `client_id` of `pool`: the subscriptions
    /// change, and the servers concerned are to be told.
    pub fn command(
        &mut self,
        name: &str,
        args: Vec<Vec<u8>>,
        resp3: bool,
        pool: &mut PoolRt,
        client_id: u64,
        now: Instant,
    ) -> Sends {
        let mut sends = Sends::default();
        let held: Held = match name {
            "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" if args.is_empty() => {
                sends.reply = reply::wrong_args(name);
                return sends;
            }
            "SUBSCRIBE" | "UNSUBSCRIBE" => |s| &mut s.channels,
            "SSUBSCRIBE" | "SUNSUBSCRIBE" => |s| &mut s.shard_channels,
            _ => |s| &mut s.patterns,
        };
        let list = if name.contains("UNSUB") {
            let kind = name.to_ascii_lowercase();
            match self.unsub_list(held, &kind, resp3, args, &mut sends.reply) {
                Some(list) => list,
                None => return sends,
            }
        } else {
            let names = held(self);
            for a in &args {
                if !names.contains(a) {
                    names.push(a.clone());
                }
            }
            args
        };
        if name.starts_with('P') {
            everywhere(pool, name, &list, client_id, &mut sends.to);
        } else {
            by_channel(pool, name, &list, client_id, now, &mut sends.to);
        }
        sends
    }

    /// What an UNSUBSCRIBE, SUNSUBSCRIBE or PUNSUBSCRIBE (`kind`) asks the
    /// servers to drop from `held` (the client's channels, sharded
    /// channels or patterns): all of them when it names none, else the
    /// names held. Names not held, or nothing held at all, are answered
    /// here, as redis-server does (a confirmation with the count
    /// unchanged; no server holds anything of them); `None` when nothing
    /// is left for the servers.
    fn unsub_list(
        &mut self,
        held: Held,
        kind: &str,
        resp3: bool,
        args: Vec<Vec<u8>>,
        out: &mut Vec<u8>,
    ) -> Option<Vec<Vec<u8>>> {
        let count = if pubsub::confirms(kind).is_some_and(|c| c.sharded) {
            self.shard_count
        } else {
            self.count
        };
        if args.is_empty() {
            let all = std::mem::take(held(self));
            if all.is_empty() {
                pubsub::confirmation(kind, None, count, resp3, out);
                return None;
            }
            return Some(all);
        }
        let (yes, no) = split_held(args, held(self));
        for name in &no {
            pubsub::confirmation(kind, Some(name), count, resp3, out);
        }
        held(self).retain(|c| !yes.contains(c));
        (!yes.is_empty()).then_some(yes)
    }

    /// One whole frame from the connection to `server` (of a Redis
    /// Cluster pool when `cluster`): what the client gets, `None` for
    /// nothing. A confirmation carries the count one connection would
    /// have reported, after adding what its server's own count moved by;
    /// a pattern's confirmation from any server but the first is dropped
    /// (in a cluster pool a pattern is on one node). Anything else passes
    /// as it is.
    pub fn pushed(&mut self, frame: &[u8], server: usize, cluster: bool) -> Option<Vec<u8>> {
        let Some((kind, colon)) = pubsub::frame_kind(frame) else {
            return Some(frame.to_vec());
        };
        let Some(confirms) = pubsub::confirms(&kind) else {
            return Some(frame.to_vec());
        };
        let sharded = confirms.sharded;
        // How far this server's own count moved.
        let reported = pubsub::confirmation_count(frame, colon);
        let at = match self.server_counts.iter().position(|e| e.0 == server) {
            Some(i) => i,
            None => {
                self.server_counts.push((server, 0, 0));
                self.server_counts.len() - 1
            }
        };
        let last = if sharded {
            &mut self.server_counts[at].2
        } else {
            &mut self.server_counts[at].1
        };
        let delta = match reported {
            Some(n) => n - std::mem::replace(last, n),
            None if confirms.ends => -1,
            None => 1,
        };
        let first = self.conns.first().map(|(s, ..)| *s) == Some(server);
        if confirms.pattern && !first && !cluster {
            return None;
        }
        let count = if sharded {
            &mut self.shard_count
        } else {
            &mut self.count
        };
        *count = (*count + delta).max(0);
        Some(pubsub::with_count(frame, colon, *count))
    }
}

/// Channels (classic or sharded) to the servers their names hash to,
/// grouped per server and, for a cluster's sharded channels, per slot (a
/// node refuses an SSUBSCRIBE across slots).
fn by_channel(
    pool: &mut PoolRt,
    cmd: &str,
    channels: &[Vec<u8>],
    client_id: u64,
    now: Instant,
    to: &mut Vec<(usize, Vec<u8>)>,
) {
    let mut by_server: Vec<(ServerSlot, Vec<Vec<u8>>)> = Vec::new();
    let sharded = matches!(cmd, "SSUBSCRIBE" | "SUNSUBSCRIBE");
    let cluster = pool.cluster.is_some();
    for ch in channels {
        let server = if !cluster {
            pool.server_for(ch, now)
        } else if sharded {
            channel_node(pool, ch, client_id)
        } else {
            channel_node(pool, b"", client_id)
        };
        let Some(s) = server else {
            continue;
        };
        let slot = if cluster && sharded {
            cluster::key_slot(ch)
        } else {
            0
        };
        match by_server.iter_mut().find(|(x, _)| *x == (s, slot)) {
            Some((_, v)) => v.push(ch.clone()),
            None => by_server.push(((s, slot), vec![ch.clone()])),
        }
    }
    for ((server, _), chs) in by_server {
        to.push((server, pubsub::command(cmd, &chs)));
    }
}

/// Patterns to every server (any channel may match), or in a cluster pool
/// to the one node of the client's classic channels.
fn everywhere(
    pool: &PoolRt,
    cmd: &str,
    patterns: &[Vec<u8>],
    client_id: u64,
    to: &mut Vec<(usize, Vec<u8>)>,
) {
    let servers: Vec<usize> = if pool.cluster.is_some() {
        channel_node(pool, b"", client_id).into_iter().collect()
    } else {
        (0..pool.cfg.servers.len()).collect()
    };
    for server in servers {
        to.push((server, pubsub::command(cmd, patterns)));
    }
}

/// The cluster node a channel is subscribed on: its slot's master for a
/// sharded channel; for classic channels and patterns (`channel` empty),
/// the node of slot 0, one node for all of a client's.
fn channel_node(pool: &PoolRt, channel: &[u8], client_id: u64) -> Option<usize> {
    Some(pool.cluster_server(channel, subscribe_op()?, client_id))
}

/// The names an UNSUBSCRIBE lists, split into those the client holds and
/// those it does not (each once, in the order given).
fn split_held(args: Vec<Vec<u8>>, held: &[Vec<u8>]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut yes: Vec<Vec<u8>> = Vec::new();
    let mut no = Vec::new();
    for a in args {
        if held.contains(&a) {
            if !yes.contains(&a) {
                yes.push(a);
            }
        } else {
            no.push(a);
        }
    }
    (yes, no)
}

#[cfg(test)]
#[path = "subscriber_tests.rs"]
mod tests;
