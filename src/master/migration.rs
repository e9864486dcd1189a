//! The master's side of online scale-out: after a reload that changed a
//! migrating pool's placement, a migrator process per pool (`src/migrate/`)
//! moves the keys; the master restarts one that dies, relays the operator's
//! pause / resume / abort, and when one is done tells the workers to stop
//! pulling keys on demand (`pool.NAME.migration done`).

use super::channel::Message;
use super::Master;
use crate::config::runtime::Param;
use crate::config::{Config, PoolConfig};
use crate::migrate::{Lineage, Progress, State};
use std::time::{Duration, Instant};

/// Exit code of a migrator the operator aborted (not restarted).
const EXIT_ABORTED: i32 = 3;

/// Environment variables (`..0`, `..1`, ...) carrying migrations across a
/// hot upgrade.
const LINEAGE_ENV: &str = "WALNUT_LINEAGE_";

/// What a previous binary handed down in [`LINEAGE_ENV`] (removed from the
/// environment, so it is not passed on again).
pub(super) fn inherit_lineage() -> Vec<String> {
    let mut out = Vec::new();
    for k in 0.. {
        let key = format!("{LINEAGE_ENV}{k}");
        let Ok(v) = std::env::var(&key) else { break };
        std::env::remove_var(&key);
        out.push(v);
    }
    out
}

/// The /metrics families with one sample per migrating pool: name, type,
/// help, value.
type PerPool = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Progress) -> u64,
);
const PER_POOL: &[PerPool] = &[
    (
        "walnut_migration_bytes_total",
        "counter",
        "Bytes of values moved by a migration.",
        |p| p.counts()[4],
    ),
    (
        "walnut_migration_state",
        "gauge",
        "State of a migration: 0 pending, 1 running, 2 paused, 3 done, 4 aborted.",
        |p| p.state() as u64,
    ),
    (
        "walnut_migration_keys_per_second",
        "gauge",
        "Keys a migration moved a second, on average since it began.",
        |p| p.rate(),
    ),
    (
        "walnut_migration_pace_keys_per_second",
        "gauge",
        "The keys a second a migrator allows itself now (its pace, below migration_rate).",
        |p| p.pace().0,
    ),
    (
        "walnut_migration_clients",
        "gauge",
        "1 while a migrator counts its pool as having clients (it then backs off at a smaller rise of the servers' no-op time), else 0.",
        |p| u64::from(p.pace().1),
    ),
    (
        "walnut_migration_eta_seconds",
        "gauge",
        "Seconds a migration is estimated to need yet, from the keys there were to walk and its pace so far (0 once ended).",
        |p| p.eta(),
    ),
];

/// One pool's migration.
pub(super) struct Migration {
    pub(super) pool: String,
    /// The pool's earlier configurations, newest first.
    olds: Vec<PoolConfig>,
    new: PoolConfig,
    /// The servers its migrator walks (`Plan::source_names`), whose
    /// progress follows the pool's in `progress`.
    sources: Vec<String>,
    pid: Option<libc::pid_t>,
    /// Whether its migrator was started (at the placement switch).
    started: bool,
    pub(super) progress: Progress,
    restart_at: Option<Instant>,
    restarts: u32,
    /// The generation whose counters were read last for the pool's client
    /// requests, and what they said.
    clients_seen: Option<(u64, u64)>,
}

impl Migration {
    /// Whether it moves keys from `olds` (newest first) to `new`.
    fn walks(&self, olds: &[PoolConfig], new: &PoolConfig) -> bool {
        crate::migrate::same_placements(&self.olds, olds)
            && crate::migrate::same_placement(&self.new, new)
    }

    /// The pool's client requests as generation `gen`'s counters say
    /// now (`total`): what they grew by since the last reading goes to
    /// the migrator's pace. A new generation counts afresh, so its first
    /// reading is only the start of its own.
    fn note_clients(&mut self, gen: u64, total: u64) {
        if let Some((g, last)) = self.clients_seen {
            if g == gen {
                self.progress
                    .add_client_requests(total.saturating_sub(last));
            }
        }
        self.clients_seen = Some((gen, total));
    }

