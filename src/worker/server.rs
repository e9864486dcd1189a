//! Server side of the data path: connections (lazy or preconnected),
//! batched writes, reads, failures and ejection (replies are matched to
//! their requests in `server_reply.rs`).

use super::closes::Close;
use super::cluster_stream::{feed, Fed};
use super::conn::{ClientRef, Conn, ConnTable, Open, RepStream, Server, ServerRef, Waiter};
use super::fault::{IoFault, ServerFault};
use super::pool::PoolRt;
use super::{Worker, READ_BUDGET, READ_CHUNK};
use crate::stats::shm::StatsSlot;
use crate::stats::WorkerField;
use mio::{Interest, Token};
use slab::Slab;
use std::io::{ErrorKind, Write};
use std::time::Instant;

impl Worker<'_> {
    /// The connection in `slot` to a server, for what `open` says: the
    /// slot's, opened if there is none, or a new one apart from the slot
    /// (opened as its pool decides, `PoolRt::dial`).
    #[inline(always)]
    pub(super) fn server_conn(
        &mut self,
        pool: usize,
        server: usize,
        slot: usize,
        now: Instant,
        open: Open,
    ) -> Result<Token, ServerFault> {
        // The open connection, nearly every request's: looked up first,
        // inline; what follows runs once per new connection.
        if let (false, Some(t)) = (
            open == Open::Dedicated,
            self.pools[pool].servers[server].conns[slot],
        ) {
            if self.conns.server(t.0).is_some() {
                return Ok(t);
            }
        }
        // A new one, as its pool says (`PoolRt::dial`): connected,
        // entered in the table, its handshake queued before any request.
        let dial = self.pools[pool].dial(server, slot, now, open)?;
        let p = &self.pools[pool];
        let opened = crate::net::connect(&dial.endpoint, dial.keepalive)
            .and_then(|s| p.tls.connected(s, &p.servers[server].tls_host));
        let mut sock = match opened {
            Ok(s) => s,
            Err(e) => {
                let fault = ServerFault::Connect(IoFault::from(&e));
                self.pools[pool].connect_failed(pool, server, now, &fault, &self.stats);
                return Err(fault);
            }
        };
        let id = self.ids.next();
        let entry = self.conns.vacant_entry();
        let token = Token(entry.key());
        let both = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self.poll.registry().register(&mut sock, token, both) {
            return Err(ServerFault::Register(IoFault::from(&e)));
        }
        let at = (pool, server, slot);
        let s = Server::new(sock, id, at, now, !dial.keep);
        entry.insert(Conn::Server(Box::new(s)));
        self.pools[pool].opened(pool, (server, slot), token, dial.keep, &self.stats);
        self.stats.worker_add(WorkerField::ServerConnects, 1);
        for (op, bytes) in dial.handshake {
            let write = |out: &mut Vec<u8>| out.extend_from_slice(&bytes);
            self.enqueue(token, Some(Waiter::Internal), op, write, now);
        }
        Ok(token)
    }

    /// Write queued requests (one write for everything queued this iteration).
    pub(super) fn write_server(&mut self, token: Token, now: Instant) {
        if matches!(self.conns.server(token.0), Some(s) if s.rstream().is_some_and(|r| r.is_blocked()))
        {
            // Requests may now wait behind a reply paused for its
            // lagging client: if they are someone else's, read on.
            self.resume
                .extend(super::stream_reply::spool_rest(&mut self.conns, token));
        }
        // A connection fed from a spool is refilled as it drains, and
        // written again while its socket takes more.
        loop {
            match write_queued(&mut self.conns, &self.stats, token) {
                Wrote::Idle => {}
                Wrote::Failed(fault) => {
                    self.close_all(Some(Close::Server {
                        token,
                        fault,
                        at: now,
                    }));
                    return;
                }
                Wrote::Written(resume) => self.resume.extend(resume),
            }
            let Some(drained) = self.conns.server(token.0).and_then(|s| s.refills()) else {
                return;
            };
            let fed = feed(&mut self.conns, &self.stats, &mut self.dirty, token, now);
            if let Fed::ClientLeft(sid) = fed {
                self.close_all(super::closes::half_sent(
                    &self.conns,
                    ServerRef::new(token, sid),
                    ServerFault::HalfResentClientLeft,
                ));
            }
            if !(fed.queued() && drained) {
                return;
            }
        }
    }

    pub(super) fn read_server(&mut self, token: Token, now: Instant, hup: bool) {
        let mut total = 0;
        let mut got = false;
        loop {
            let Some(s) = self.conns.server_mut(token.0) else {
                return;
            };
            if s.rstream().is_some_and(|r| r.is_blocked()) {
                // A streamed reply's client lags: read on when it drains.
                return;
            }
            if total >= READ_BUDGET {
                // Hand what arrived on (a large reply may be streaming)
                // before reading more.
                self.process_replies(token, now);
                total = 0;
                continue;
            }
            match s.read_in(READ_CHUNK) {
                Ok((0, _)) => {
                    self.process_replies(token, now);
                    let fault = ServerFault::Closed;
                    self.close_all(Some(Close::Server {
                        token,
                        fault,
                        at: now,
                    }));
                    return;
                }
                Ok((n, short)) => {
                    total += n;
                    got = true;
                    if short && !hup {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let fault = ServerFault::Socket(IoFault::from(&e));
                    self.close_all(Some(Close::Server {
                        token,
                        fault,
                        at: now,
                    }));
                    return;
                }
            }
        }
        if let Some(s) = self.conns.server(token.0) {
            if s.sock().is_tls() && !s.wbuf().is_empty() {
                // Requests written during the TLS handshake wait inside
                // rustls up to its limit; the rest waits here until the
                // handshake ends, which a read finishes, not an EPOLLOUT.
                self.write_server(token, now);
            }
        }
        self.process_replies(token, now);
        // The mark for the replies it still owes, and the time by which
        // they are read anyway.
        if let Some(s) = self.conns.server_mut(token.0) {
            if let Some(at) = s.mark_after_read(self.pools[s.pool()].proto, got, now) {
                self.read_deadlines.push(at, (token, s.id()));
            }
        }
    }
}

