//! A new connection to a server, as its pool decides it
//! (`PoolRt::dial`, a `Dial`): refused while the server rests, its
//! address looked up again, what it sends before any client request, and
//! whether its slot keeps it; and what the pool records once it is
//! opened or could not be (`PoolRt::opened`, `PoolRt::connect_failed`).
//! `Worker::server_conn` connects it and enters it in the table.

use super::conn::Open;
use super::fault::ServerFault;
use super::pool::PoolRt;
use crate::net::Endpoint;
use crate::proto::Op;
use crate::stats::shm::StatsSlot;
use crate::stats::ServerField;
use mio::Token;
use std::time::Instant;

/// How a new connection to a server is opened, as its pool decided
/// (`PoolRt::dial`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Dial {
    /// Where the server is.
    pub endpoint: Endpoint,
    /// `tcpkeepalive:` on the socket.
    pub keepalive: bool,
    /// Its slot keeps it for the requests after (not a dedicated one).
    pub keep: bool,
    /// What it sends before any client request (`PoolRt::handshake`).
    pub handshake: Vec<(Op, Vec<u8>)>,
}

impl PoolRt {
    /// A new connection to `server` in `slot`, for what `open` says: why
    /// it must not be tried now (the server rests after failures, or is
    /// probed and this is not the probe; `refuse_connect`) or its address
    /// is not known, else how it is opened. A server written by host
    /// name is looked up again first (`look_up_again`).
    pub(super) fn dial(
        &mut self,
        server: usize,
        slot: usize,
        now: Instant,
        open: Open,
    ) -> Result<Dial, ServerFault> {
        if let Some(fault) = self.refuse_connect(server, now, open == Open::Probe) {
            return Err(fault);
        }
        self.look_up_again(server, now);
        let Some(endpoint) = self.servers[server].endpoint.clone() else {
            return Err(ServerFault::Unresolved);
        };
        Ok(Dial {
            endpoint,
            keepalive: self.cfg.tcpkeepalive,
            keep: open != Open::Dedicated,
            handshake: self.handshake(server, slot),
        })
    }

    /// A new connection to `server` (this is pool `at` in the stats) is
    /// open at `token`: its slot keeps it if `keep`, and it is counted.
    pub(super) fn opened(
        &mut self,
        at: usize,
        (server, slot): (usize, usize),
        token: Token,
        keep: bool,
        stats: &StatsSlot<'_>,
    ) {
        if keep {
            self.servers[server].conns[slot] = Some(token);
        }
        stats.server_add(at, server, ServerField::ServerConnections, 1);
    }

    /// A new connection to `server` (pool `at` in the stats) could not be
    /// made (`fault`): an error of the server's, counted, and a failure
    /// towards its backoff and ejection (`note_failure`).
    pub(super) fn connect_failed(
        &mut self,
        at: usize,
        server: usize,
        now: Instant,
        fault: &ServerFault,
        stats: &StatsSlot<'_>,
    ) {
        stats.server_add(at, server, ServerField::ServerErr, 1);
        self.note_failure(at, server, now, fault, stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::carry::Names;
    use crate::stats::shm::Region;
    use crate::worker::pool::tests::pool;
    use std::time::Duration;

    const REDIS: &str = "r:\n  listen: 127.0.0.1:22970\n  redis: true\n  redis_auth: pw\n  server_connections: 2\n  servers:\n   - 127.0.0.1:6379:1\n";

    fn region() -> Region {
        let names = Names {
            pools: vec!["r".into()],
            servers: vec![vec!["a".into()]],
            routes: vec![Vec::new()],
        };
        Region::new(names.layout(), 1).expect("stats region")
    }

    #[test]
    fn a_shared_connection_is_kept_by_its_slot_and_sends_its_handshake_first() {
        let mut p = pool(REDIS);
        let now = Instant::now();
        let d = p.dial(0, 0, now, Open::Shared).expect("dialled");
        assert_eq!(
            d.endpoint,
            p.servers[0].endpoint.clone().expect("an address")
        );
        assert!(d.keep);
        assert!(!d.keepalive);
        assert_eq!(d.handshake, p.handshake(0, 0), "AUTH");
        assert!(!d.handshake.is_empty());
        let dedicated = p.dial(0, 0, now, Open::Dedicated).expect("dialled");
        assert!(!dedicated.keep, "a dedicated one is nobody's slot's");
        let mc = pool("m:\n  listen: 127.0.0.1:22971\n  servers:\n   - 127.0.0.1:11211:1\n");
        let mut mc = mc;
        assert!(mc
            .dial(0, 0, now, Open::Probe)
            .expect("dialled")
            .handshake
            .is_empty());
    }

    #[test]
    fn a_resting_server_is_dialled_by_nobody_and_a_probed_one_by_its_probe_alone() {
        let mut p = pool(REDIS);
        let now = Instant::now();
        p.servers[0].retry_at = Some(now + Duration::from_secs(5));
        for open in [Open::Shared, Open::Dedicated, Open::Probe] {
            assert!(matches!(
                p.dial(0, 0, now, open),
                Err(ServerFault::Resting(_))
            ));
        }
        p.servers[0].retry_at = None;
        p.servers[0].probing = true;
        assert!(matches!(
            p.dial(0, 0, now, Open::Shared),
            Err(ServerFault::Resting(_))
        ));
        assert!(p.dial(0, 0, now, Open::Probe).is_ok());
    }

    #[test]
    fn a_server_with_no_address_is_unresolved() {
        let mut p = pool(REDIS);
        p.servers[0].endpoint = None;
        assert!(matches!(
            p.dial(0, 0, Instant::now(), Open::Shared),
            Err(ServerFault::Unresolved)
        ));
    }

    #[test]
    fn an_opened_connection_is_counted_and_kept_only_when_its_slot_keeps_it() {
        let mut p = pool(REDIS);
        let region = region();
        let stats = region.slot(0);
        p.opened(0, (0, 1), Token(7), false, &stats);
        assert_eq!(p.servers[0].conns[1], None);
        p.opened(0, (0, 1), Token(8), true, &stats);
        assert_eq!(p.servers[0].conns[1], Some(Token(8)));
        let sum = |f| region.server_sum(0, 0, f);
        assert_eq!(sum(ServerField::ServerConnections), 2);
    }

    #[test]
    fn a_failed_connect_is_the_servers_error_and_backs_it_off() {
        let mut p = pool(REDIS);
        let region = region();
        let stats = region.slot(0);
        let now = Instant::now();
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let fault = ServerFault::Connect(super::super::fault::IoFault::from(&refused));
        p.connect_failed(0, 0, now, &fault, &stats);
        assert_eq!(region.server_sum(0, 0, ServerField::ServerErr), 1);
        assert_eq!(region.server_sum(0, 0, ServerField::ServerDown), 1);
        assert!(p.refuse_connect(0, now, false).is_some(), "backing off");
    }
}
