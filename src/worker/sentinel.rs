//! Following Redis Sentinel: where each shard's master is, and its moves;
//! with `read_from`, which of its replicas are up to serve reads.
//!
//! A pool with `sentinels` gets one conversation per worker with one of
//! its sentinels at a time (`proto/redis/sentinel.rs` says what is said):
//! the master of every shard is asked for, then `+switch-master` is
//! subscribed to. An answer or an announced failover that names a new
//! address moves the server there: its shared connections take no new
//! request and close once their replies are in (the old master may still
//! answer what it was sent), the next request connects to the new master
//! at once (no backoff, no ejection left over from the old one). Keys do
//! not move: placement hashes the server's name.
//!
//! With `read_from`, the replicas of every name are asked for too, and
//! replica events (`+sdown`, `-sdown`, `+slave`) and failovers start the
//! conversation again, so the list of replicas up stays the sentinel's.
//!
//! A lost sentinel is replaced by the next one of the list (after
//! [`RETRY`]), and the conversation starts again with the questions, so a
//! failover announced while no sentinel was listened to is still seen.
//! Each worker keeps its own conversation: nothing is shared between
//! processes, and a worker restarted after a crash asks again.

use super::pool::PoolRt;
use super::upkeep::Upkeep;
use crate::net::{Endpoint, Stream};
use crate::proto::redis::cluster::NodeAddr;
use crate::proto::redis::sentinel::{self, Said};
use crate::proto::Parse;
use mio::{Interest, Registry, Token};
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// How long after losing a sentinel the next one is tried.
const RETRY: Duration = Duration::from_millis(200);
/// With replicas serving reads: how often everything is asked again (a
/// replica a sentinel had not connected to yet when asked, an event
/// missed between two conversations).
const REFRESH: Duration = Duration::from_secs(5);
/// Longest a new worker waits for its sentinels' first answer before it
/// takes clients (see `Worker::gate`).
pub(super) const GATE: Duration = Duration::from_millis(1000);
/// Largest reply taken from a sentinel (its answers are a few dozen bytes).
const MAX_REPLY: usize = 64 * 1024;

/// One pool's sentinels and the conversation with one of them: all the
/// state of following them, acted on with the pool it follows and the
/// poll registry passed in.
#[derive(Debug)]
pub(super) struct Watch {
    /// The pool.
    pool: usize,
    /// The sentinels, tried in turn.
    sentinels: Vec<(String, u16)>,
    /// `sentinel_auth`.
    auth: Option<String>,
    /// Master name of each server, in the pool's order.
    names: Vec<String>,
    /// The sentinel talked to (or tried next).
    at: usize,
    /// The conversation's socket and buffers, when one is open.
    talk: Option<Talk>,
    /// Replies the open conversation still owes.
    due: Due,
    /// No conversation is opened before this instant.
    retry_at: Option<Instant>,
    /// Every master name got an answer once.
    answered: bool,
    /// Replicas serve reads (`read_from`).
    replicas: bool,
    /// When the current conversation was opened.
    opened_at: Option<Instant>,
}

/// An open conversation.
#[derive(Debug)]
struct Talk {
    sock: Stream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
}

/// Replies still due: to `AUTH` (0 or 1), then to the master questions,
/// then to the replica questions; after them, events.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Due {
    auth: bool,
    masters: usize,
    replicas: usize,
}

/// What a reply leads to, besides what it changed in the pool.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The conversation goes on.
    Listen,
    /// Ask the same sentinel everything again (replicas changed).
    AskAgain,
}

/// The watches of a worker's pools that list sentinels.
pub(super) fn watches(pools: &[PoolRt]) -> Vec<Watch> {
    pools
        .iter()
        .enumerate()
        .filter(|(_, p)| p.cfg.failover.on())
        .map(|(i, p)| Watch::new(i, p))
        .collect()
}

impl Watch {
    /// The watch of pool `pool` (whose configuration lists sentinels).
    fn new(pool: usize, p: &PoolRt) -> Watch {
        Watch {
            pool,
            sentinels: p.cfg.failover.sentinels.clone(),
            auth: p.cfg.failover.sentinel_auth.clone(),
            names: p.cfg.servers.iter().map(|s| s.stats_name()).collect(),
            at: 0,
            talk: None,
            due: Due::default(),
            retry_at: None,
            answered: false,
            replicas: p.cfg.failover.read_from != crate::config::ReadFrom::Master,
            opened_at: None,
        }
    }

