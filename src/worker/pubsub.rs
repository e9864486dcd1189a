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
//!
//! The subscriber's state and what its commands and pushes do to it are
//! `Subs` (`subscriber.rs`), tested without sockets; what a request or a
//! pushed frame comes to is a `SubsPlan`, carried out by
//! `Worker::send_subs`, a command going out on its push connection as a
//! `Dedicated` (`push_plan`, `Worker::send_dedicated`).

use super::conn::{ClientRef, Conn, ConnTable};
use super::pool::PoolRt;
use super::send_plan::{Dedicated, Reply, Sent, Usage};
use super::subscriber::{self, subscribe_op, Sends, Subs, SubsStep};
use super::Worker;
use crate::proto::redis::pubsub;
use crate::proto::{Op, Request};
use mio::Token;
use slab::Slab;
use std::time::Instant;

/// What a subscriber's command, or a frame one of its push connections
/// passed, comes to, as its `Subs` says: carried out by
/// `Worker::send_subs`.
#[derive(Debug)]
pub(super) enum SubsPlan {
    /// Client `client`'s answer, ready (none when empty: the servers
    /// confirm), and its commands for servers of `pool`, each on its push
    /// connection to that server ([`push_plan`]).
    Command {
        client: Token,
        pool: usize,
        sends: Sends,
    },
    /// A frame for client `client`, to its output at once and held to its
    /// output limit; `done`: it then subscribes to nothing, and its
    /// connections close.
    Pushed {
        client: Token,
        out: Vec<u8>,
        done: bool,
    },
}

/// Pub/sub commands, and what a subscribed client sends: client `token`'s
/// `req` (`bytes`) as a plan, its subscriptions changed
/// (`Subs::command`); `None` when it is not for pub/sub (routed as any
/// request).
pub(super) fn command(
    conns: &mut Slab<Conn>,
    pools: &mut [PoolRt],
    token: Token,
    req: &Request,
    bytes: &[u8],
    now: Instant,
) -> Option<SubsPlan> {
    let Op::Redis(op) = req.op else {
        return None;
    };
    let c = conns.client(token.0)?;
    let name = op.cmd.name();
    let (pool, resp3) = (c.pool(), c.session().resp3);
    let quit = matches!(
        req.route,
        crate::proto::Route::Local(crate::proto::Local::Quit(_))
    );
    let is_pubsub = op.class == crate::proto::redis::CmdClass::PubSub;
    let sends = match subscriber::offer(name, is_pubsub, bytes, c.subs().is_some(), resp3, quit) {
        SubsStep::Pass => return None,
        SubsStep::Answer(reply) => Sends {
            reply,
            to: Vec::new(),
        },
        SubsStep::Command => {
            let client_id = c.id();
            let args = pubsub::arguments(bytes);
            let mut subs = take_subs(conns, token);
            let sends = subs.command(name, args, resp3, &mut pools[pool], client_id, now);
            put_subs(conns, token, subs);
            sends
        }
    };
    Some(SubsPlan::Command {
        client: token,
        pool,
        sends,
    })
}

/// The whole frames of one read of a push connection, each for its
/// client as [`frame_for`] says (confirmations with the client's own
/// count, `Subs::pushed`), one at a time: what one frame did to the
/// client (its output limit, its subscriptions ended) is carried out
/// before the next is looked at.
pub(super) struct Pushes {
    st: Token,
    /// The client the connection pushes to; none: not a push connection.
    to: Option<ClientRef>,
    server: usize,
    /// Of a Redis Cluster pool.
    cluster: bool,
    /// The bytes used so far.
    off: usize,
}

impl Pushes {
    /// The frames server connection `st` passes.
    pub(super) fn of(conns: &Slab<Conn>, pools: &[PoolRt], st: Token) -> Pushes {
        let s = conns.server(st.0);
        let to = s.and_then(|s| s.push_to());
        let (pool, server) = s.map_or((0, 0), |s| (s.pool(), s.server()));
        let cluster = to.is_some() && pools[pool].cluster.is_some();
        Pushes {
            st,
            to,
            server,
            cluster,
            off: 0,
        }
    }

