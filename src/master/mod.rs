//! The master process (nginx's model): it owns the listening sockets and
//! the counters region, forks the workers, watches them and restarts one
//! that dies, turns signals into commands for the workers, reloads the
//! configuration, execs a new binary, and serves the stats port. It does
//! no proxy work itself.

mod admin_host;
pub mod channel;
mod counters;
mod fleet;
pub mod listeners;
mod migration;
pub mod signals;
pub mod title;
mod upgrade;
mod worker_proc;
mod workers;

use crate::config::runtime::Param;
use crate::config::{Config, ListenerMode, Workers};
use crate::stats::carry::{Names, Totals};
use crate::stats::shm::{Layout, Region};
use crate::worker::{AcceptMutex, ListenerFd};
use channel::{Channel, Message};
use listeners::ListenerSet;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use upgrade::oldbin;

pub use worker_proc::EXIT_FATAL;

/// Settings of the master that do not come from the config file.
pub struct MasterOpts {
    /// Configuration file path (re-read on reload).
    pub conf_path: PathBuf,
    /// Stats port address (`-a`/`-s`).
    pub stats_addr: String,
    /// Admin port address (`--admin` / `_walnut: admin`), if enabled.
    pub admin_addr: Option<String>,
    /// Whether `admin_addr` is the default, which gives way to a free port
    /// when another process holds it.
    pub admin_fallback: bool,
    /// SO_REUSEPORT on the stats socket: set when a pool shares its port
    /// (`reuseport: true`), so the process it shares with (a nutcracker
    /// built from twemproxy's master sets it on its stats socket) does not
    /// keep walnut from starting with the same `-s`.
    pub stats_reuseport: bool,
    /// Pid file (`-p`).
    pub pid_file: Option<PathBuf>,
    /// The binary to exec on hot upgrade (argv[0] made absolute).
    pub exe: PathBuf,
    /// The original arguments.
    pub args: Vec<String>,
    /// The directory walnut was started from: a new binary (USR2) starts
    /// there, so relative paths in `args` mean what they meant.
    pub start_dir: PathBuf,
    /// Command-line overrides of the process settings.
    pub overrides: Box<dyn Fn(&Config) -> Config>,
    /// The fleet this instance belongs to (`--etcd`/`--fleet`): then
    /// `conf_path` is its last-good configuration, kept by the fleet agent.
    pub fleet: Option<crate::fleet::FleetOpts>,
}

struct WorkerProc {
    pid: libc::pid_t,
    channel: Channel,
    started: Instant,
    quick_deaths: u32,
    respawn_at: Option<Instant>,
    alive: bool,
    fatal: bool,
    respawns: u64,
}

struct Generation {
    id: u64,
    config: Config,
    /// Earlier configurations of its pools that migrate.
    lineage: crate::migrate::Lineage,
    /// Pool and server names (what its counters mean).
    names: Names,
    region: Box<Region>,
    mutex: Option<Box<AcceptMutex>>,
    listeners: Vec<Vec<ListenerFd>>,
    workers: Vec<WorkerProc>,
    draining: bool,
    /// Workers that reported they stopped reading requests (handover).
    stopped: usize,
    /// The placement switch away from this generation was logged.
    switched: bool,
    /// Workers that reported their event loop runs.
    ready: usize,
}

