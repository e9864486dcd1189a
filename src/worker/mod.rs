//! The worker: one thread, one epoll loop (mio, edge-triggered), client and
//! server connections, routing. No locks: the only shared state is this
//! worker's own slot of the counters region.
//!
//! One loop iteration: wait for events (bounded by the nearest timer) →
//! accept / read / write for each ready socket → fire expired timers →
//! write every server and client that got output in this iteration, so the
//! requests parsed in one iteration leave in one write per server.

mod accept;
mod blocking;
mod budget;
mod buffer;
mod client;
mod client_conn;
mod closes;
mod closing;
mod cluster;
mod cluster_map;
mod cluster_stream;
mod conn;
mod conn_state;
mod deadlines;
mod dedicated;
mod dial;
mod dirty;
mod event_loop;
mod fault;
mod fleet_hold;
mod forward;
mod gate;
mod handin;
mod handle;
mod handover;
mod heap;
mod key_groups;
mod keyspace;
mod latency;
mod listen;
mod local;
mod migrate;
mod migration_rt;
mod params;
mod pool;
mod preconnect;
mod pubsub;
mod pull;
mod queue;
mod read_batch;
mod relay;
mod rep_stream;
mod replies;
mod reply_hold;
mod req_stream;
mod routes;
mod send_plan;
mod sentinel;
mod server;
mod server_conn;
mod server_health;
mod server_reply;
mod server_rt;
mod shadow;
mod split_send;
mod spool;
mod start_pools;
mod stream;
mod stream_reply;
mod subscriber;
mod sweep;
mod timers;
mod tokens;
mod transaction;
mod txn;
mod upkeep;
mod warm;
mod zones;

pub use accept::AcceptMutex;
pub use fault::{Ending, IoFault, ServerFault};
pub use handover::Handed;
pub use pool::PoolRt;
pub use reply_hold::bound as reply_hold_bound;

use crate::stats::shm::Region;
use conn::Open;
use std::os::fd::RawFd;

use crate::config::Config;
use crate::net::Listener;
use crate::stats::shm::StatsSlot;
use conn::{Conn, ConnTable};
use mio::{Poll, Token};
use server_conn::Writable;
use slab::Slab;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// Most bytes read from one connection per event before what arrived is
/// processed.
const READ_BUDGET: usize = 256 * 1024;
/// Bytes read per `read(2)`.
const READ_CHUNK: usize = 16 * 1024;
/// A Redis bulk argument or bulk reply at least this large is streamed:
/// forwarded in pieces as it arrives instead of being buffered whole.
pub(crate) const STREAM_THRESHOLD: usize = 1024 * 1024;
/// A streaming side stops reading once the other side has this many bytes
/// queued...
const STREAM_HIGH: usize = 1024 * 1024;
/// ...and reads again once they drain below this.
const STREAM_LOW: usize = 256 * 1024;
/// A client that reads nothing of a streamed reply for this long is closed.
const STREAM_STALL: Duration = Duration::from_secs(10);
/// A reply or request at least this long, with nothing queued before it on
/// the connection it goes to, is written to that socket at once from the
/// buffer it was read into, rather than copied into the connection's
/// output and written at the end of the pass: above this size the copy
/// costs more than the system call it would have shared with the other
/// messages of the pass.
const WRITE_THROUGH_MIN: usize = 8 * 1024;

/// A listening socket handed to a worker, with the pool it serves.
#[derive(Debug)]
pub struct ListenerFd {
    /// Pool index.
    pub pool: usize,
    /// Listening socket (non-blocking).
    pub fd: OwnedFd,
    /// TCP (else unix).
    pub tcp: bool,
}

/// Why the loop should stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Keep running.
    Run,
    /// Stop now.
    Fast,
    /// Stop accepting, finish requests in flight, then exit.
    Graceful,
    /// Stop accepting, hand every client to the successor named in
    /// [`WorkerCtl::handover_to`] at a request boundary, then exit.
    Handover,
}