    /// The next frame of `input` that goes to the client, as a plan;
    /// `None` when no whole frame is left.
    pub(super) fn next(&mut self, conns: &mut Slab<Conn>, input: &[u8]) -> Option<SubsPlan> {
        let to = self.to?;
        loop {
            let len = pubsub::push_frame(&input[self.off..])?;
            let frame = &input[self.off..self.off + len];
            self.off += len;
            if let Some((out, done)) =
                frame_for(conns, self.st, to, frame, self.server, self.cluster)
            {
                return Some(SubsPlan::Pushed {
                    client: to.token,
                    out,
                    done,
                });
            }
        }
    }

    /// The bytes of the frames gone through.
    pub(super) fn used(&self) -> usize {
        self.off
    }
}

impl Worker<'_> {
    /// Carry out a pub/sub plan (see [`SubsPlan`]).
    pub(super) fn send_subs(&mut self, plan: SubsPlan, now: Instant) {
        match plan {
            SubsPlan::Command {
                client,
                pool,
                sends,
            } => {
                if !sends.reply.is_empty() {
                    self.conns.push_ready(client, sends.reply, false);
                }
                for (server, cmd) in &sends.to {
                    let Some(d) = push_plan(&self.conns, client, pool, *server, cmd) else {
                        break;
                    };
                    self.send_dedicated(client, d, now);
                }
            }
            SubsPlan::Pushed { client, out, done } => {
                self.conns.push_ready(client, out, false);
                if let Some(c) = self.conns.client_mut(client.0) {
                    let added = c.drain_ready(&mut self.bufs);
                    self.dirty.client(client);
                    self.add_out(added);
                }
                if self.ctl.output_over(&self.conns, client, &self.pools) {
                    self.flush_client(client);
                }
                if done {
                    let subs = self.conns.client_mut(client.0).and_then(|c| c.take_subs());
                    self.close_all(super::closes::retire(
                        subs.into_iter().flat_map(|s| s.conns).map(|(_, r)| r),
                    ));
                }
            }
        }
    }
}

/// Client `token`'s subscriptions, taken off it to change (new ones if
/// none).
fn take_subs(conns: &mut Slab<Conn>, token: Token) -> Subs {
    conns
        .client_mut(token.0)
        .and_then(|c| c.take_subs())
        .map(|b| *b)
        .unwrap_or_default()
}

/// Put back client `token`'s subscriptions, when there is anything to
/// keep ([`Subs::keep`]): else it leaves subscribed mode.
fn put_subs(conns: &mut Slab<Conn>, token: Token, subs: Subs) {
    if let Some(c) = conns.client_mut(token.0) {
        let keep = subs.keep();
        c.set_subs(keep.then(|| Box::new(subs)));
    }
}

/// The client's push connection to `server` when it still has one: a
/// connection closed since (its slot maybe reused) is not it, and one is
/// opened instead.
fn live_conn(conns: &Slab<Conn>, subs: &Subs, server: usize) -> Option<Token> {
    let r = subs.conn(server)?;
    conns.server_ref(r).map(|_| r.token)
}

/// Client `token`'s command `cmd` for `server` of `pool`, as a
/// [`Dedicated`]: on its push connection to that server when it still
/// has one, else on one opened for its pushes (`Usage::Push`); nothing is
/// said when it cannot be opened, and what the server sends back is
/// pushed to the client ([`Pushes`]), not matched to the command.
/// `None`: no op to send it with.
fn push_plan<'a>(
    conns: &Slab<Conn>,
    token: Token,
    pool: usize,
    server: usize,
    cmd: &'a [u8],
) -> Option<Dedicated<'a>> {
    let op = subscribe_op()?;
    let subs = conns.client(token.0).and_then(|c| c.subs());
    Some(Dedicated {
        pool,
        server: Some(server),
        op,
        conn: subs.and_then(|subs| live_conn(conns, subs, server)),
        usage: Usage::Push,
        reply: Reply::Pushed,
        note: None,
        write: Sent::Bytes(cmd),
    })
}