    /// The pool it follows.
    pub fn pool(&self) -> usize {
        self.pool
    }

    /// Every master name got an answer once.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Open a conversation (as `token`) if none is open and the retry time
    /// has come; with replicas, ask again every [`REFRESH`].
    pub fn maintain(&mut self, token: Token, pool: &PoolRt, registry: &Registry, now: Instant) {
        if self.replicas
            && self.talk.is_some()
            && self.opened_at.is_some_and(|t| now >= t + REFRESH)
        {
            self.again(registry);
        }
        if self.talk.is_none() && self.retry_at.is_none_or(|t| t <= now) {
            self.open(token, pool, registry, now);
        }
    }

    fn open(&mut self, token: Token, pool: &PoolRt, registry: &Registry, now: Instant) {
        let (host, port) = self.sentinels[self.at].clone();
        // A blocking lookup, as for servers at load: sentinels are written
        // as IP literals in practice, which resolve without a query.
        let opened = crate::net::resolve(&host, port)
            .and_then(|a| crate::net::connect(&Endpoint::Tcp(a), true))
            .and_then(|mut sock| {
                registry
                    .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
                    .map(|()| sock)
            });
        let sock = match opened {
            Ok(s) => s,
            Err(e) => return self.lost(&crate::util::strerror(&e), pool, registry, now),
        };
        let mut wbuf = Vec::new();
        sentinel::opening(&self.names, self.auth.as_deref(), self.replicas, &mut wbuf);
        self.opened_at = Some(now);
        self.talk = Some(Talk {
            sock,
            rbuf: Vec::new(),
            wbuf,
        });
        self.due = self.questions();
        crate::log_info!(
            "pool '{}': asking sentinel {} for its masters",
            pool.cfg.name,
            sentinel_text(&host, port)
        );
    }

    /// The replies a new conversation's questions are owed.
    fn questions(&self) -> Due {
        Due {
            auth: self.auth.is_some(),
            masters: self.names.len(),
            replicas: if self.replicas { self.names.len() } else { 0 },
        }
    }

    /// Close the conversation; it is opened anew on the next loop turn.
    fn again(&mut self, registry: &Registry) {
        if let Some(mut t) = self.talk.take() {
            let _ = registry.deregister(&mut t.sock);
        }
        self.retry_at = None;
    }

    /// The conversation ended (`why`): the next sentinel is tried soon.
    fn lost(&mut self, why: &str, pool: &PoolRt, registry: &Registry, now: Instant) {
        if let Some(mut t) = self.talk.take() {
            let _ = registry.deregister(&mut t.sock);
        }
        let (host, port) = &self.sentinels[self.at];
        let was = sentinel_text(host, *port);
        self.at = (self.at + 1) % self.sentinels.len();
        self.retry_at = Some(now + RETRY);
        let (host, port) = &self.sentinels[self.at];
        crate::log_warn!(
            "pool '{}': sentinel {} lost ({}); trying {} next",
            pool.cfg.name,
            was,
            why,
            sentinel_text(host, *port)
        );
    }

    /// Readiness on the conversation: write what is left of the questions,
    /// read and act on every whole reply. The server connections of a
    /// master that moved are added to `retire`.
    pub fn event(
        &mut self,
        pool: &mut PoolRt,
        registry: &Registry,
        now: Instant,
        retire: &mut Vec<Token>,
    ) {
        let Some(t) = self.talk.as_mut() else {
            return;
        };
        let (replies, closed) = match t.exchange() {
            Ok(r) => r,
            Err(why) => return self.lost(&why, pool, registry, now),
        };
        for r in replies {
            if self.talk.is_none() {
                break; // asked again: the rest is of the closed conversation
            }
            match self.said(&r, pool, now, retire) {
                Ok(Next::Listen) => {}
                Ok(Next::AskAgain) => self.again(registry),
                Err(why) => return self.lost(&why, pool, registry, now),
            }
        }
        if let Some(why) = closed {
            self.lost(&why, pool, registry, now);
        }
    }

