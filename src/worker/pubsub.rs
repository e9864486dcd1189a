//! Redis pub/sub through the proxy. A channel lives on the server its name
//! hashes to, as a key would: PUBLISH goes there, and so does a SUBSCRIBE
//! to it. Sharded channels (SSUBSCRIBE, SPUBLISH) too. In a Redis Cluster
//! pool a channel's slot names its node; a classic message reaches every
//! node (the cluster bus carries it), so a client's classic channels and
//! patterns are all subscribed on one node, and its sharded channels on
//! their slots' nodes. A subscribed client gets server connections of its own, one per
//! server it listens on (a pattern listens on every server, since any
//! channel may match), in push mode: whatever those servers send is passed
//! to the client as it arrives, not matched to requests.
//!
//! The client sees one connection's worth: the count in each (un)subscribe
//! confirmation is its own total, kept here (each server counts only what
//! it holds), and a pattern is confirmed once, by the first server's
//! connection (the others' confirmations are dropped). When the count
//! reaches 0 the client leaves subscribed mode and its connections close.
//! A RESP2 client in subscribed mode may send only (P)SUBSCRIBE,
//! (P)UNSUBSCRIBE, PING and QUIT, as redis-server enforces; a RESP3 client
//! may send anything (its messages are push frames). A subscriber that
//! does not read is bounded by `client_output_limit`; a server lost under
//! a subscriber closes the subscriber (its subscriptions there are gone,
//! as with a Redis of its own that went away).

use super::conn::{ClientRef, Conn, ConnTable, ServerRef};
use super::conn_state::Subs;
use super::Worker;
use crate::proto::redis::pubsub;
use crate::proto::{Op, Parse, Request};
use mio::Token;
use std::time::Instant;

/// A server, and a cluster slot (0 when slots do not matter).
type ServerSlot = (usize, u16);

/// A confirmation frame from one of a subscriber's servers.
struct Confirmation<'a> {
    frame: &'a [u8],
    /// Its kind (`subscribe`, ...), as [`pubsub::frame_kind`] reads it.
    kind: &'a str,
    /// Where its count's `:` is.
    colon: usize,
    server: usize,
    /// The pool is a Redis Cluster.
    cluster: bool,
}