/// What writing a server connection's queued requests came to
/// (`write_queued`).
#[derive(Debug, PartialEq, Eq)]
enum Wrote {
    /// Nothing: it is gone, or still connecting.
    Idle,
    /// Its socket failed: it is closed for this.
    Failed(ServerFault),
    /// Written as far as its socket took, and counted; the client
    /// streaming a request to it that reads again now it is below the
    /// low mark, if any.
    Written(Option<Token>),
}

/// Write what server connection `st` has queued (one write for
/// everything queued this iteration), its requests counted as queued
/// and, once written whole, as sent.
#[inline]
fn write_queued(conns: &mut Slab<Conn>, stats: &StatsSlot, st: Token) -> Wrote {
    let Some(s) = conns.server_mut(st.0) else {
        return Wrote::Idle;
    };
    if s.is_connecting() {
        return Wrote::Idle;
    }
    if s.sock().is_tls() {
        if let Err(e) = s.sock_mut().flush() {
            return Wrote::Failed(ServerFault::Socket(IoFault::from(&e)));
        }
    }
    if let Err(e) = s.write_out() {
        return Wrote::Failed(ServerFault::Socket(IoFault::from(&e)));
    }
    let streaming = s.stream().is_some();
    s.count_queued(stats);
    s.count_written(stats);
    // Below the low mark: the client streaming to it reads again.
    Wrote::Written(if streaming {
        super::stream::drained_client(conns, st)
    } else {
        None
    })
}