/// Hooks the loop calls between iterations (signals, master channel).
pub trait Control {
    /// Called once per iteration; `readable` says the control descriptor
    /// (if any) has input. Returns what the loop should do.
    fn check(&mut self, worker: &mut WorkerCtl, readable: bool) -> Stop;
    /// A descriptor the loop should watch for the controller (the channel).
    fn fd(&self) -> Option<RawFd> {
        None
    }
    /// The worker stopped reading requests to hand its clients over: from
    /// now on it routes only what it had already read.
    fn stopped_routing(&mut self) {}
}

/// Everything a worker needs besides the configuration.
pub struct WorkerSetup<'a> {
    /// Listening sockets this worker serves.
    pub listeners: Vec<ListenerFd>,
    /// The counters region and this worker's slot in it.
    pub region: &'a Region,
    /// This worker's slot in the counters region (its index there).
    pub slot: usize,
    /// The accept mutex (accept_mutex mode).
    pub mutex: Option<&'a AcceptMutex>,
    /// The socket predecessors hand clients over on (see `handover.rs`).
    pub handin: Option<OwnedFd>,
    /// Earlier configurations of the pools that migrate (see `migrate.rs`).
    pub lineage: &'a crate::migrate::Lineage,
    /// A fleet member's page, and whether its migrating pools start
    /// fenced (see `migrate.rs`, `fleet/page.rs`).
    pub fleet: Option<(crate::fleet::page::FleetPage, bool)>,
}

/// Runtime knobs a controller can change without restarting the loop.
#[derive(Debug, Default)]
pub struct WorkerCtl {
    /// Set TCP_QUICKACK after reads.
    pub quickack: bool,
    /// Close clients idle longer than this.
    pub client_idle: Option<Duration>,
    /// Record reply latencies in the histograms.
    pub latency: bool,
    /// Slow-log threshold in µs (0: off).
    pub slowlog_us: u64,
    /// Pool names, in config order (for per-pool parameters).
    pub pool_names: Vec<String>,
    /// Per-pool server timeouts to apply (pool index, ms; 0 = none).
    pub pool_timeouts: Vec<(usize, u64)>,
    /// Run-time override of every pool's `client_output_limit`.
    pub client_output_limit: Option<usize>,
    /// Run-time override of every pool's `client_max_inflight`.
    pub client_max_inflight: Option<usize>,
    /// Where to hand clients over to ([`Stop::Handover`]).
    pub handover_to: Option<String>,
    /// Pools whose migration ended: keys are no longer pulled.
    pub migration_done: Vec<usize>,
    /// Pools whose fleet barrier passed (`Param::FleetGo`).
    pub fleet_go: Vec<usize>,
    /// `_walnut: reply_hold` or its run-time value (None: off), see
    /// `reply_hold.rs`.
    pub reply_hold: Option<Duration>,
}

impl WorkerCtl {
    /// The output limit of a client of `pool`: `client_output_limit`,
    /// the run-time override first (0: none).
    #[inline]
    fn output_limit(&self, pool: &pool::PoolRt) -> usize {
        self.client_output_limit
            .unwrap_or(pool.cfg.client_output_limit)
    }

    /// The most requests a client of `pool` has in flight before it is
    /// not read: `client_max_inflight`, the run-time override first.
    #[inline]
    fn max_inflight(&self, pool: &pool::PoolRt) -> usize {
        self.client_max_inflight
            .unwrap_or(pool.cfg.client_max_inflight)
    }
}

/// Whether a client keeping `bytes` of replies (written out or held) is
/// over its output `limit` (0: none).
#[inline]
pub(crate) fn over_output_limit(limit: usize, bytes: usize) -> bool {
    limit > 0 && bytes > limit
}

