//! The fleet agent: a process of the master's (`master/fleet.rs`) that
//! keeps the instance's membership under an etcd lease and its
//! configuration in step with the fleet's key. One thread, blocking calls
//! with short timeouts, so it never holds the master up; it ends with the
//! master (parent-death signal) and is restarted by it if it dies.
//!
//! Each pass (at most `TICK` apart): a watch reply is read, the lease is
//! renewed every third of its TTL, the master's state file is published
//! when it changed, and the members are listed once a second. The watch
//! covers the fleet's keys (configuration and member records), so a
//! member's record written ends the wait at once; so does SIGURG, which
//! the master sends when it rewrote its state file (`WAKE`). A lost
//! connection starts over: lease, key read, record, watch. A new value is
//! checked (`Config::from_str`) before it is written to the last-good file
//! and the master is sent SIGHUP; an invalid one (only a writer that
//! skipped `walnut fleet apply` can store one) is logged and left.
//!
//! The barrier of a change (revision R): once this master prepared R (it
//! runs R and no generation routes by an older configuration), the agent
//! lists the members every pass until each one's record says it prepared
//! R or later; then it writes R to the go file, sends the master SIGURG
//! (it reads the go file in the pass the signal ends, or in its next
//! timed pass if the signal were lost) and the master lets its workers
//! pull moved keys and starts the migrators. A member that died
//! or froze leaves the list when its lease ends, at most the TTL after
//! its last renewal; by then its own workers refuse `migration: true`
//! pools (`page.rs`), so it cannot write a key to its old owner after
//! another member pulled it.

use super::etcd::{num, Etcd, Kv, WatchEvent};
use super::page::{mono_ms, FleetPage};
use super::FleetOpts;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a watch read waits before the agent's other duties.
const TICK: Duration = Duration::from_millis(50);
/// How often the member list is read for the admin port.
const LIST_EVERY: Duration = Duration::from_secs(1);
/// Pause after a failed round with etcd.
const RETRY: Duration = Duration::from_millis(500);

struct Agent {
    opts: FleetOpts,
    etcd: Etcd,
    /// The revision last written to the last-good file.
    written: i64,
    /// The revision last looked at (written, or refused as invalid).
    seen: i64,
    lease: i64,
    /// The master's state as last published.
    published: String,
    host: String,
    page: FleetPage,
    /// When the lease is sure to last until (`mono_ms`): the send time of
    /// the last keepalive or grant etcd answered, plus the TTL.
    lease_until: u64,
    /// The master's applied and prepared revisions (its state file).
    applied: i64,
    prepared: i64,
    /// The latest revision whose barrier passed (the go file).
    go: i64,
    /// When this master was seen to prepare a revision still waiting.
    prepared_at: Option<Instant>,
}

/// Set by SIGTERM (the master stops): the agent revokes its lease, so the
/// member leaves the list at once rather than when the lease ends.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Set by SIGURG: the master rewrote its state file. The signal also ends
/// the watch read it interrupts (no `SA_RESTART`, and a read with a
/// timeout is never restarted); one that arrives during a pass makes the
/// next pass start without waiting. One that arrives between that check
/// and the read is seen after `TICK`, as without the signal.
static WAKE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_wake(_: libc::c_int) {
    WAKE.store(true, Ordering::Relaxed);
}

fn master_alive() -> bool {
    // SAFETY: getppid has no preconditions.
    !STOP.load(Ordering::Relaxed) && unsafe { libc::getppid() != 1 }
}

/// Runs until the master goes away.
pub fn run(opts: FleetOpts, page: FleetPage) -> i32 {
    // SAFETY: a handler that only stores an atomic flag.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_wake as *const () as usize;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGURG, &sa, std::ptr::null_mut());
    }
    let etcd = match Etcd::new(&opts.etcd) {
        Ok(e) => e,
        Err(e) => {
            crate::log_error!("fleet agent: {e}");
            return 1;
        }
    };
    let written = std::fs::read_to_string(opts.cache_path())
        .map(|t| super::revision_in(&t))
        .unwrap_or(0);
    let go = std::fs::read_to_string(opts.go_path())
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let mut a = Agent {
        opts,
        etcd,
        written,
        seen: written,
        lease: 0,
        published: String::new(),
        host: crate::stats::json::hostname(),
        page,
        lease_until: 0,
        applied: 0,
        prepared: 0,
        go,
        prepared_at: None,
    };
    let mut failing = false;
    while master_alive() {
        match a.session() {
            Ok(()) => {}
            Err(e) => {
                if !master_alive() {
                    break;
                }
                if !failing {
                    crate::log_error!("fleet agent: {e}; retrying");
                }
                failing = true;
                std::thread::sleep(RETRY);
                continue;
            }
        }
        failing = false;
    }
    if a.lease != 0 {
        let _ = a.etcd.revoke(a.lease);
    }
    0
}