/// At the end of a pass: what was queued on the connections `counting`
/// names and not written in it (still connecting, or their socket full)
/// is counted now, once per connection (`Server::count_queued`; one gone
/// since is skipped), and the list starts empty for the next pass.
pub(super) fn count_queued(conns: &mut Slab<Conn>, counting: &mut Vec<Token>, stats: &StatsSlot) {
    for t in counting.drain(..) {
        if let Some(s) = conns.server_mut(t.0) {
            s.count_queued(stats);
        }
    }
}

/// A pool's record of its servers' connections.
impl PoolRt {
    /// Server connection `s`, at `token`, closed: what it still held
    /// leaves its server's gauges, and the slot it held is free (unless a
    /// newer connection holds it already).
    pub(super) fn conn_closed(&mut self, token: Token, s: &mut Server, stats: &StatsSlot) {
        s.leave_gauges(stats);
        self.servers[s.server()].forget_conn(s.slot(), token);
    }
}

/// Who a server connection leaves behind when it closes, besides the
/// requests it carried (each of those is its `Inflight::lost`'s).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Fallout {
    /// The connection, by token and id.
    lost: ServerRef,
    /// The client whose large request streamed to it, to read on (it was
    /// paused for it): the rest of its request is dropped as it arrives,
    /// and its reply is the connection's error.
    pub resume: Option<Token>,
    /// The subscriber it pushed to: its subscriptions there are gone, so
    /// it is closed, as by a Redis of its own that went away.
    subscriber: Option<ClientRef>,
    /// The client that got part of a reply streamed from it: it cannot be
    /// answered, and is closed (one that got none gets the error reply).
    half_answered: Option<ClientRef>,
    /// The client whose transaction it carried: it goes if the
    /// transaction was still on it (`Client::txn_lost`).
    pinned: Option<Token>,
}

/// Server connection `s`, at `st` and taken out of the table, closes:
/// what it streamed in either direction is let go (the client streaming
/// a request to it hears that it is lost, `ReqStream::server_lost`), and
/// who else it served is named for the loop to deal with in turn, each
/// checked to be still there when its turn comes.
pub(super) fn fallout(conns: &mut Slab<Conn>, st: Token, s: &mut Server) -> Fallout {
    let lost = ServerRef::new(st, s.id());
    let resume = s.set_stream(None).and_then(|ss| {
        let c = conns
            .client_mut(ss.client.0)
            .filter(|c| c.id() == ss.client_id)?;
        c.stream_mut()?.server_lost(lost).then_some(ss.client)
    });
    Fallout {
        lost,
        resume,
        subscriber: s.push_to(),
        half_answered: s.set_rstream(None).and_then(RepStream::half_answered),
        pinned: s.pinned(),
    }
}

impl Fallout {
    /// The clients it leaves to close, once each of its requests is
    /// answered as its `Inflight::lost` says, in order: the subscriber,
    /// the half-answered client, the client of its transaction
    /// (`server` of `pool`: the connection's).
    pub(super) fn closes(self, pool: usize, server: usize) -> impl Iterator<Item = Close> {
        let lost = self.lost;
        [
            (self.subscriber).map(|client| Close::Unsubscribed {
                client,
                pool,
                server,
            }),
            (self.half_answered).map(|client| Close::Named {
                client,
                error: true,
            }),
            (self.pinned).map(|token| Close::Pinned { token, lost }),
        ]
        .into_iter()
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::proto::redis::{stream_head, StreamMachine};
    use crate::proto::Limits;
    use crate::stats::ServerField;
    use crate::worker::conn::{Client, ReqStream, SrvStream};
    use crate::worker::server_conn::Queued;

    const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

    /// A stats region of one pool with one server, and a connection
    /// table holding a server connection (still connecting) to it over a
    /// socket pair, whose other end is returned.
    fn one_server() -> (
        crate::stats::shm::Region,
        Slab<Conn>,
        Token,
        std::os::unix::net::UnixStream,
    ) {
        let names = crate::stats::carry::Names {
            pools: vec!["p".into()],
            servers: vec![vec!["a".into()]],
            routes: vec![Vec::new()],
        };
        let region = crate::stats::shm::Region::new(names.layout(), 1).expect("stats region");
        let mut conns = Slab::new();
        let (sock, peer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        sock.set_nonblocking(true).expect("non-blocking");
        let sock = mio::net::UnixStream::from_std(sock);
        let s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), Instant::now(), false);
        let st = Token(conns.insert(Conn::Server(Box::new(s))));
        (region, conns, st, peer)
    }

