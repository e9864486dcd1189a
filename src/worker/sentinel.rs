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

use super::Worker;
use crate::net::{Endpoint, Stream};
use crate::proto::redis::sentinel::{self, Said};
use crate::proto::Parse;
use mio::{Interest, Token};
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

/// One pool's sentinels and the conversation with one of them.
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
    /// The conversation, when one is open.
    talk: Option<Talk>,
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
    /// Replies still due to `AUTH` (0 or 1), then to the master
    /// questions, then to the replica questions.
    auth_due: bool,
    masters_due: usize,
    replicas_due: usize,
}

/// The watches of a worker's pools that list sentinels.
pub(super) fn watches(pools: &[super::pool::PoolRt]) -> Vec<Watch> {
    pools
        .iter()
        .enumerate()
        .filter(|(_, p)| p.cfg.failover.on())
        .map(|(i, p)| Watch {
            pool: i,
            sentinels: p.cfg.failover.sentinels.clone(),
            auth: p.cfg.failover.sentinel_auth.clone(),
            names: p.cfg.servers.iter().map(|s| s.stats_name()).collect(),
            at: 0,
            talk: None,
            retry_at: None,
            answered: false,
            replicas: p.cfg.failover.read_from != crate::config::ReadFrom::Master,
            opened_at: None,
        })
        .collect()
}

