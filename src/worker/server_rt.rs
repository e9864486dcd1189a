//! One backend server as a worker runs it: where it is (its host name
//! looked up again for new connections), its connection slots, failures,
//! ejection and reconnect backoff.

use super::fault::ServerFault;
use crate::config::{PoolConfig, ServerAddr};
use crate::net::Endpoint;
use mio::Token;
use std::time::{Duration, Instant};

/// One backend server of a pool.
#[derive(Debug)]
pub struct ServerRt {
    /// Where it lives (resolved when the configuration was loaded).
    pub endpoint: Option<Endpoint>,
    /// Display name (stats key).
    pub name: String,
    /// Host its TLS certificate must name (as written; empty for unix
    /// sockets).
    pub tls_host: String,
    /// The ketama name and weight, for ring rebuilds.
    pub ring_name: String,
    /// Configured weight.
    pub weight: u32,
    /// Connection slots, each an open connection or none: `server_connections`
    /// slots for RESP2 clients, then as many for RESP3 clients (connections
    /// that sent `HELLO 3` on connect, see [`ServerRt::slot_for`]).
    pub conns: Vec<Option<Token>>,
    /// Consecutive failures (twemproxy's `failure_count`).
    pub failures: u32,
    /// Ejected until this instant (auto_eject_hosts).
    pub ejected_until: Option<Instant>,
    /// No new connection is tried before this instant (reconnect backoff).
    pub retry_at: Option<Instant>,
    /// Current reconnect backoff (doubles per failure, jittered, capped).
    pub backoff: Duration,
    /// The last failure, what clients are told while the server rests
    /// (backs off, is ejected or waits for its health probe).
    pub last_fault: Option<ServerFault>,
    /// Retry time passed, waiting for a health probe to answer.
    pub probing: bool,
    /// Its last connection or exchange failed, and nothing has answered
    /// since (the `server_down` gauge, admin `servers` state `down`).
    pub down: bool,
    /// Failures not logged yet, and when the last was: a server that keeps
    /// failing is logged at most once per [`FAIL_LOG_EVERY`].
    pub fail_log: (u32, Option<Instant>),
    /// A server written by host name: the name, looked up again for a new
    /// connection (at most once per [`RESOLVE_EVERY`]), so a DNS change
    /// takes effect without a reload.
    pub lookup: Option<Box<Lookup>>,
}

/// A server that keeps failing is logged at most this often (per worker):
/// the first failure of a run at once, then a line with the count.
pub const FAIL_LOG_EVERY: Duration = Duration::from_secs(10);

/// How often a server's host name is looked up again, at most.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(1);

/// A server's host name and when it was last looked up.
#[derive(Debug)]
pub struct Lookup {
    /// Host as written.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Last lookup.
    pub at: Instant,
}

impl ServerRt {
    /// A live server with `server_connections` slots per protocol half.
    pub(super) fn new(
        endpoint: Option<Endpoint>,
        name: String,
        ring_name: String,
        weight: u32,
        server_connections: u32,
    ) -> ServerRt {
        ServerRt {
            endpoint,
            tls_host: String::new(),
            name,
            ring_name,
            weight,
            conns: vec![None; 2 * server_connections.max(1) as usize],
            failures: 0,
            ejected_until: None,
            retry_at: None,
            backoff: Duration::ZERO,
            last_fault: None,
            probing: false,
            down: false,
            fail_log: (0, None),
            lookup: None,
        }
    }

    /// Where it lives, for log lines: the address it was resolved to, or
    /// the socket path.
    pub fn address(&self) -> String {
        match &self.endpoint {
            Some(Endpoint::Tcp(a)) => a.to_string(),
            Some(Endpoint::Unix(p)) => p.display().to_string(),
            None => "unresolved".to_string(),
        }
    }

    /// Connections per protocol version (`server_connections`).
    pub fn per_protocol(&self) -> usize {
        (self.conns.len() / 2).max(1)
    }

    /// The connection slot a client uses: clients are spread over
    /// `server_connections` by id; a RESP3 client uses the RESP3 half.
    pub fn slot_for(&self, client_id: u64, resp3: bool) -> usize {
        let n = self.per_protocol();
        // One connection (the default) needs no 64-bit division per request.
        let i = if n == 1 {
            0
        } else {
            (client_id % n as u64) as usize
        };
        i + if resp3 { n } else { 0 }
    }