    /// Queue a PING on connection `st`.
    fn queue_ping(conns: &mut Slab<Conn>, st: Token) -> Queued {
        let Ok(crate::proto::Parse::Done(req)) =
            crate::proto::Protocol::Redis.parse_request(PING, &Limits::default())
        else {
            panic!("request parses");
        };
        conns.server_mut(st.0).expect("server").queue(
            Some(Waiter::Internal),
            req.op,
            |w| w.extend_from_slice(PING),
            Instant::now(),
            Default::default(),
        )
    }

    fn server(dedicated: bool) -> Server {
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let mut s = Server::new(Stream::Unix(sock), 9, (0, 0, 0), Instant::now(), dedicated);
        s.set_connected();
        s
    }

    fn client(id: u64) -> Box<Client> {
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        Box::new(Client::new(
            Stream::Unix(sock),
            id,
            0,
            session,
            Instant::now(),
        ))
    }

    #[test]
    fn a_closed_connection_frees_its_slot_unless_a_newer_one_holds_it() {
        use crate::stats::carry::Names;
        use crate::stats::shm::Region;
        let yaml = "p:\n  listen: 127.0.0.1:22999\n  servers:\n    - 127.0.0.1:30001:1\n";
        let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
            .expect("config parses");
        let mut p = PoolRt::new(&c.pools[0], &[]);
        let names = Names {
            pools: vec!["p".into()],
            servers: vec![vec!["a".into()]],
            routes: vec![Vec::new()],
        };
        let region = Region::new(names.layout(), 1).expect("stats region");
        let stats = region.slot(0);
        p.servers[0].conns[0] = Some(Token(4));
        p.conn_closed(Token(5), &mut server(false), &stats);
        assert_eq!(p.servers[0].conns[0], Some(Token(4)), "a newer one's");
        p.conn_closed(Token(4), &mut server(false), &stats);
        assert_eq!(p.servers[0].conns[0], None, "free");
    }

    #[test]
    fn queued_requests_are_written_once_connected_and_a_failed_socket_named() {
        use std::io::Read;
        let (region, mut conns, st, mut peer) = one_server();
        let stats = region.slot(0);
        let _ = queue_ping(&mut conns, st);
        assert_eq!(
            write_queued(&mut conns, &stats, st),
            Wrote::Idle,
            "connecting"
        );
        conns.server_mut(st.0).expect("server").set_connected();
        assert_eq!(write_queued(&mut conns, &stats, st), Wrote::Written(None));
        assert!(conns.server(st.0).is_some_and(|s| s.wbuf().is_empty()));
        let mut got = [0; 14];
        peer.read_exact(&mut got).expect("written");
        assert_eq!(&got, PING);
        drop(peer);
        let _ = queue_ping(&mut conns, st);
        assert!(matches!(
            write_queued(&mut conns, &stats, st),
            Wrote::Failed(ServerFault::Socket(_))
        ));
        assert_eq!(
            write_queued(&mut conns, &stats, Token(7)),
            Wrote::Idle,
            "gone"
        );
    }