/// A worker's data path.
pub struct Worker<'a> {
    poll: Poll,
    conns: Slab<Conn>,
    pools: Vec<PoolRt>,
    /// Listening sockets, accept policy, `max_connections` (listen.rs).
    intake: listen::Intake<'a>,
    stats: StatsSlot<'a>,
    region: &'a Region,
    slot: usize,
    timers: timers::Timers,
    /// Connections to write at the end of the pass, and server
    /// connections with requests not yet in the shared counters
    /// (`count_queued` in server.rs).
    dirty: dirty::Dirty,
    /// Connections paused by a stream's backpressure that may read again.
    resume: Vec<Token>,
    /// Connection ids, never given twice (`handle.rs`).
    ids: handle::ConnIds,
    bufs: conn::BufPool,
    ctl: WorkerCtl,
    /// Bytes of replies buffered for all clients, against `buffer_budget`.
    out: budget::OutputBudget,
    graceful_timeout: Duration,
    /// The request being dispatched ends what its client sent so far: a
    /// large one may then be written to its server at once, as no request
    /// of this client follows to share the write (see `Worker::forward`).
    /// False outside a dispatch from the client's input.
    ends_input: bool,
    /// Latencies, the slow log and the hot-key sample (`latency.rs`).
    recorder: latency::Recorder,
    /// When to give freed memory back after many clients left.
    trim: heap::HeapTrim,
    /// A fleet member's page: whether `migration: true` pools may be
    /// routed (`fleet/page.rs`).
    fleet: Option<crate::fleet::page::FleetPage>,
    /// Requests held until the fleet lets them through (`fleet_hold.rs`).
    fleet_holds: fleet_hold::FleetHolds,
    /// Clients handed to this worker by a predecessor (handin.rs).
    handin: handin::HandIn,
    /// TLS clients handed over, relayed to the successor (relay.rs).
    relays: relay::Relays,
    /// Pools following Redis Sentinel (sentinel.rs).
    sentinels: Vec<sentinel::Watch>,
    /// Until the sentinels have said where the masters are (or a while
    /// passes), no client is taken (`gate.rs`).
    gate: gate::Gate,
    /// Which requests a sampled shadow copies (shadow.rs).
    shadows: shadow::Shadows,
    /// Keys being copied from a warm pool to a cold one (warm.rs).
    warms: warm::Warms,
    /// The handover under way, if any (`handover.rs`).
    handover: handover::Handover,
    /// Clients whose output is held, with when the hold ends, oldest
    /// first (the bound is the same for all).
    hold_deadlines: deadlines::Deadlines<Token>,
    /// Server connections whose replies wait under a receive low-water
    /// mark: when they are read anyway, and the connection's id
    /// (`read_batch.rs`).
    read_deadlines: deadlines::Deadlines<(Token, u64)>,
}

/// While the gate is shut, how often it is looked at.
const GATE_POLL: Duration = Duration::from_millis(10);

/// While handing clients over, how soon a full handover queue is tried
/// again.
const HANDOVER_RETRY: Duration = Duration::from_millis(5);

/// During a graceful stop a client is closed once it has nothing in flight
/// and has sent nothing for this long: clients busy on a connection keep it
/// (closing under them would fail the request they are about to send).
const GRACEFUL_IDLE: Duration = Duration::from_millis(100);