impl Worker<'_> {
    /// Whether every watching pool's masters were answered for.
    pub(super) fn sentinels_answered(&self) -> bool {
        self.sentinels.iter().all(|w| w.answered)
    }

    /// Open a conversation for every watch without one whose retry time
    /// has come (called on every loop turn: cheap when there is none).
    pub(super) fn sentinel_maintain(&mut self, now: Instant) {
        for i in 0..self.sentinels.len() {
            let w = &self.sentinels[i];
            if w.replicas && w.talk.is_some() && w.opened_at.is_some_and(|t| now >= t + REFRESH) {
                self.sentinel_again(i);
            }
            let w = &self.sentinels[i];
            if w.talk.is_none() && w.retry_at.is_none_or(|t| t <= now) {
                self.sentinel_open(i, now);
            }
        }
    }

    fn sentinel_open(&mut self, i: usize, now: Instant) {
        let w = &self.sentinels[i];
        let (host, port) = w.sentinels[w.at].clone();
        // A blocking lookup, as for servers at load: sentinels are written
        // as IP literals in practice, which resolve without a query.
        let opened = crate::net::resolve(&host, port)
            .and_then(|a| crate::net::connect(&Endpoint::Tcp(a), true));
        let mut sock = match opened {
            Ok(s) => s,
            Err(e) => {
                self.sentinel_lost(i, &crate::util::strerror(&e), now);
                return;
            }
        };
        let token = super::tokens::sentinel(i);
        if let Err(e) =
            self.poll
                .registry()
                .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
        {
            self.sentinel_lost(i, &crate::util::strerror(&e), now);
            return;
        }
        let w = &mut self.sentinels[i];
        let mut wbuf = Vec::new();
        sentinel::opening(&w.names, w.auth.as_deref(), w.replicas, &mut wbuf);
        w.opened_at = Some(now);
        w.talk = Some(Talk {
            sock,
            rbuf: Vec::new(),
            wbuf,
            auth_due: w.auth.is_some(),
            masters_due: w.names.len(),
            replicas_due: if w.replicas { w.names.len() } else { 0 },
        });
        crate::log_info!(
            "pool '{}': asking sentinel {} for its masters",
            self.pools[w.pool].cfg.name,
            sentinel_text(&host, port)
        );
    }

    /// Ask the same sentinel everything again (replicas changed): the
    /// conversation is opened anew on the next loop turn.
    fn sentinel_again(&mut self, i: usize) {
        let w = &mut self.sentinels[i];
        if let Some(mut t) = w.talk.take() {
            let _ = self.poll.registry().deregister(&mut t.sock);
        }
        w.retry_at = None;
    }

    /// The conversation ended (`why`): the next sentinel is tried soon.
    fn sentinel_lost(&mut self, i: usize, why: &str, now: Instant) {
        let w = &mut self.sentinels[i];
        if let Some(mut t) = w.talk.take() {
            let _ = self.poll.registry().deregister(&mut t.sock);
        }
        let (host, port) = &w.sentinels[w.at];
        let was = sentinel_text(host, *port);
        w.at = (w.at + 1) % w.sentinels.len();
        w.retry_at = Some(now + RETRY);
        let (host, port) = &w.sentinels[w.at];
        crate::log_warn!(
            "pool '{}': sentinel {} lost ({}); trying {} next",
            self.pools[w.pool].cfg.name,
            was,
            why,
            sentinel_text(host, *port)
        );
    }

    /// Readiness on conversation `i`.
    pub(super) fn sentinel_event(&mut self, i: usize, now: Instant) {
        let Some(t) = self.sentinels.get_mut(i).and_then(|w| w.talk.as_mut()) else {
            return;
        };
        // Write what is left of the questions.
        while !t.wbuf.is_empty() {
            match t.sock.write(&t.wbuf) {
                Ok(0) => break,
                Ok(n) => {
                    t.wbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let why = crate::util::strerror(&e);
                    self.sentinel_lost(i, &why, now);
                    return;
                }
            }
        }
        let mut chunk = [0u8; 4096];
        let mut closed = None;
        loop {
            match t.sock.read(&mut chunk) {
                Ok(0) => {
                    closed = Some("closed by the sentinel".to_string());
                    break;
                }
                Ok(n) => t.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    closed = Some(crate::util::strerror(&e));
                    break;
                }
            }
        }
        // Every whole reply, in order.
        let mut replies = Vec::new();
        let mut used = 0;
        loop {
            match crate::proto::redis::parse_response(&t.rbuf[used..]) {
                Ok(Parse::Done(r)) => {
                    replies.push(t.rbuf[used..used + r.len].to_vec());
                    used += r.len;
                }
                Ok(Parse::Incomplete { .. }) if t.rbuf.len() - used <= MAX_REPLY => break,
                _ => {
                    closed = Some("a reply that is not RESP".into());
                    break;
                }
            }
        }
        t.rbuf.drain(..used);
        for r in replies {
            if let Err(why) = self.sentinel_said(i, &r, now) {
                self.sentinel_lost(i, &why, now);
                return;
            }
        }
        if let Some(why) = closed {
            self.sentinel_lost(i, &why, now);
        }
    }

    /// Act on one reply of conversation `i`; an `Err` ends it.
    fn sentinel_said(&mut self, i: usize, reply: &[u8], now: Instant) -> Result<(), String> {
        let said = sentinel::read(reply);
        let w = &mut self.sentinels[i];
        let (pool, replicas) = (w.pool, w.replicas);
        let Some(t) = w.talk.as_mut() else {
            return Ok(());
        };
        if std::mem::take(&mut t.auth_due) {
            return match said {
                Said::Error(e) => Err(format!("AUTH refused: {e}")),
                _ => Ok(()),
            };
        }
        let names = w.names.len();
        if t.masters_due > 0 {
            let server = names - t.masters_due;
            t.masters_due -= 1;
            if t.masters_due == 0 {
                w.answered = true;
            }
            let name = w.names[server].clone();
            match said {
                Said::Master(at) => self.move_master(pool, server, &at.host, at.port, now),
                Said::Unknown => crate::log_warn!(
                    "pool '{}': the sentinel monitors no master named '{}'",
                    self.pools[pool].cfg.name,
                    name
                ),
                Said::Error(e) => return Err(format!("asking for '{name}': {e}")),
                _ => {}
            }
            return Ok(());
        }
        if t.replicas_due > 0 {
            let server = names - t.replicas_due;
            t.replicas_due -= 1;
            match sentinel::read_replicas(reply) {
                Some(up) => self.set_replicas(pool, server, &up),
                None => crate::log_warn!(
                    "pool '{}': no replicas of '{}': {}",
                    self.pools[pool].cfg.name,
                    w.names[server],
                    String::from_utf8_lossy(reply).trim_end()
                ),
            }
            return Ok(());
        }
        match said {
            Said::ReplicasChanged if replicas => {
                self.sentinel_again(i);
                Ok(())
            }
            Said::Switch { name, to } => {
                if let Some(server) = w.names.iter().position(|n| *n == name) {
                    crate::log_notice!(
                        "pool '{}': sentinel announces a failover of '{}' to {}",
                        self.pools[pool].cfg.name,
                        name,
                        sentinel_text(&to.host, to.port)
                    );
                    self.move_master(pool, server, &to.host, to.port, now);
                    if replicas {
                        // The promoted replica left the replicas.
                        self.sentinel_again(i);
                    }
                }
                Ok(())
            }
            Said::Error(e) => Err(e),
            _ => Ok(()),
        }
    }

    /// The replicas of server `server` of `pool` that are up now: found
    /// among the pool's servers past the configured ones, or added.
    fn set_replicas(
        &mut self,
        pool: usize,
        server: usize,
        up: &[crate::proto::redis::cluster::NodeAddr],
    ) {
        let p = &mut self.pools[pool];
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

    /// Server `server` of `pool` is at `host:port` from now on.
    fn move_master(&mut self, pool: usize, server: usize, host: &str, port: u16, now: Instant) {
        let addr = match crate::net::resolve(host, port) {
            Ok(a) => a,
            Err(e) => {
                crate::log_warn!(
                    "pool '{}': master of '{}' at {}: {}",
                    self.pools[pool].cfg.name,
                    self.pools[pool].servers[server].name,
                    sentinel_text(host, port),
                    e
                );
                return;
            }
        };
        let p = &mut self.pools[pool];
        let s = &mut p.servers[server];
        let to = Endpoint::Tcp(addr);
        if s.endpoint.as_ref() == Some(&to) {
            return;
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
        for t in old {
            self.retire_when_answered(t);
        }
    }
}

/// `host:port`, an IPv6 host in brackets.
fn sentinel_text(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