    /// Act on one reply; an `Err` ends the conversation.
    fn said(
        &mut self,
        reply: &[u8],
        pool: &mut PoolRt,
        now: Instant,
        retire: &mut Vec<Token>,
    ) -> Result<Next, String> {
        let said = sentinel::read(reply);
        let due = &mut self.due;
        if std::mem::take(&mut due.auth) {
            return match said {
                Said::Error(e) => Err(format!("AUTH refused: {e}")),
                _ => Ok(Next::Listen),
            };
        }
        let names = self.names.len();
        if due.masters > 0 {
            let server = names - due.masters;
            due.masters -= 1;
            if due.masters == 0 {
                self.answered = true;
            }
            let name = &self.names[server];
            match said {
                Said::Master(at) => retire.extend(move_master(pool, server, &at, now)),
                Said::Unknown => crate::log_warn!(
                    "pool '{}': the sentinel monitors no master named '{}'",
                    pool.cfg.name,
                    name
                ),
                Said::Error(e) => return Err(format!("asking for '{name}': {e}")),
                _ => {}
            }
            return Ok(Next::Listen);
        }
        if due.replicas > 0 {
            let server = names - due.replicas;
            due.replicas -= 1;
            match sentinel::read_replicas(reply) {
                Some(up) => set_replicas(pool, server, &up),
                None => crate::log_warn!(
                    "pool '{}': no replicas of '{}': {}",
                    pool.cfg.name,
                    self.names[server],
                    String::from_utf8_lossy(reply).trim_end()
                ),
            }
            return Ok(Next::Listen);
        }
        match said {
            Said::ReplicasChanged if self.replicas => Ok(Next::AskAgain),
            Said::Switch { name, to } => {
                let Some(server) = self.names.iter().position(|n| *n == name) else {
                    return Ok(Next::Listen);
                };
                crate::log_notice!(
                    "pool '{}': sentinel announces a failover of '{}' to {}",
                    pool.cfg.name,
                    name,
                    sentinel_text(&to.host, to.port)
                );
                retire.extend(move_master(pool, server, &to, now));
                // The promoted replica left the replicas.
                Ok(if self.replicas {
                    Next::AskAgain
                } else {
                    Next::Listen
                })
            }
            Said::Error(e) => Err(e),
            _ => Ok(Next::Listen),
        }
    }
}

impl Talk {
    /// Write what is left of the questions and read what came: the whole
    /// replies, in order, and why the conversation ended if it did
    /// (`Err`: it cannot go on, nothing read counts).
    fn exchange(&mut self) -> Result<(Vec<Vec<u8>>, Option<String>), String> {
        while !self.wbuf.is_empty() {
            match self.sock.write(&self.wbuf) {
                Ok(0) => break,
                Ok(n) => {
                    self.wbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(crate::util::strerror(&e)),
            }
        }
        let mut chunk = [0u8; 4096];
        let mut closed = None;
        loop {
            match self.sock.read(&mut chunk) {
                Ok(0) => {
                    closed = Some("closed by the sentinel".to_string());
                    break;
                }
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    closed = Some(crate::util::strerror(&e));
                    break;
                }
            }
        }
        let (replies, bad) = whole_replies(&mut self.rbuf);
        Ok((replies, bad.or(closed)))
    }
}

/// The whole replies at the front of `rbuf`, taken out of it in order, and
/// why the conversation cannot go on if what follows is not RESP or is
/// longer than [`MAX_REPLY`] without ending.
fn whole_replies(rbuf: &mut Vec<u8>) -> (Vec<Vec<u8>>, Option<String>) {
    let mut replies = Vec::new();
    let mut used = 0;
    let mut bad = None;
    loop {
        match crate::proto::redis::parse_response(&rbuf[used..]) {
            Ok(Parse::Done(r)) => {
                replies.push(rbuf[used..used + r.len].to_vec());
                used += r.len;
            }
            Ok(Parse::Incomplete { .. }) if rbuf.len() - used <= MAX_REPLY => break,
            _ => {
                bad = Some("a reply that is not RESP".into());
                break;
            }
        }
    }
    rbuf.drain(..used);
    (replies, bad)
}