impl<'a> Worker<'a> {
    /// Build a worker for `config`, serving the given listeners.
    pub fn new(config: &Config, setup: WorkerSetup<'a>) -> std::io::Result<Worker<'a>> {
        let poll = Poll::new()?;
        let fenced = setup.fleet.is_some_and(|(_, fenced)| fenced);
        let pools = start_pools::start_pools(config, setup.lineage, fenced);
        let ls = setup
            .listeners
            .into_iter()
            .map(|l| (Listener::from_fd(l.fd, l.tcp), l.pool))
            .collect();
        let sentinels = sentinel::watches(&pools);
        let recorder = latency::Recorder::new(&pools, true, config.process.slowlog_threshold_us);
        let mut w = Worker {
            poll,
            conns: Slab::with_capacity(1024),
            pools,
            intake: listen::Intake::new(
                ls,
                config.process.listener,
                setup.mutex,
                config.process.accept_mutex_delay_ms,
                config.process.max_connections,
            ),
            stats: setup.region.slot(setup.slot),
            region: setup.region,
            slot: setup.slot,
            timers: timers::Timers::default(),
            dirty: dirty::Dirty::default(),
            resume: Vec::new(),
            ids: handle::ConnIds::default(),
            bufs: conn::BufPool::default(),
            ctl: WorkerCtl {
                quickack: config.process.tcp_quickack,
                latency: true,
                slowlog_us: config.process.slowlog_threshold_us,
                pool_names: config.pools.iter().map(|p| p.name.clone()).collect(),
                reply_hold: reply_hold::bound(config.process.reply_hold_us),
                ..WorkerCtl::default()
            },
            out: budget::OutputBudget::new(config.process.buffer_budget),
            graceful_timeout: Duration::from_millis(config.process.graceful_timeout_ms),
            ends_input: false,
            recorder,
            trim: heap::HeapTrim::default(),
            fleet: setup.fleet.map(|(page, _)| page),
            handin: handin::HandIn::new(setup.handin),
            relays: relay::Relays::default(),
            gate: gate::Gate::new(!sentinels.is_empty(), Instant::now()),
            sentinels,
            shadows: shadow::Shadows::default(),
            warms: warm::Warms::default(),
            handover: handover::Handover::default(),
            hold_deadlines: deadlines::Deadlines::new(),
            read_deadlines: deadlines::Deadlines::new(),
            fleet_holds: fleet_hold::FleetHolds::default(),
        };
        let now = Instant::now();
        for (pool, server, slot) in preconnect::preconnects(&w.pools) {
            let _ = w.server_conn(pool, server, slot, now, Open::Shared);
        }
        let due = cluster::upkeep_due(&mut w.pools, &w.conns, Instant::now());
        w.upkeep(due, Instant::now());
        sentinel::maintain(
            &mut w.sentinels,
            &w.pools,
            w.poll.registry(),
            Instant::now(),
        );
        if !w.gate.is_shut() {
            // Take clients at once: handed over and accepted.
            w.handin.start(w.poll.registry())?;
            w.intake.start(w.poll.registry())?;
        }
        Ok(w)
    }

    /// Replies were buffered for a client: account them against the
    /// worker's `buffer_budget`; over it, the clients holding the most
    /// unwritten replies are disconnected, as `OutputBudget::evictions`
    /// names them (`budget.rs`).
    #[inline]
    pub(super) fn add_out(&mut self, n: usize) {
        if self.out.add(n, &self.stats) {
            let evict = self.out.evictions(&self.conns, &self.stats);
            self.close_all(evict);
        }
    }

    fn on_event(&mut self, token: Token, readable: bool, hup: bool, writable: bool, now: Instant) {
        match self.conns.get(token.0) {
            Some(Conn::Client(_)) => {
                if writable {
                    self.write_client(token);
                }
                if readable {
                    self.read_client(token, now, hup);
                }
            }
            Some(Conn::Server(_)) => {
                if writable {
                    match self.conns.server_mut(token.0).map(|s| s.writable()) {
                        Some(Writable::Failed(fault)) => {
                            self.close_all(Some(closes::Close::Server {
                                token,
                                fault,
                                at: now,
                            }))
                        }
                        Some(w) => {
                            if let Writable::Connected { pool, server } = w {
                                crate::log_debug!(
                                    "pool '{}': connected to server '{}'",
                                    self.pools[pool].cfg.name,
                                    self.pools[pool].servers[server].name
                                );
                            }
                            self.write_server(token, now);
                        }
                        None => {}
                    }
                }
                if readable {
                    self.read_server(token, now, hup);
                }
            }
            None => {}
        }
    }
}