    /// The admin lines: the pool's, then one per server walked.
    pub(super) fn lines(&self) -> Vec<String> {
        let mut out = vec![self.progress.line(&self.pool)];
        out.extend(self.progress.source_lines(&self.pool, &self.sources));
        out
    }
}

impl Master {
    /// Make the migrations match the lineage, from the reload that made
    /// it on: one for every pool that has earlier configurations, walking
    /// all of them. One already there for the same configurations goes on
    /// (a reload that changed something else); one for other
    /// configurations (the pool changed again) is replaced at once by the
    /// migration to come, pending until the placement switch
    /// (`start_migrations`), its migrator stopped. So what the admin
    /// reports after a reload is the new migration, never the end of the
    /// one it replaced; and that one's migrator, if it ends meanwhile, is
    /// no longer taken for it (its end would say the new one's keys are
    /// where they belong, and workers would stop pulling them).
    pub(super) fn plan_migrations(&mut self) {
        let Some(cfg) = self.current.as_ref().map(|g| g.config.clone()) else {
            return;
        };
        for p in &cfg.pools {
            let olds = self.lineage.of(&p.name).to_vec();
            if olds.is_empty() {
                continue;
            }
            if let Some(i) = self.migrations.iter().position(|m| m.pool == p.name) {
                if self.migrations[i].walks(&olds, p) {
                    continue;
                }
                let m = self.migrations.remove(i);
                if let Some(pid) = m.pid {
                    crate::log_notice!(
                        "pool '{}' changed again: the running migration stops and a new one starts at the placement switch",
                        p.name
                    );
                    // SAFETY: signalling our own child.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            let sources = crate::migrate::Plan {
                olds: &olds,
                new: p,
            }
            .source_names();
            let progress = match Progress::new(sources.len()) {
                Ok(pr) => pr,
                Err(e) => {
                    crate::log_error!("pool '{}': cannot start its migration: {e}", p.name);
                    continue;
                }
            };
            self.migrations.push(Migration {
                pool: p.name.clone(),
                olds,
                new: p.clone(),
                sources,
                pid: None,
                started: false,
                progress,
                restart_at: None,
                restarts: 0,
                clients_seen: None,
            });
        }
    }

    /// At the placement switch: the migrations of the lineage start (those
    /// already running go on).
    pub(super) fn start_migrations(&mut self) {
        self.plan_migrations();
        let mut ms = std::mem::take(&mut self.migrations);
        for m in ms.iter_mut().filter(|m| !m.started) {
            self.spawn_migrator(m);
        }
        self.migrations.append(&mut ms);
    }

    /// The lineage of the first generation: none, or what a previous
    /// binary handed down, applied to `config`; in a fleet, else, the
    /// earlier configurations etcd lists with the revision it starts from
    /// (a migration in progress when this member started).
    pub(super) fn inherit_migrations(&mut self, config: &Config) -> Lineage {
        let texts = std::mem::take(&mut self.inherited_lineage);
        if texts.is_empty() {
            return self.fleet_lineage(config);
        }
        match Lineage::import(&texts, config) {
            Ok(l) => {
                if !l.is_empty() {
                    crate::log_notice!(
                        "carrying on the migrations of the previous binary once it has stopped"
                    );
                    self.pending_migrations = true;
                }
                l
            }
            Err(e) => {
                crate::log_error!(
                    "the previous binary's migrations cannot be read, not carried on: {e}"
                );
                Lineage::default()
            }
        }
    }

    /// Environment of the new binary (hot upgrade): the migrations to
    /// carry on, `WALNUT_LINEAGE_<k>` = YAML.
    pub(super) fn export_lineage(&self) -> Vec<std::ffi::CString> {
        let (Some(g), false) = (self.current.as_ref(), self.lineage.is_empty()) else {
            return Vec::new();
        };
        self.lineage
            .export(&g.config)
            .into_iter()
            .enumerate()
            .filter_map(|(k, text)| std::ffi::CString::new(format!("{LINEAGE_ENV}{k}={text}")).ok())
            .collect()
    }

    fn spawn_migrator(&mut self, m: &mut Migration) {
        // SAFETY: single-threaded master; the child runs the migrator and
        // leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            crate::log_error!(
                "pool '{}': cannot fork its migrator: {}",
                m.pool,
                std::io::Error::last_os_error()
            );
            m.restart_at = Some(Instant::now() + Duration::from_secs(1));
            return;
        }
        if pid == 0 {
            self.become_helper(
                crate::log::MIGRATOR,
                &format!("walnut: migrator {}", m.pool),
            );
            let plan = crate::migrate::Plan {
                olds: &m.olds,
                new: &m.new,
            };
            let moved = self.lineage.moved_keys(&m.pool);
            let done = crate::migrate::run(&plan, &m.progress, moved.as_deref());
            let code = if done {
                0
            } else if m.progress.aborted() {
                EXIT_ABORTED
            } else {
                1
            };
            // SAFETY: leave without the master's destructors.
            unsafe { libc::_exit(code) }
        }
        m.pid = Some(pid);
        m.started = true;
        m.restart_at = None;
        crate::log_notice!("pool '{}': migrator started, pid {pid}", m.pool);
    }

    /// A child exited: if it was a migrator, act on how. True if it was.
    pub(super) fn migrator_exited(&mut self, pid: libc::pid_t, code: Option<i32>) -> bool {
        let Some(i) = self.migrations.iter().position(|m| m.pid == Some(pid)) else {
            return false;
        };
        let m = &mut self.migrations[i];
        m.pid = None;
        match code {
            Some(0) => {
                let pool = m.pool.clone();
                self.migration_finished(&pool);
            }
            Some(EXIT_ABORTED) => {
                m.progress.set_state(State::Aborted);
                crate::log_notice!(
                    "pool '{}': migration aborted; keys not moved yet are still pulled when asked for",
                    m.pool
                );
            }
            _ => {
                m.restarts += 1;
                let delay = Duration::from_millis((200u64 << m.restarts.min(5)).min(5000));
                crate::log_error!(
                    "pool '{}': migrator (pid {pid}) ended abnormally; restarting it in {} ms",
                    m.pool,
                    delay.as_millis()
                );
                m.restart_at = Some(Instant::now() + delay);
            }
        }
        true
    }

    /// Start the migrations of a reload once its placement switch has
    /// happened (no older worker routes by the old placement any more),
    /// and restart migrators whose time has come.
    /// No older generation, and no previous binary, routes requests.
    pub(super) fn placement_switched(&self) -> bool {
        self.old
            .iter()
            .all(|g| g.switched || !g.workers.iter().any(|w| w.alive))
            && self.prev.is_none()
    }

    pub(super) fn migrations_due(&mut self) {
        // A previous binary (hot upgrade) routes by the placement it had
        // until it stops.
        let switched = self.placement_switched();
        if switched && self.pending_migrations && !self.stopping && self.fleet_go() {
            self.pending_migrations = false;
            self.start_migrations();
            self.fleet_release();
        }
        let now = Instant::now();
        let mut ms = std::mem::take(&mut self.migrations);
        for m in ms.iter_mut() {
            if matches!(m.restart_at, Some(t) if t <= now) && !self.stopping {
                self.spawn_migrator(m);
            }
            // What the pool's clients send, for the migrator's pace (this
            // loop runs at least every 100 ms).
            if let Some(g) = &self.current {
                if let Some(i) = g.config.pools.iter().position(|p| p.name == m.pool) {
                    m.note_clients(g.id, g.region.pool_requests(i));
                }
            }
        }
        self.migrations.append(&mut ms);
    }

    /// Every key of `pool` is where it belongs: workers stop pulling.
    pub(super) fn migration_finished(&mut self, pool: &str) {
        let param = Param::MigrationDone {
            pool: pool.to_string(),
        };
        let msg = Message::Set(param.clone());
        if let Some(gen) = self.current.as_mut() {
            for w in gen.workers.iter_mut().filter(|w| w.alive) {
                let _ = w.channel.send(&msg);
            }
        }
        self.runtime.retain(|(p, _)| p != &param);
        self.runtime.push((param, "done".into()));
        self.lineage.finished(pool);
        if let Some(gen) = self.current.as_mut() {
            gen.lineage.finished(pool);
        }
        crate::log_notice!("pool '{pool}': migration done, workers no longer pull keys");
    }

    /// The stats JSON document, with each migration's progress in its
    /// pool's object.
    pub(super) fn stats_json(&self) -> String {
        let Some(g) = &self.current else {
            return String::new();
        };
        let extra: Vec<(String, String)> = self
            .migrations
            .iter()
            .map(|m| (m.pool.clone(), m.progress.json_fields()))
            .collect();
        crate::stats::json::render(
            &g.config,
            &g.region,
            self.started.elapsed().as_secs(),
            &self.source,
            &extra,
        )
    }

    /// Admin `migration`: one line per pool, each followed by one line
    /// per server its migrator walks.
    pub(super) fn migration_lines(&self) -> Vec<String> {
        self.migrations.iter().flat_map(Migration::lines).collect()
    }

    /// Admin `migration pause|resume|abort POOL`.
    pub(super) fn migration_control(&mut self, what: &str, pool: &str) -> Result<(), String> {
        let m = self
            .migrations
            .iter()
            .find(|m| m.pool == pool)
            .ok_or_else(|| format!("no migration for pool '{pool}'"))?;
        m.progress.control(what)?;
        crate::log_notice!("admin: migration of pool '{pool}': {what}");
        Ok(())
    }

    /// Stop every migrator (the master is stopping).
    pub(super) fn stop_migrations(&mut self) {
        for m in &self.migrations {
            if let Some(pid) = m.pid {
                // SAFETY: signalling our own child.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
    }

    /// `/metrics` families of the migrations.
    pub(super) fn migration_metrics(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if self.migrations.is_empty() {
            return out;
        }
        out.push_str("# HELP walnut_migration_keys_total Keys of a migrating pool, by outcome.\n");
        out.push_str("# TYPE walnut_migration_keys_total counter\n");
        for m in &self.migrations {
            let [scanned, moved, skipped, failed, _] = m.progress.counts();
            for (o, v) in [
                ("scanned", scanned),
                ("moved", moved),
                ("skipped", skipped),
                ("failed", failed),
            ] {
                let _ = writeln!(
                    out,
                    "walnut_migration_keys_total{{pool=\"{}\",outcome=\"{o}\"}} {v}",
                    m.pool
                );
            }
        }
        out.push_str(
            "# HELP walnut_migration_server_keys_total Keys of a migrating pool looked at (scanned) and moved away (moved), by server walked (its address).\n",
        );
        out.push_str("# TYPE walnut_migration_server_keys_total counter\n");
        for m in &self.migrations {
            for (i, s) in m.sources.iter().enumerate() {
                let [scanned, moved] = m.progress.source_counts(i);
                for (o, v) in [("scanned", scanned), ("moved", moved)] {
                    let _ = writeln!(
                        out,
                        "walnut_migration_server_keys_total{{pool=\"{}\",server=\"{}\",outcome=\"{o}\"}} {v}",
                        m.pool,
                        crate::stats::prometheus::esc(s)
                    );
                }
            }
        }
        for (name, kind, help, value) in PER_POOL {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for m in &self.migrations {
                let _ = writeln!(out, "{name}{{pool=\"{}\"}} {}", m.pool, value(&m.progress));
            }
        }
        out
    }
}