    #[test]
    fn what_a_pass_queued_unwritten_is_counted_once_at_its_end() {
        let (region, mut conns, st, _peer) = one_server();
        let stats = region.slot(0);
        let q = queue_ping(&mut conns, st);
        assert!(q.first_uncounted);
        // Still connecting: not written, counted at the end of the pass;
        // a connection gone since is skipped.
        let mut counting = vec![st, Token(7)];
        count_queued(&mut conns, &mut counting, &stats);
        assert!(counting.is_empty(), "the next pass starts empty");
        let sum = |f| region.server_sum(0, 0, f);
        assert_eq!(sum(ServerField::Requests), 1);
        assert_eq!(sum(ServerField::InQueue), 1);
        assert_eq!(sum(ServerField::RequestBytes), PING.len() as u64);
        count_queued(&mut conns, &mut vec![st], &stats);
        assert_eq!(sum(ServerField::Requests), 1, "once");
    }

    #[test]
    fn a_plain_connection_leaves_nobody_behind() {
        let mut conns = Slab::new();
        let mut s = server(false);
        let left = fallout(&mut conns, Token(4), &mut s);
        assert_eq!(
            left,
            Fallout {
                lost: ServerRef::new(Token(4), 9),
                resume: None,
                subscriber: None,
                half_answered: None,
                pinned: None,
            }
        );
    }

    #[test]
    fn a_subscriber_and_a_transaction_are_named() {
        let mut conns = Slab::new();
        let mut s = server(true);
        s.subscribe_for(Token(2), 20);
        let left = fallout(&mut conns, Token(4), &mut s);
        assert_eq!(left.subscriber, Some(ClientRef::new(Token(2), 20)));
        let mut s = server(true);
        s.pin(Some(Token(3)));
        assert_eq!(fallout(&mut conns, Token(4), &mut s).pinned, Some(Token(3)));
    }

    #[test]
    fn the_clients_a_lost_connection_served_close_after_it_in_order() {
        let mut conns = Slab::new();
        let mut s = server(false);
        let none = fallout(&mut conns, Token(4), &mut s).closes(0, 1);
        assert_eq!(none.count(), 0, "a plain connection: none");
        let mut s = server(true);
        s.subscribe_for(Token(2), 20);
        s.pin(Some(Token(3)));
        let lost = ServerRef::new(Token(4), s.id());
        let closes: Vec<_> = fallout(&mut conns, Token(4), &mut s).closes(0, 1).collect();
        let client = ClientRef::new(Token(2), 20);
        assert_eq!(
            closes,
            vec![
                Close::Unsubscribed {
                    client,
                    pool: 0,
                    server: 1
                },
                Close::Pinned {
                    token: Token(3),
                    lost
                },
            ]
        );
    }

    #[test]
    fn a_client_paused_streaming_to_it_reads_on_without_it() {
        let mut conns = Slab::new();
        let ct = Token(conns.insert(Conn::Client(client(30))));
        let st = Token(4);
        let limits = Limits {
            max_value: 4096,
            max_keys: 64,
            pre_auth: false,
        };
        let data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123";
        let head = (1..=data.len())
            .find_map(|n| stream_head(&data[..n], &limits, 8))
            .expect("a streamed head");
        let mut rs = ReqStream::single(
            StreamMachine::new(&head, limits, 8),
            Some(ServerRef::new(st, 9)),
        );
        rs.pause();
        conns.client_mut(ct.0).expect("client").start_stream(rs);
        let mut s = server(true);
        let stream = || SrvStream {
            client: ct,
            client_id: 30,
        };
        // Another client in its slot: not touched.
        s.set_stream(Some(SrvStream {
            client: ct,
            client_id: 31,
        }));
        assert_eq!(fallout(&mut conns, st, &mut s).resume, None);
        assert!(s.stream().is_none(), "let go all the same");
        s.set_stream(Some(stream()));
        assert_eq!(fallout(&mut conns, st, &mut s).resume, Some(ct));
        let c = conns.client_mut(ct.0).expect("client");
        assert_eq!(
            c.stream_mut().and_then(|rs| rs.server()),
            None,
            "the rest dropped"
        );
        s.set_stream(Some(stream()));
        assert_eq!(fallout(&mut conns, st, &mut s).resume, None, "once");
    }
}