    /// [`PoolRt::look_up_again`] for this server of pool `pool`.
    pub(super) fn look_up_again(&mut self, pool: &str, now: Instant) {
        let Some(l) = self.lookup.as_mut() else {
            return;
        };
        if now.duration_since(l.at) < RESOLVE_EVERY && self.endpoint.is_some() {
            return;
        }
        l.at = now;
        match crate::net::resolve(&l.host, l.port) {
            Ok(a) => {
                let to = Some(Endpoint::Tcp(a));
                if self.endpoint != to {
                    crate::log_notice!(
                        "pool '{}': server '{}' now resolves to {}",
                        pool,
                        self.name,
                        a
                    );
                    self.endpoint = to;
                }
            }
            // The last address known stays in use.
            Err(e) => crate::log_warn!("pool '{}': server '{}': {}", pool, self.name, e),
        }
    }

    /// Whether `slot` is one of the RESP3 connections.
    pub fn slot_is_resp3(&self, slot: usize) -> bool {
        slot >= self.per_protocol()
    }

    /// The connection `token` in `slot` closed: the slot is free, unless
    /// it already holds a newer connection.
    pub fn forget_conn(&mut self, slot: usize, token: Token) {
        if self.conns[slot] == Some(token) {
            self.conns[slot] = None;
        }
    }
}

/// A server of `cfg` as the worker runs it (its address resolved once).
pub(super) fn server_rt(cfg: &PoolConfig, s: &crate::config::ServerConfig) -> ServerRt {
    let endpoint = match &s.addr {
        ServerAddr::Tcp { host, port } => match crate::net::resolve(host, *port) {
            Ok(a) => Some(Endpoint::Tcp(a)),
            Err(e) => {
                crate::log_error!("pool '{}': server '{}': {}", cfg.name, s.stats_name(), e);
                None
            }
        },
        ServerAddr::Unix { path } => Some(Endpoint::Unix(path.clone())),
    };
    let mut rt = ServerRt::new(
        endpoint,
        s.stats_name(),
        s.ketama_name(),
        s.weight,
        cfg.server_connections,
    );
    if let ServerAddr::Tcp { host, port } = &s.addr {
        rt.tls_host = host.clone();
        // Sentinels say where a sentinel pool's servers are.
        if host.parse::<std::net::IpAddr>().is_err() && !cfg.failover.on() {
            rt.lookup = Some(Box::new(Lookup {
                host: host.clone(),
                port: *port,
                at: Instant::now(),
            }));
        }
    }
    rt
}

#[cfg(test)]
mod tests {
    use super::ServerRt;

    #[test]
    fn resp3_clients_use_the_second_half() {
        let s = ServerRt::new(None, String::new(), String::new(), 1, 3);
        assert_eq!(s.per_protocol(), 3);
        assert_eq!(s.slot_for(7, false), 1);
        assert_eq!(s.slot_for(7, true), 4);
        assert!(!s.slot_is_resp3(2) && s.slot_is_resp3(3));
    }

    #[test]
    fn a_host_name_is_looked_up_again_for_a_new_connection() {
        let t0 = std::time::Instant::now();
        let stale: std::net::SocketAddr = "192.0.2.1:6379".parse().unwrap();
        let mut s = ServerRt::new(
            Some(super::Endpoint::Tcp(stale)),
            "cache".into(),
            "cache".into(),
            1,
            1,
        );
        s.lookup = Some(Box::new(super::Lookup {
            host: "localhost".into(),
            port: 6379,
            at: t0,
        }));
        // Within a second of the last lookup: the address known is used.
        s.look_up_again("p", t0);
        assert_eq!(s.endpoint, Some(super::Endpoint::Tcp(stale)));
        // Later: the name says where the server is now.
        s.look_up_again("p", t0 + super::RESOLVE_EVERY);
        match &s.endpoint {
            Some(super::Endpoint::Tcp(a)) => assert!(a.ip().is_loopback() && a.port() == 6379),
            other => panic!("{other:?}"),
        }
    }
}