/// One whole frame from push connection `st` (to `server`, of a Redis
/// Cluster pool when `cluster`) for client `to`: what the client gets,
/// and whether it then subscribes to nothing (its connections close).
/// `None` when nothing goes to it: the reply to the connection's own
/// handshake (AUTH, SELECT, HELLO 3, answered first), a client gone or
/// no longer subscribed, a confirmation `Subs::pushed` drops.
fn frame_for(
    conns: &mut Slab<Conn>,
    st: Token,
    to: ClientRef,
    frame: &[u8],
    server: usize,
    cluster: bool,
) -> Option<(Vec<u8>, bool)> {
    if conns
        .server_mut(st.0)
        .is_some_and(|s| s.pop_answered().is_some())
    {
        return None;
    }
    let subs = conns.client_ref_mut(to)?.subs_mut()?;
    let out = subs.pushed(frame, server, cluster)?;
    Some((out, subs.is_idle()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::stats::slowlog::KeyPrefix;
    use crate::worker::conn::{Client, Server, Waiter};
    use crate::worker::handle::ServerRef;

    const SUBSCRIBED: &[u8] = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n";
    const UNSUBSCRIBED: &[u8] = b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n";

    /// A push connection at `Token(0)` for client `Token(1)` (id 10, which
    /// subscribes when `subs`), its handshake's reply owed.
    fn table(subs: bool) -> Slab<Conn> {
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let mut s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), Instant::now(), true);
        s.set_connected();
        s.subscribe_for(Token(1), 10);
        let op = subscribe_op().expect("an op");
        let _ = s.queue(
            Some(Waiter::Internal),
            op,
            |w| w.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
            Instant::now(),
            KeyPrefix::new(b""),
        );
        conns.insert(Conn::Server(Box::new(s)));
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let mut c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        if subs {
            c.set_subs(Some(Box::default()));
        }
        conns.insert(Conn::Client(Box::new(c)));
        conns
    }

    /// [`table`] with its handshake's reply passed.
    fn answered(subs: bool) -> Slab<Conn> {
        let mut conns = table(subs);
        let to = ClientRef::new(Token(1), 10);
        let _ = frame_for(&mut conns, Token(0), to, b"+OK\r\n", 0, false);
        conns
    }

    /// A Redis pool of two servers, from configuration text.
    fn pools() -> Vec<PoolRt> {
        let yaml = "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 shard1\n    - 127.0.0.1:6380:1 shard2\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        vec![PoolRt::new(&c.pools[0], &[])]
    }

    /// Client `Token(1)`'s plan for `bytes`.
    fn plan_for(conns: &mut Slab<Conn>, bytes: &[u8]) -> Option<SubsPlan> {
        let limits = crate::proto::Limits::default();
        let Ok(crate::proto::Parse::Done(req)) =
            crate::proto::Protocol::Redis.parse_request(bytes, &limits)
        else {
            panic!("a whole request");
        };
        command(conns, &mut pools(), Token(1), &req, bytes, Instant::now())
    }

    #[test]
    fn a_subscribed_resp2_client_is_answered_here_and_other_requests_pass() {
        const GET: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        assert!(plan_for(&mut table(false), GET).is_none(), "not subscribed");
        let plan = plan_for(&mut table(true), GET);
        let Some(SubsPlan::Command { client, sends, .. }) = plan else {
            panic!("answered here: {plan:?}");
        };
        assert_eq!(client, Token(1));
        assert!(sends.reply.starts_with(b"-ERR"), "refused");
        assert!(sends.to.is_empty(), "nothing for the servers");
    }

    #[test]
    fn a_subscribe_changes_the_client_and_says_what_its_server_is_sent() {
        let mut conns = table(false);
        let plan = plan_for(&mut conns, b"*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n");
        let Some(SubsPlan::Command { pool, sends, .. }) = plan else {
            panic!("a command: {plan:?}");
        };
        assert_eq!(pool, 0);
        assert!(sends.reply.is_empty(), "its server confirms");
        assert_eq!(sends.to.len(), 1, "one server holds the channel");
        let subs = conns.client(1).and_then(|c| c.subs()).expect("subscribed");
        assert_eq!(subs.channels, vec![b"ch".to_vec()]);
    }

    #[test]
    fn a_push_connections_frames_go_one_at_a_time_until_its_client_subscribes_to_nothing() {
        let mut conns = table(true);
        let part: &[u8] = b"*3\r\n$7";
        let input = [b"+OK\r\n", SUBSCRIBED, MESSAGE, UNSUBSCRIBED, part].concat();
        let mut pushes = Pushes::of(&conns, &pools(), Token(0));
        let mut got = Vec::new();
        while let Some(plan) = pushes.next(&mut conns, &input) {
            let SubsPlan::Pushed { client, out, done } = plan else {
                panic!("a frame: {plan:?}");
            };
            assert_eq!(client, Token(1));
            got.push((out, done));
        }
        assert_eq!(
            got,
            vec![
                (SUBSCRIBED.to_vec(), false),
                (MESSAGE.to_vec(), false),
                (UNSUBSCRIBED.to_vec(), true)
            ],
            "the handshake's reply is not the client's"
        );
        assert_eq!(
            pushes.used(),
            input.len() - part.len(),
            "an unfinished frame waits"
        );
    }

    #[test]
    fn a_connection_that_pushes_to_no_client_passes_nothing() {
        let mut conns = table(true);
        let mut pushes = Pushes::of(&conns, &pools(), Token(1));
        assert!(pushes.next(&mut conns, MESSAGE).is_none());
        assert_eq!(pushes.used(), 0);
    }

    #[test]
    fn frames_go_to_the_subscriber_until_it_subscribes_to_nothing() {
        let mut conns = table(true);
        let (st, to) = (Token(0), ClientRef::new(Token(1), 10));
        assert_eq!(
            frame_for(&mut conns, st, to, b"+OK\r\n", 0, false),
            None,
            "the handshake's reply"
        );
        let got = |conns: &mut Slab<Conn>, frame| frame_for(conns, st, to, frame, 0, false);
        assert_eq!(
            got(&mut conns, SUBSCRIBED),
            Some((SUBSCRIBED.to_vec(), false))
        );
        assert_eq!(got(&mut conns, MESSAGE), Some((MESSAGE.to_vec(), false)));
        assert_eq!(
            got(&mut conns, UNSUBSCRIBED),
            Some((UNSUBSCRIBED.to_vec(), true))
        );
    }

    #[test]
    fn nothing_goes_to_a_client_gone_or_not_subscribed() {
        let st = Token(0);
        let mut conns = answered(false);
        let not_subscribed = ClientRef::new(Token(1), 10);
        assert_eq!(
            frame_for(&mut conns, st, not_subscribed, MESSAGE, 0, false),
            None
        );
        let mut conns = answered(true);
        let another = ClientRef::new(Token(1), 11);
        assert_eq!(frame_for(&mut conns, st, another, MESSAGE, 0, false), None);
        let gone = ClientRef::new(Token(2), 10);
        assert_eq!(frame_for(&mut conns, st, gone, MESSAGE, 0, false), None);
    }

    #[test]
    fn a_push_connection_closed_since_is_opened_again() {
        let conns = table(true);
        let mut subs = Subs::default();
        assert_eq!(live_conn(&conns, &subs, 0), None, "none yet");
        subs.opened(0, ServerRef::new(Token(0), 9));
        assert_eq!(live_conn(&conns, &subs, 0), Some(Token(0)));
        assert_eq!(live_conn(&conns, &subs, 1), None, "another server");
        subs.opened(0, ServerRef::new(Token(0), 8));
        assert_eq!(
            live_conn(&conns, &subs, 0),
            None,
            "its slot holds another connection"
        );
    }

    #[test]
    fn a_command_goes_on_its_live_push_connection_or_one_opened_for_it() {
        let mut conns = table(true);
        let d = push_plan(&conns, Token(1), 0, 0, b"cmd").expect("an op");
        assert_eq!((d.server, d.conn, d.usage), (Some(0), None, Usage::Push));
        assert!(matches!(d.reply, Reply::Pushed));
        assert!(matches!(d.write, Sent::Bytes(b"cmd")));
        let subs = conns
            .client_mut(1)
            .and_then(|c| c.subs_mut())
            .expect("subs");
        subs.opened(0, ServerRef::new(Token(0), 9));
        let d = push_plan(&conns, Token(1), 0, 0, b"cmd").expect("an op");
        assert_eq!(d.conn, Some(Token(0)), "the one it has");
        let d = push_plan(&conns, Token(1), 0, 1, b"cmd").expect("an op");
        assert_eq!(d.conn, None, "none to that server");
    }

    #[test]
    fn subscriptions_with_nothing_in_them_leave_their_client() {
        let mut conns = table(true);
        let mut subs = take_subs(&mut conns, Token(1));
        assert!(subs.is_idle());
        assert!(conns.client(1).is_some_and(|c| c.subs().is_none()), "taken");
        subs.channels.push(b"ch".to_vec());
        put_subs(&mut conns, Token(1), subs);
        let subs = take_subs(&mut conns, Token(1));
        assert_eq!(subs.channels, vec![b"ch".to_vec()], "kept");
        put_subs(&mut conns, Token(1), Subs::default());
        assert!(
            conns.client(1).is_some_and(|c| c.subs().is_none()),
            "none kept"
        );
    }
}