/// The master.
pub struct Master {
    opts: MasterOpts,
    socks: ListenerSet,
    current: Option<Generation>,
    old: Vec<Generation>,
    stats: Option<std::net::TcpListener>,
    /// Stats documents being written: socket, document, bytes written, since.
    stats_out: Vec<(std::net::TcpStream, Vec<u8>, usize, Instant)>,
    started: Instant,
    source: String,
    next_gen: u64,
    stopping: bool,
    /// Pid of the new binary started by USR2, while it runs.
    upgrade_child: Option<libc::pid_t>,
    admin: Option<crate::admin::AdminServer>,
    /// Parameters set at run time, with the value as given (for `config
    /// show`); a respawned worker is sent them again.
    runtime: Vec<(Param, String)>,
    /// The socket this master's workers take handed clients on, and its
    /// name.
    handin: OwnedFd,
    handin_name: String,
    /// What ended generations and binaries counted, in the current
    /// generation's names (see `counters.rs`).
    retired: Totals,
    /// The carry slot must be rewritten.
    carry_dirty: bool,
    /// The previous binary (after a hot upgrade), while it runs.
    prev: Option<counters::PrevBinary>,
    /// The new binary started by USR2 (see `upgrade.rs`).
    successor: Option<upgrade::Successor>,
    /// Told by the previous binary's master: report here once serving.
    ready_pipe: Option<OwnedFd>,
    /// Readiness was reported (or there was no one to report to).
    ready_reported: bool,
    /// The admin port's descriptors while it is out serving a command.
    admin_fds: Vec<RawFd>,
    /// Pools whose keys move after a reload (see `migration.rs`).
    migrations: Vec<migration::Migration>,
    /// Migrators to start (or replace) once no older generation, and no
    /// previous binary, routes requests by an older placement.
    pending_migrations: bool,
    /// Migrations a previous binary handed down (hot upgrade), for the
    /// first generation (`Lineage::export`).
    inherited_lineage: Vec<String>,
    /// Earlier configurations of the pools whose migration has not ended.
    lineage: crate::migrate::Lineage,
    /// The fleet agent and what this instance publishes (`fleet.rs`).
    fleet: fleet::FleetHost,
    /// A fleet member's page, shared with its agent and workers.
    fleet_page: Option<crate::fleet::page::FleetPage>,
}

/// A stats client that reads nothing of its document for this long is
/// closed.
const STATS_WRITE_LIMIT: Duration = Duration::from_secs(5);

fn nworkers(config: &Config) -> usize {
    match config.process.workers {
        Workers::Auto => std::thread::available_parallelism().map_or(1, |n| n.get()),
        Workers::N(n) => n.max(1),
    }
}

impl Master {
    /// Set up sockets and state; nothing is forked yet.
    pub fn new(opts: MasterOpts) -> std::io::Result<Master> {
        let mut socks = ListenerSet::inherit();
        let stats = match socks.take_stats() {
            Some(fd) => Some(std::net::TcpListener::from(fd)),
            None => Some(open_stats(&opts.stats_addr, opts.stats_reuseport)?),
        };
        let admin = admin_host::open(
            opts.admin_addr.as_deref(),
            opts.admin_fallback,
            socks.take_admin(),
        )?;
        let handin_name = crate::net::handover::name_for(std::process::id());
        let handin = crate::net::handover::listen(&handin_name).map_err(|e| {
            std::io::Error::new(e.kind(), format!("handover socket @{handin_name}: {e}"))
        })?;
        let prev = counters::PrevBinary::inherit();
        let fleet_page = match &opts.fleet {
            Some(f) => {
                let page = crate::fleet::page::FleetPage::new()?;
                page.set_hold_ms(f.hold_ms);
                Some(page)
            }
            None => None,
        };
        let ready_pipe = upgrade::inherit_ready_pipe();
        Ok(Master {
            opts,
            socks,
            current: None,
            old: Vec::new(),
            stats,
            stats_out: Vec::new(),
            started: Instant::now(),
            source: crate::stats::json::hostname(),
            next_gen: 1,
            stopping: false,
            upgrade_child: None,
            admin,
            runtime: Vec::new(),
            handin,
            handin_name,
            retired: Totals::zero(&Layout::new(Vec::new(), Vec::new())),
            carry_dirty: true,
            prev,
            successor: None,
            ready_pipe,
            ready_reported: false,
            admin_fds: Vec::new(),
            migrations: Vec::new(),
            pending_migrations: false,
            inherited_lineage: migration::inherit_lineage(),
            lineage: crate::migrate::Lineage::default(),
            fleet: fleet::FleetHost::default(),
            fleet_page,
        })
    }