impl Agent {
    /// One connection's worth: returns when etcd must be read afresh.
    fn session(&mut self) -> std::io::Result<()> {
        // A lease that ended while etcd could not be reached is replaced.
        if self.lease != 0 && !self.renew()? {
            self.lease = 0;
        }
        if self.lease == 0 {
            let sent = mono_ms();
            self.lease = self.etcd.grant(self.opts.ttl)?;
            self.lease_until = sent + self.opts.ttl * 1000;
            self.published.clear();
        }
        let key = super::config_key(&self.opts.name);
        let (kv, store_rev) = self.etcd.get(&key)?;
        if let Some(kv) = kv {
            if kv.mod_revision != self.seen {
                self.apply(&kv);
            }
        }
        self.publish(true)?;
        let prefix = super::fleet_prefix(&self.opts.name);
        let mut watch = self.etcd.watch(&prefix, store_rev + 1, TICK)?;
        crate::log_info!(
            "fleet agent: member '{}' of fleet '{}' (lease {:x}), watching from revision {}",
            self.opts.id,
            self.opts.name,
            self.lease,
            store_rev + 1
        );
        let renew_every = Duration::from_millis(self.opts.ttl * 1000 / 3).max(TICK);
        let mut renewed = Instant::now();
        let mut listed = Instant::now() - LIST_EVERY;
        while master_alive() {
            // Woken during the last pass: no wait (a watch reply waiting
            // is read in the next pass).
            let woken = WAKE.swap(false, Ordering::Relaxed);
            let reply = if woken { None } else { watch.next_value()? };
            // The pass below reads what a signal during the wait was for.
            WAKE.store(false, Ordering::Relaxed);
            if let Some(v) = reply {
                for ev in super::etcd::watch_events(&v) {
                    match ev {
                        // Member records and the lineage only end the wait.
                        WatchEvent::Changed(kv) if kv.key == key => self.apply(&kv),
                        WatchEvent::Changed(_) => {}
                        WatchEvent::Compacted => return Ok(()),
                        WatchEvent::Created => {}
                    }
                }
            }
            if renewed.elapsed() >= renew_every {
                if !self.renew()? {
                    crate::log_warn!(
                        "fleet agent: lease {:x} ended; registering again",
                        self.lease
                    );
                    self.lease = 0;
                    return Ok(());
                }
                renewed = Instant::now();
            }
            let waiting = self.prepared > self.go && self.prepared == self.applied;
            if waiting && self.prepared_at.is_none() {
                self.prepared_at = Some(Instant::now());
            }
            if self.publish(false)? || waiting || listed.elapsed() >= LIST_EVERY {
                let members = self.list_members()?;
                listed = Instant::now();
                if waiting {
                    self.barrier(&members);
                }
            }
            self.mark_in_step();
        }
        Ok(())
    }

    /// Renews the lease: false once it has ended.
    fn renew(&mut self) -> std::io::Result<bool> {
        let sent = mono_ms();
        if self.etcd.keepalive(self.lease)? <= 0 {
            return Ok(false);
        }
        self.lease_until = sent + self.opts.ttl * 1000;
        Ok(true)
    }

    /// Tells the workers until when they may route `migration: true`
    /// pools: while the lease surely lasts, once the master runs the
    /// configuration last received from etcd. A member that lapsed (the
    /// others may have passed a barrier without it) routes again only once
    /// its placement switch to that configuration is done as well: until
    /// then its older generation still reads requests and routes them by
    /// the older placement, which would write a moved key to its old
    /// owner after another member pulled it.
    fn mark_in_step(&self) {
        if self.lease == 0 || self.applied != self.written {
            return;
        }
        if self.prepared == self.written || self.page.in_step() {
            self.page.set_in_step_until(self.lease_until);
        }
    }