/// The confirmation as the client gets it: with the count one connection
/// would have reported, after adding what its server's own count moved by;
/// `None` for a pattern's confirmation from any server but the first (in a
/// cluster pool a pattern is on one node).
fn recount(subs: &mut Subs, from: Confirmation<'_>) -> Option<Vec<u8>> {
    let Confirmation {
        frame,
        kind,
        colon,
        server,
        cluster,
    } = from;
    let sharded = matches!(kind, "ssubscribe" | "sunsubscribe");
    // How far this server's own count moved.
    let reported = pubsub::confirmation_count(frame, colon);
    let at = match subs.server_counts.iter().position(|e| e.0 == server) {
        Some(i) => i,
        None => {
            subs.server_counts.push((server, 0, 0));
            subs.server_counts.len() - 1
        }
    };
    let last = if sharded {
        &mut subs.server_counts[at].2
    } else {
        &mut subs.server_counts[at].1
    };
    let delta = match reported {
        Some(n) => n - std::mem::replace(last, n),
        None if kind.contains("unsub") => -1,
        None => 1,
    };
    let first = subs.conns.first().map(|(s, ..)| *s) == Some(server);
    if kind.starts_with('p') && !first && !cluster {
        return None;
    }
    let count = if sharded {
        &mut subs.shard_count
    } else {
        &mut subs.count
    };
    *count = (*count + delta).max(0);
    Some(pubsub::with_count(frame, colon, *count))
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

impl Worker<'_> {
    /// Pub/sub commands, and what a subscribed client sends: true when
    /// handled here.
    pub(super) fn pubsub_dispatch(
        &mut self,
        token: Token,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> bool {
        let Op::Redis(op) = req.op else {
            return false;
        };
        let Some(c) = self.conns.client(token.0) else {
            return false;
        };
        let is_pubsub = op.class == crate::proto::redis::CmdClass::PubSub;
        if c.subs().is_none() && !is_pubsub {
            return false;
        }
        let name = op.cmd.name();
        let (pool, resp3) = (c.pool(), c.session().resp3);
        if !is_pubsub {
            if resp3
                || matches!(
                    req.route,
                    crate::proto::Route::Local(crate::proto::Local::Quit(_))
                )
            {
                return false;
            }
            let out = if name == "PING" {
                pubsub::subscribed_pong(bytes)
            } else {
                pubsub::not_allowed_subscribed(name)
            };
            self.push_ready(token, out, false);
            return true;
        }
        self.pubsub_command(token, pool, resp3, name, bytes, now);
        true
    }

    /// (P)SUBSCRIBE and (P)UNSUBSCRIBE: the client's subscriptions change,
    /// and the servers concerned are told.
    fn pubsub_command(
        &mut self,
        token: Token,
        pool: usize,
        resp3: bool,
        name: &str,
        bytes: &[u8],
        now: Instant,
    ) {
        let args = pubsub::arguments(bytes);
        let mut subs = match self.conns.get_mut(token.0) {
            Some(Conn::Client(c)) => c.take_subs().map(|b| *b).unwrap_or_default(),
            _ => return,
        };
        match name {
            "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" if args.is_empty() => {
                self.put_subs(token, subs);
                self.push_ready(token, crate::proto::redis::reply::wrong_args(name), false);
                return;
            }
            "SUBSCRIBE" => {
                for ch in &args {
                    if !subs.channels.contains(ch) {
                        subs.channels.push(ch.clone());
                    }
                }
                self.pubsub_send_by_channel(token, pool, &mut subs, "SUBSCRIBE", &args, now);
            }
            "UNSUBSCRIBE" => {
                let held: fn(&mut Subs) -> &mut Vec<Vec<u8>> = |s| &mut s.channels;
                if let Some(list) =
                    self.pubsub_unsub_list(token, &mut subs, held, "unsubscribe", resp3, args)
                {
                    self.pubsub_send_by_channel(token, pool, &mut subs, "UNSUBSCRIBE", &list, now);
                }
            }
            "SSUBSCRIBE" => {
                for ch in &args {
                    if !subs.shard_channels.contains(ch) {
                        subs.shard_channels.push(ch.clone());
                    }
                }
                self.pubsub_send_by_channel(token, pool, &mut subs, "SSUBSCRIBE", &args, now);
            }
            "SUNSUBSCRIBE" => {
                let held: fn(&mut Subs) -> &mut Vec<Vec<u8>> = |s| &mut s.shard_channels;
                if let Some(list) =
                    self.pubsub_unsub_list(token, &mut subs, held, "sunsubscribe", resp3, args)
                {
                    self.pubsub_send_by_channel(token, pool, &mut subs, "SUNSUBSCRIBE", &list, now);
                }
            }
            "PSUBSCRIBE" => {
                for p in &args {
                    if !subs.patterns.contains(p) {
                        subs.patterns.push(p.clone());
                    }
                }
                self.pubsub_send_everywhere(token, pool, &mut subs, "PSUBSCRIBE", &args, now);
            }
            _ => {
                // PUNSUBSCRIBE
                let held: fn(&mut Subs) -> &mut Vec<Vec<u8>> = |s| &mut s.patterns;
                if let Some(list) =
                    self.pubsub_unsub_list(token, &mut subs, held, "punsubscribe", resp3, args)
                {
                    self.pubsub_send_everywhere(token, pool, &mut subs, "PUNSUBSCRIBE", &list, now);
                }
            }
        }
        self.put_subs(token, subs);
    }

    /// What an UNSUBSCRIBE, SUNSUBSCRIBE or PUNSUBSCRIBE (`kind`) asks the
    /// servers to drop from `held` (the client's channels, sharded channels
    /// or patterns): all of them when it names none, else the names held.
    /// Names not held, or nothing held at all, are answered here; `None`
    /// when nothing is left for the servers.
    fn pubsub_unsub_list(
        &mut self,
        token: Token,
        subs: &mut Subs,
        held: fn(&mut Subs) -> &mut Vec<Vec<u8>>,
        kind: &str,
        resp3: bool,
        args: Vec<Vec<u8>>,
    ) -> Option<Vec<Vec<u8>>> {
        if args.is_empty() {
            let all = std::mem::take(held(subs));
            if all.is_empty() {
                self.pubsub_nothing(token, subs, kind, resp3);
                return None;
            }
            return Some(all);
        }
        let (yes, no) = split_held(args, held(subs));
        self.pubsub_not_held(token, subs, kind, resp3, &no);
        held(subs).retain(|c| !yes.contains(c));
        (!yes.is_empty()).then_some(yes)
    }

    /// redis-server's answer for each channel (or pattern) an UNSUBSCRIBE
    /// names that the client does not hold: a confirmation with its count
    /// unchanged. No server is asked (it holds nothing of this client's).
    fn pubsub_not_held(
        &mut self,
        token: Token,
        subs: &Subs,
        kind: &str,
        resp3: bool,
        names: &[Vec<u8>],
    ) {
        let count = if kind == "sunsubscribe" {
            subs.shard_count
        } else {
            subs.count
        };
        let mut out = Vec::new();
        for name in names {
            pubsub::confirmation(kind, Some(name), count, resp3, &mut out);
        }
        if !out.is_empty() {
            self.push_ready(token, out, false);
        }
    }

    /// redis-server's answer to an UNSUBSCRIBE with nothing subscribed.
    fn pubsub_nothing(&mut self, token: Token, subs: &Subs, kind: &str, resp3: bool) {
        let count = if kind == "sunsubscribe" {
            subs.shard_count
        } else {
            subs.count
        };
        let mut out = Vec::new();
        pubsub::confirmation(kind, None, count, resp3, &mut out);
        self.push_ready(token, out, false);
    }

    fn pubsub_send_by_channel(
        &mut self,
        token: Token,
        pool: usize,
        subs: &mut Subs,
        cmd: &str,
        channels: &[Vec<u8>],
        now: Instant,
    ) {
        // Grouped per server and, for a cluster's sharded channels, per
        // slot (a node refuses an SSUBSCRIBE across slots).
        let mut by_server: Vec<(ServerSlot, Vec<Vec<u8>>)> = Vec::new();
        let sharded = matches!(cmd, "SSUBSCRIBE" | "SUNSUBSCRIBE");
        let cluster = self.pools[pool].cluster.is_some();
        for ch in channels {
            let server = if self.pools[pool].cluster.is_none() {
                self.pools[pool].server_for(ch, now)
            } else if sharded {
                self.cluster_channel_node(token, pool, ch)
            } else {
                self.cluster_channel_node(token, pool, b"")
            };
            let Some(s) = server else {
                continue;
            };
            let slot = if cluster && sharded {
                crate::proto::redis::cluster::key_slot(ch)
            } else {
                0
            };
            match by_server.iter_mut().find(|(x, _)| *x == (s, slot)) {
                Some((_, v)) => v.push(ch.clone()),
                None => by_server.push(((s, slot), vec![ch.clone()])),
            }
        }
        for ((server, _), chs) in by_server {
            if let Some(st) = self.pubsub_conn(token, pool, subs, server, now) {
                self.pubsub_send(st, &pubsub::command(cmd, &chs), now);
            }
        }
    }

    fn pubsub_send_everywhere(
        &mut self,
        token: Token,
        pool: usize,
        subs: &mut Subs,
        cmd: &str,
        patterns: &[Vec<u8>],
        now: Instant,
    ) {
        let servers: Vec<usize> = if self.pools[pool].cluster.is_some() {
            self.cluster_channel_node(token, pool, b"")
                .into_iter()
                .collect()
        } else {
            (0..self.pools[pool].cfg.servers.len()).collect()
        };
        for server in servers {
            if let Some(st) = self.pubsub_conn(token, pool, subs, server, now) {
                self.pubsub_send(st, &pubsub::command(cmd, patterns), now);
            }
        }
    }

    /// The cluster node a channel is subscribed on: its slot's master for
    /// a sharded channel; for classic channels and patterns (`channel`
    /// empty), the node of slot 0, one node for all of a client's.
    fn cluster_channel_node(&mut self, token: Token, pool: usize, channel: &[u8]) -> Option<usize> {
        let (client_id, cmd) = match self.conns.get(token.0) {
            Some(Conn::Client(c)) => (c.id(), crate::proto::redis::Cmd::lookup(b"SUBSCRIBE")?),
            _ => return None,
        };
        let op = Op::Redis(crate::proto::redis::RedisOp {
            cmd,
            class: cmd.class(),
        });
        Some(self.pools[pool].cluster_server(channel, op, client_id))
    }

    /// The client's push connection to `server`, opened if needed.
    fn pubsub_conn(
        &mut self,
        token: Token,
        pool: usize,
        subs: &mut Subs,
        server: usize,
        now: Instant,
    ) -> Option<Token> {
        if let Some(&(_, r)) = subs.conns.iter().find(|(s, _)| *s == server) {
            if self.server_ref(r).is_some() {
                return Some(r.token);
            }
        }
        let (client_id, op) = match self.conns.get(token.0) {
            Some(Conn::Client(c)) => (c.id(), crate::proto::redis::Cmd::lookup(b"SUBSCRIBE")?),
            _ => return None,
        };
        let op = Op::Redis(crate::proto::redis::RedisOp {
            cmd: op,
            class: op.class(),
        });
        let slot = self.conn_slot(token, pool, server, client_id, op);
        let st = self.server_conn_dedicated(pool, server, slot, now).ok()?;
        let s = self.conns.server_mut(st.0)?;
        s.subscribe_for(token, client_id);
        subs.conns.retain(|(s, _)| *s != server);
        subs.conns.push((server, ServerRef::new(st, s.id())));
        // A new connection: that server holds nothing of the client's yet.
        subs.server_counts.retain(|(s, ..)| *s != server);
        subs.conns.sort_unstable();
        Some(st)
    }

    fn pubsub_send(&mut self, st: Token, cmd: &[u8], now: Instant) {
        let Some(sub) = crate::proto::redis::Cmd::lookup(b"SUBSCRIBE") else {
            return;
        };
        let op = Op::Redis(crate::proto::redis::RedisOp {
            cmd: sub,
            class: sub.class(),
        });
        // No waiter: what the server sends back is pushed (`pubsub_frames`).
        self.enqueue(st, None, op, |o| o.extend_from_slice(cmd), now);
    }

    /// Bytes from a push connection: every whole frame goes to its client
    /// (confirmations with the client's own count). Returns the bytes used.
    pub(super) fn pubsub_frames(&mut self, st: Token, input: &[u8]) -> usize {
        let Some(s) = self.conns.server(st.0) else {
            return 0;
        };
        let Some(ClientRef { token: ct, id: cid }) = s.push_to() else {
            return 0;
        };
        let (pool, server) = (s.pool(), s.server());
        let proto = self.pools[pool].proto;
        let Some(sub) = crate::proto::redis::Cmd::lookup(b"SUBSCRIBE") else {
            return 0;
        };
        let op = Op::Redis(crate::proto::redis::RedisOp {
            cmd: sub,
            class: sub.class(),
        });
        let cluster = self.pools[pool].cluster.is_some();
        let mut off = 0;
        while off < input.len() {
            let Ok(Parse::Done(rsp)) = proto.parse_response(&input[off..], op) else {
                break;
            };
            let frame = &input[off..off + rsp.len];
            off += rsp.len;
            // The connection's own handshake (AUTH, SELECT, HELLO 3) is
            // answered first: those replies are not the client's.
            if let Some(s) = self.conns.server_mut(st.0) {
                if s.pop_answered().is_some() {
                    continue;
                }
            }
            let Some(c) = self.conns.client_mut(ct.0) else {
                continue;
            };
            if c.id() != cid {
                continue;
            }
            let Some(subs) = c.subs_mut() else {
                continue;
            };
            let out = match pubsub::frame_kind(frame) {
                Some((kind, colon)) if pubsub::is_confirmation(&kind) => {
                    let from = Confirmation {
                        frame,
                        kind: &kind,
                        colon,
                        server,
                        cluster,
                    };
                    match recount(subs, from) {
                        Some(out) => out,
                        None => continue,
                    }
                }
                _ => frame.to_vec(),
            };
            let done = subs.is_idle();
            self.pubsub_out(ct, out);
            if done {
                self.pubsub_leave(ct);
            }
        }
        off
    }

    fn pubsub_out(&mut self, ct: Token, out: Vec<u8>) {
        self.push_ready(ct, out, false);
        if let Some(c) = self.conns.client_mut(ct.0) {
            let added = c.drain_ready(&mut self.bufs);
            self.dirty_clients.push(ct);
            self.add_out(added);
        }
        self.check_output_limit(ct);
    }

    /// The client subscribes to nothing any more: its connections close.
    fn pubsub_leave(&mut self, ct: Token) {
        let subs = match self.conns.get_mut(ct.0) {
            Some(Conn::Client(c)) => c.take_subs(),
            _ => None,
        };
        self.pubsub_close(subs);
    }

    /// Close the push connections of `subs` (the client leaves).
    pub(super) fn pubsub_close(&mut self, subs: Option<Box<Subs>>) {
        for (_, r) in subs.map(|s| s.conns).unwrap_or_default() {
            if self.server_ref(r).is_some() {
                self.retire_server(r.token);
            }
        }
    }

    fn put_subs(&mut self, token: Token, subs: Subs) {
        let keep = !subs.conns.is_empty() || !subs.is_idle();
        if let Some(c) = self.conns.client_mut(token.0) {
            c.set_subs(keep.then(|| Box::new(subs)));
        }
    }
}