    /// Start the first generation of workers and run until stopped.
    pub fn run(&mut self, config: Config) -> i32 {
        signals::block();
        signals::install();
        if let Err(e) = self.start_generation(config) {
            crate::log_error!("cannot start: {e}");
            return 1;
        }
        if let Some(stats) = &self.stats {
            crate::log_notice!(
                "stats listening on {}",
                stats
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default()
            );
        }
        if let Ok(text) = std::fs::read_to_string(&self.opts.conf_path) {
            self.fleet_applied(&text);
        }
        self.spawn_fleet_agent();
        self.write_pid_file();
        let code = self.main_loop();
        self.remove_pid_file();
        code
    }

    fn start_generation(&mut self, config: Config) -> std::io::Result<()> {
        let n = nworkers(&config);
        let listeners = self.socks.build(&config, n)?;
        let names = Names::of(&config);
        let region = Box::new(Region::new(names.layout(), n)?);
        let mutex = if config.process.listener == ListenerMode::AcceptMutex {
            Some(Box::new(AcceptMutex::new()?))
        } else {
            None
        };
        let id = self.next_gen;
        self.next_gen += 1;
        // Pools with `migration` keep their earlier configurations at hand
        // until their migration ends.
        let lineage = match self.current.as_ref() {
            Some(g) => self.lineage.after(&g.config, &config),
            None => self.inherit_migrations(&config),
        };
        let mut gen = Generation {
            id,
            config,
            lineage,
            names,
            region,
            mutex,
            listeners,
            workers: Vec::new(),
            draining: false,
            stopped: 0,
            switched: false,
            ready: 0,
        };
        for i in 0..n {
            let w = self.spawn(&gen, i)?;
            gen.workers.push(w);
        }
        crate::log_notice!(
            "generation {} started: {} workers, listener mode {}",
            id,
            n,
            gen.config.process.listener
        );
        self.retarget_retired(&gen.names);
        self.lineage = gen.lineage.clone();
        if let Some(old) = self.current.replace(gen) {
            // It serves on until every new worker runs (see `retire_due`).
            self.old.push(old);
        }
        self.refresh_carry();
        Ok(())
    }

    /// Once every worker of the current generation runs: older
    /// generations hand their clients over to it (through this master's
    /// handover socket, which only the new generation watches once the old
    /// one got the message) and exit; a new binary tells its predecessor
    /// it is ready. Until then the old generation serves on, so a new
    /// generation that cannot start strands no client.
    fn retire_due(&mut self) {
        let Some(cur) = &self.current else {
            return;
        };
        let running = cur.workers.iter().filter(|w| !w.fatal).count();
        if cur.ready < running || running == 0 {
            return;
        }
        let current = cur.id;
        if !self.ready_reported {
            self.ready_reported = true;
            upgrade::report_ready(self.ready_pipe.as_ref());
        }
        let m = Message::Handover(self.handin_name.clone());
        for old in self.old.iter_mut().filter(|g| !g.draining) {
            old.draining = true;
            for w in old.workers.iter_mut().filter(|w| w.alive) {
                let _ = w.channel.send(&m);
            }
            crate::log_notice!(
                "generation {} hands its clients over to generation {current}",
                old.id
            );
        }
    }

    fn main_loop(&mut self) -> i32 {
        loop {
            self.refresh_carry();
            self.watch_successor();
            self.serve_stats();
            let sigs = signals::take();
            for &s in signals::HANDLED {
                if signals::has(sigs, s) && s != libc::SIGCHLD && s != libc::SIGURG {
                    crate::log_notice!("master received {}", signals::name(s));
                }
            }
            if signals::has(sigs, libc::SIGCHLD) {
                self.reap();
            }
            self.fleet.woken = signals::has(sigs, libc::SIGURG);
            if signals::has(sigs, libc::SIGTERM) || signals::has(sigs, libc::SIGINT) {
                self.stop_all(Stopping::Fast);
                return 0;
            }
            if signals::has(sigs, libc::SIGQUIT) {
                match self.successor_handover() {
                    Some(to) => self.stop_all(Stopping::Handover(to)),
                    None => self.stop_all(Stopping::Graceful),
                }
                return 0;
            }
            if signals::has(sigs, libc::SIGHUP) {
                let _ = crate::log::reopen();
                self.broadcast(&Message::ReopenLogs);
                let _ = self.reload();
            }
            if signals::has(sigs, libc::SIGUSR1) {
                let _ = crate::log::reopen();
                self.broadcast(&Message::ReopenLogs);
            }
            if signals::has(sigs, libc::SIGUSR2) {
                self.upgrade();
            }
            if signals::has(sigs, libc::SIGWINCH) {
                self.stopping = true;
                self.broadcast(&Message::Graceful);
            }
            if signals::has(sigs, libc::SIGTTIN) {
                crate::log::level_up();
                crate::log_always!("log level up to {}", crate::log::level());
                self.broadcast(&Message::Set(Param::LogLevel(crate::log::level())));
            }
            if signals::has(sigs, libc::SIGTTOU) {
                crate::log::level_down();
                crate::log_always!("log level down to {}", crate::log::level());
                self.broadcast(&Message::Set(Param::LogLevel(crate::log::level())));
            }
            self.respawn_due();
            self.drain_acks();
            self.retire_due();
            self.migrations_due();
            self.fleet_due();
        }
    }