/// The replicas of server `server` of `pool` that are up now: found among
/// the pool's servers past the configured ones, or added.
fn set_replicas(p: &mut PoolRt, server: usize, up: &[NodeAddr]) {
    let configured = p.cfg.servers.len();
    let mut idx = Vec::with_capacity(up.len());
    for n in up {
        let Ok(addr) = crate::net::resolve(&n.host, n.port) else {
            continue;
        };
        let at = Endpoint::Tcp(addr);
        if p.servers[server].endpoint.as_ref() == Some(&at) {
            continue; // the master itself, mid-failover
        }
        let i = match (configured..p.servers.len())
            .find(|&i| p.servers[i].endpoint.as_ref() == Some(&at))
        {
            Some(i) => i,
            None => {
                crate::log_notice!(
                    "pool '{}': replica {} of '{}' serves reads",
                    p.cfg.name,
                    addr,
                    p.servers[server].name
                );
                p.add_server(addr.to_string(), at)
            }
        };
        idx.push(i);
    }
    if let Some(r) = p.replicas_of.get_mut(server) {
        *r = idx;
    }
}

/// Server `server` of `p` is at `to` from now on: what its old address
/// earned (failures, backoff, ejection) is dropped, and its shared
/// connections are returned, to close once their replies are in.
fn move_master(p: &mut PoolRt, server: usize, to: &NodeAddr, now: Instant) -> Vec<Token> {
    let (host, port) = (to.host.as_str(), to.port);
    let addr = match crate::net::resolve(host, port) {
        Ok(a) => a,
        Err(e) => {
            crate::log_warn!(
                "pool '{}': master of '{}' at {}: {}",
                p.cfg.name,
                p.servers[server].name,
                sentinel_text(host, port),
                e
            );
            return Vec::new();
        }
    };
    let s = &mut p.servers[server];
    let to = Endpoint::Tcp(addr);
    if s.endpoint.as_ref() == Some(&to) {
        return Vec::new();
    }
    crate::log_notice!(
        "pool '{}': server '{}' is now served by the master at {}",
        p.cfg.name,
        s.name,
        sentinel_text(host, port)
    );
    s.endpoint = Some(to);
    s.tls_host = host.to_string();
    // What the old address earned is not the new one's.
    s.failures = 0;
    s.retry_at = None;
    s.backoff = Duration::ZERO;
    s.last_fault = None;
    s.probing = false;
    let was_ejected = s.ejected_until.take().is_some();
    let old: Vec<Token> = s.conns.iter_mut().filter_map(Option::take).collect();
    if was_ejected {
        p.rebuild(now);
    }
    old
}

/// What the sentinel gate does at a loop pass ([`gate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GateStep {
    /// Stays shut: no client taken yet.
    Shut,
    /// Opens: every watch's masters were answered for.
    Answered,
    /// Opens: its time is up before every watch was answered (clients
    /// are served with the configured addresses).
    TimedOut,
}

/// The gate shut until `until`, at `now`, over the pools' `watches`: it
/// opens once every watch was answered, or at `until` in any case.
pub(super) fn gate(until: Instant, watches: &[Watch], now: Instant) -> GateStep {
    let answered = watches.iter().all(Watch::answered);
    if answered {
        GateStep::Answered
    } else if now < until {
        GateStep::Shut
    } else {
        GateStep::TimedOut
    }
}

/// Every watch of `watches` kept up (`Watch::maintain`: a conversation
/// opened where none is and the retry time has come, one with replicas
/// asked again when due), each as its own token and with its pool of
/// `pools`. Called on every loop turn: cheap when nothing is due.
pub(super) fn maintain(watches: &mut [Watch], pools: &[PoolRt], registry: &Registry, now: Instant) {
    for (i, w) in watches.iter_mut().enumerate() {
        w.maintain(super::tokens::sentinel(i), &pools[w.pool()], registry, now);
    }
}

/// Readiness on conversation `i` of `watches`, carried on with its pool
/// of `pools` (`Watch::event`): the connections of a moved master, each
/// to retire (it takes no new request; one that owes nothing closes now,
/// the others once answered).
pub(super) fn event(
    watches: &mut [Watch],
    pools: &mut [PoolRt],
    registry: &Registry,
    i: usize,
    now: Instant,
) -> Vec<Upkeep> {
    let Some(w) = watches.get_mut(i) else {
        return Vec::new();
    };
    let mut retire = Vec::new();
    w.event(&mut pools[w.pool()], registry, now, &mut retire);
    retire.into_iter().map(Upkeep::Retire).collect()
}

/// `host:port`, an IPv6 host in brackets.
fn sentinel_text(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
#[path = "sentinel_tests.rs"]
mod tests;