    /// Passes the barrier of the prepared revision when every member
    /// prepared it.
    fn barrier(&mut self, members: &[Value]) {
        let r = self.prepared;
        let me = members
            .iter()
            .any(|m| m["id"].as_str() == Some(self.opts.id.as_str()));
        if !me || members.iter().any(|m| num(&m["prepared"]) < r) {
            return;
        }
        if let Err(e) = super::write_atomic(&self.opts.go_path(), format!("{r}\n").as_bytes()) {
            crate::log_error!(
                "fleet agent: cannot write {}: {e}",
                self.opts.go_path().display()
            );
            return;
        }
        self.go = r;
        // SAFETY: kill with the parent's pid and a valid signal; the
        // master takes SIGURG as "read the go file now".
        unsafe {
            libc::kill(libc::getppid(), libc::SIGURG);
        }
        crate::log_notice!(
            "fleet '{}': all {} members prepared revision {r} ({} ms after this one)",
            self.opts.name,
            members.len(),
            self.prepared_at
                .take()
                .map_or(0, |t| t.elapsed().as_millis())
        );
    }

    /// A new configuration text: checked, kept, and the master told.
    fn apply(&mut self, kv: &Kv) {
        let name = &self.opts.name.clone();
        if kv.value.is_empty() {
            crate::log_warn!(
                "fleet '{name}': configuration key deleted (revision {}); keeping the running one",
                kv.mod_revision
            );
            self.seen = kv.mod_revision;
            return;
        }
        let path = self.opts.cache_path();
        let yaml = String::from_utf8_lossy(&kv.value);
        if let Err(errs) = crate::config::Config::from_str(&yaml, &path) {
            crate::log_error!(
                "fleet '{name}': configuration at revision {} is invalid, not applied: {}",
                kv.mod_revision,
                errs.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            self.seen = kv.mod_revision;
            return;
        }
        self.keep_lineage(kv.mod_revision);
        let text = super::cache_text(name, kv.mod_revision, &yaml);
        if let Err(e) = super::write_atomic(&path, text.as_bytes()) {
            crate::log_error!("fleet '{name}': cannot write {}: {e}", path.display());
            return;
        }
        self.written = kv.mod_revision;
        self.seen = kv.mod_revision;
        crate::log_notice!(
            "fleet '{name}': configuration revision {} received; reloading",
            kv.mod_revision
        );
        // SAFETY: kill with the parent's pid and a valid signal.
        unsafe {
            libc::kill(libc::getppid(), libc::SIGHUP);
        }
    }

    /// Writes the lineage of `revision` beside the last-good file, for a
    /// restart of this instance while etcd is down (the running master
    /// keeps its lineage in memory across reloads). Unreadable: the file
    /// is removed, and such a restart starts without earlier placements.
    fn keep_lineage(&mut self, revision: i64) {
        let name = self.opts.name.clone();
        let read = self
            .etcd
            .list_at(&super::config_key(&name), revision)
            .and_then(|kvs| Ok((kvs, self.etcd.list(&super::members_prefix(&name))?)));
        match read {
            Ok((kvs, members)) => {
                super::write_joined(&self.opts, &super::Joined::from_etcd(&name, &kvs, &members))
            }
            Err(e) => {
                crate::log_warn!("fleet '{name}': lineage of revision {revision} not read: {e}");
                let _ = std::fs::remove_file(self.opts.lineage_path());
            }
        }
    }

    /// The member record: the master's state file, with who and where.
    fn record(&self, state: &str) -> Value {
        let mut v: Value = serde_json::from_str(state).unwrap_or_else(|_| json!({}));
        v["id"] = json!(self.opts.id);
        v["host"] = json!(self.host);
        v["lease_ttl"] = json!(self.opts.ttl);
        v["received_revision"] = json!(self.written);
        v
    }

    /// Writes the member record when the master's state changed (or
    /// always, after a new lease); whether it wrote.
    fn publish(&mut self, force: bool) -> std::io::Result<bool> {
        let state = std::fs::read_to_string(self.opts.state_path()).unwrap_or_default();
        if !force && state == self.published {
            return Ok(false);
        }
        if let Ok(v) = serde_json::from_str::<Value>(&state) {
            self.applied = num(&v["revision"]);
            self.prepared = num(&v["prepared"]);
        }
        let key = [
            super::members_prefix(&self.opts.name),
            self.opts.id.as_bytes().to_vec(),
        ]
        .concat();
        let rec = self.record(&state).to_string();
        self.etcd.put(&key, rec.as_bytes(), self.lease)?;
        self.published = state;
        Ok(true)
    }

    fn list_members(&mut self) -> std::io::Result<Vec<Value>> {
        let members = self.etcd.list(&super::members_prefix(&self.opts.name))?;
        let list: Vec<Value> = members
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        let _ = super::write_atomic(
            &self.opts.members_path(),
            Value::Array(list.clone()).to_string().as_bytes(),
        );
        Ok(list)
    }
}