    /// Wait up to 100 ms for a stats or admin connection (or a signal),
    /// serve it.
    fn serve_stats(&mut self) {
        if self.successor.as_ref().is_some_and(|s| s.ready()) {
            // The new binary serves the stats and admin ports (and counts
            // this master's workers in): wait for signals only.
            signals::wait(&mut [], 100);
            return;
        }
        let mut pfds = self.admin.as_ref().map(|a| a.pollfds()).unwrap_or_default();
        if let Some(s) = &self.successor {
            // Wake as soon as the new binary says it is ready, so the two
            // masters never both answer the stats port for long.
            pfds.push(libc::pollfd {
                fd: s.pipe_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let Some(stats) = &self.stats {
            pfds.push(libc::pollfd {
                fd: stats.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // A fleet member's generation whose placement switch is awaited:
        // its workers' "stopped" ends the wait, so the member says
        // `prepared` (and its agent hears of it) without waiting for the
        // timeout. Outside a fleet the switch is still seen in the next
        // pass, as before.
        let fleet = self.opts.fleet.is_some();
        for gen in self
            .old
            .iter()
            .filter(|g| fleet && g.draining && !g.switched)
        {
            for w in gen.workers.iter().filter(|w| w.alive) {
                pfds.push(libc::pollfd {
                    fd: w.channel.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        for (sock, ..) in &self.stats_out {
            pfds.push(libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        if !signals::wait(&mut pfds, 100) {
            self.flush_stats();
            return;
        }
        self.watch_successor();
        if self.successor.as_ref().is_some_and(|s| s.ready()) {
            return;
        }
        // Sums as of now: what draining generations and the previous
        // binary counted up to this moment is in the carry.
        self.refresh_carry();
        self.serve_admin();
        let Some(stats) = &self.stats else {
            return;
        };
        let mut accepted = Vec::new();
        while let Ok((sock, _)) = stats.accept() {
            accepted.push(sock);
        }
        for sock in accepted {
            if self.current.is_none() {
                break;
            }
            // Written without blocking: what the socket does not take now
            // is sent as it drains (`flush_stats`), so a stats client that
            // does not read never holds up the master.
            let _ = sock.set_nonblocking(true);
            let doc = self.stats_json().into_bytes();
            self.stats_out.push((sock, doc, 0, Instant::now()));
        }
        self.flush_stats();
    }

    /// Write what stats clients are owed; close each when done, or after
    /// [`STATS_WRITE_LIMIT`] of not reading.
    fn flush_stats(&mut self) {
        let now = Instant::now();
        self.stats_out.retain_mut(|(sock, doc, off, since)| {
            while *off < doc.len() {
                match sock.write(&doc[*off..]) {
                    Ok(0) => return false,
                    Ok(n) => *off += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        return now.duration_since(*since) < STATS_WRITE_LIMIT;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            false
        });
    }

    fn broadcast(&mut self, m: &Message) {
        for gen in self.current.iter_mut() {
            for w in gen.workers.iter_mut().filter(|w| w.alive) {
                let _ = w.channel.send(m);
            }
        }
    }

    fn drain_acks(&mut self) {
        let current = self.current.as_ref().map_or(0, |g| g.id);
        for gen in self.current.iter_mut().chain(self.old.iter_mut()) {
            let before = gen.stopped;
            for w in gen.workers.iter_mut().filter(|w| w.alive) {
                if let Ok(msgs) = w.channel.recv() {
                    for m in msgs {
                        match m {
                            Message::Ack(e) if !e.is_empty() => {
                                crate::log_warn!("worker pid {}: {}", w.pid, e);
                            }
                            Message::Stopped => gen.stopped += 1,
                            Message::Ready => gen.ready += 1,
                            _ => {}
                        }
                    }
                }
            }
            let dead = gen.workers.iter().filter(|w| !w.alive).count();
            if gen.stopped > before && gen.stopped + dead >= gen.workers.len() {
                log_switch(gen, current);
            }
        }
    }

    /// Reload the configuration file (HUP, admin `reload`): what changed
    /// is logged and returned; an invalid file or a start-up failure is
    /// logged and returned as the error, and the running configuration
    /// stays.
    fn reload(&mut self) -> Result<Vec<String>, String> {
        if self.successor.is_some() {
            let e = "reload refused: a hot upgrade is in progress (send HUP to the new master, or QUIT to this one first)".to_string();
            crate::log_error!("{e}");
            return Err(e);
        }
        // Read once: a fleet's file names the revision it holds.
        let text = std::fs::read_to_string(&self.opts.conf_path).unwrap_or_default();
        let config = match Config::load(&self.opts.conf_path) {
            Ok(_) if self.opts.fleet.is_some() => {
                match Config::from_file_text(&text, &self.opts.conf_path) {
                    Ok(c) => (self.opts.overrides)(&c),
                    Err(errs) => {
                        return Err(errs
                            .iter()
                            .map(|e| e.to_string())
                            .collect::<Vec<_>>()
                            .join("; "))
                    }
                }
            }
            Ok(c) => (self.opts.overrides)(&c),
            Err(errs) => {
                let mut lines: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
                lines.push(format!(
                    "configuration file '{}' is invalid, keeping the running configuration",
                    self.opts.conf_path.display()
                ));
                for l in &lines {
                    crate::log_error!("reload: {l}");
                }
                return Err(lines.join("; "));
            }
        };
        // Unchanged: nothing to do, unless SIGWINCH stopped the workers
        // (then HUP starts them again, as in nginx).
        if !self.stopping && self.current.as_ref().map(|g| &g.config) == Some(&config) {
            crate::log_notice!("reload: configuration unchanged");
            self.fleet_applied(&text);
            return Ok(Vec::new());
        }
        let changes = self
            .current
            .as_ref()
            .map(|g| crate::config::diff::changes(&g.config, &config))
            .unwrap_or_default();
        let was_stopping = self.stopping;
        self.stopping = false;
        let before = self.current.as_ref().map(|g| g.config.clone());
        if let Err(e) = self.start_generation(config) {
            self.stopping = was_stopping;
            let e = format!("reload failed, keeping the running configuration: {e}");
            crate::log_error!("{e}");
            return Err(e);
        }
        self.runtime.clear();
        self.fleet_applied(&text);
        for c in &changes {
            crate::log_notice!("reload: {c}");
        }
        if before.is_some() {
            // The migrators start at the placement switch (see
            // `migrations_due`): before it, the old generation still reads
            // and writes keys where the old placement puts them. The
            // admin reports them, pending, from here on.
            self.pending_migrations = true;
            self.plan_migrations();
        }
        Ok(changes)
    }

    fn stop_all(&mut self, how: Stopping) {
        self.stopping = true;
        self.stop_migrations();
        self.stop_fleet_agent();
        let graceful = !matches!(how, Stopping::Fast);
        let m = match &how {
            Stopping::Fast => Message::Stop,
            Stopping::Graceful => Message::Graceful,
            Stopping::Handover(to) => {
                crate::log_notice!("handing every client over to the new binary ({to})");
                Message::Handover(to.clone())
            }
        };
        let handover = matches!(how, Stopping::Handover(_));
        let mut pids = Vec::new();
        for gen in self.current.iter_mut().chain(self.old.iter_mut()) {
            let gid = gen.id;
            for (slot, w) in gen.workers.iter_mut().enumerate().filter(|(_, w)| w.alive) {
                let _ = w.channel.send(&m);
                if !graceful {
                    // SAFETY: signalling our own child.
                    unsafe {
                        libc::kill(w.pid, libc::SIGTERM);
                    }
                }
                pids.push((w.pid, gid, slot));
            }
        }
        // Close the listening sockets so no new connection queues here.
        self.socks = ListenerSet::default();
        self.stats = None;
        self.admin = None;
        let limit = if graceful {
            self.current
                .as_ref()
                .map_or(30_000, |g| g.config.process.graceful_timeout_ms)
        } else {
            5_000
        };
        let deadline = Instant::now() + Duration::from_millis(limit + 1000);
        for (pid, gid, slot) in pids {
            let mut told = false;
            loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid status pointer.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r != 0 {
                    break;
                }
                if Instant::now() > deadline && handover && self.worker_beating(gid, slot) {
                    // Past graceful_timeout, a worker of a binary being
                    // replaced still runs its loop: it relays TLS clients,
                    // or serves subscribers that have not left subscribed
                    // mode yet, so it is not killed.
                    if !told {
                        crate::log_notice!(
                            "worker {pid} still relays TLS clients or serves subscribers for the new binary; waiting for them"
                        );
                        told = true;
                    }
                } else if Instant::now() > deadline {
                    // SAFETY: signalling our own child.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, &mut status, 0);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Everything counted is final now: leave it in the region a new
        // binary may still read.
        for g in std::mem::take(&mut self.old) {
            self.fold_generation(&g.region, &g.names);
        }
        self.refresh_carry();
        crate::log_notice!("exiting");
    }

    /// Whether worker `slot` of generation `gid` ran its event loop in
    /// the last 3 seconds (it wakes at least once a second).
    fn worker_beating(&self, gid: u64, slot: usize) -> bool {
        let Some(g) = self
            .current
            .iter()
            .chain(self.old.iter())
            .find(|g| g.id == gid)
        else {
            return false;
        };
        let beat = g
            .region
            .worker_get(slot, crate::stats::WorkerField::Heartbeat);
        crate::util::epoch_us().saturating_sub(beat) < 3_000_000
    }

    fn write_pid_file(&self) {
        if let Some(p) = &self.opts.pid_file {
            if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
                crate::log_error!("cannot write pid file '{}': {e}", p.display());
            }
        }
    }

    /// Remove the pid file (or, after a hot upgrade, the `.oldbin` one)
    /// if it still names this process.
    fn remove_pid_file(&self) {
        if let Some(p) = &self.opts.pid_file {
            for f in [p.clone(), oldbin(p)] {
                if let Ok(s) = std::fs::read_to_string(&f) {
                    if s.trim() == std::process::id().to_string() {
                        let _ = std::fs::remove_file(&f);
                    }
                }
            }
        }
    }
}

/// The placement switch (once per generation): from here on no request is
/// routed by `gen`'s configuration.
fn log_switch(gen: &mut Generation, current: u64) {
    if gen.switched || !gen.draining {
        return;
    }
    gen.switched = true;
    crate::log_notice!(
        "placement switch: generation {} routes no new request; every request read from now on is routed by generation {current}",
        gen.id
    );
}

/// How the master stops its workers.
enum Stopping {
    /// TERM/INT: at once.
    Fast,
    /// QUIT: finish what is in flight, close clients as they go quiet.
    Graceful,
    /// QUIT after a hot upgrade: hand every client to the new binary.
    Handover(String),
}

fn open_stats(addr: &str, reuseport: bool) -> std::io::Result<std::net::TcpListener> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad stats address")
    })?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad stats port"))?;
    let sa = crate::net::resolve(host, port)?;
    let fd: OwnedFd = crate::net::listen_tcp(sa, 128, reuseport)
        .map_err(|e| std::io::Error::new(e.kind(), format!("stats listen on {addr}: {e}")))?;
    let l = std::net::TcpListener::from(fd);
    l.set_nonblocking(true)?;
    Ok(l)
}
