//! The master's side of a fleet (`--etcd`, see `src/fleet/`): the fleet
//! agent forked and restarted, the state file it publishes (revision
//! applied, revision prepared, addresses, each pool's migration phase)
//! rewritten when it changes, the fleet's barrier awaited before a
//! reload's migrations start and its workers pull moved keys, and the
//! admin port's `fleet` and `/metrics` lines.

use super::channel::Message;
use super::Master;
use crate::config::runtime::Param;
use crate::config::Config;
use crate::fleet::FleetOpts;
use crate::migrate::Lineage;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The master's fleet bookkeeping.
#[derive(Default)]
pub(super) struct FleetHost {
    pub(super) agent: Option<libc::pid_t>,
    pub(super) restart_at: Option<Instant>,
    /// The configuration revision the running generation was started from.
    pub(super) revision: i64,
    /// The revision whose placement switch is done here: no generation
    /// routes by an older configuration.
    pub(super) prepared: i64,
    /// The state file's text as last written.
    state: String,
    /// This pass began with SIGURG: the agent wrote the go file.
    pub(super) woken: bool,
}

impl Master {
    fn fleet_opts(&self) -> Option<&FleetOpts> {
        self.opts.fleet.as_ref()
    }

    /// Fork the fleet agent (`fleet::agent::run`).
    pub(super) fn spawn_fleet_agent(&mut self) {
        let Some(opts) = self.fleet_opts().cloned() else {
            return;
        };
        // SAFETY: single-threaded master; the child runs the agent and
        // leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            crate::log_error!(
                "cannot fork the fleet agent: {}",
                std::io::Error::last_os_error()
            );
            self.fleet.restart_at = Some(Instant::now() + Duration::from_secs(1));
            return;
        }
        if pid == 0 {
            self.become_helper(crate::log::FLEET_AGENT, "walnut: fleet agent");
            let Some(page) = self.fleet_page else {
                // SAFETY: leave without the master's destructors.
                unsafe { libc::_exit(1) }
            };
            let code = crate::fleet::agent::run(opts, page);
            // SAFETY: leave without the master's destructors.
            unsafe { libc::_exit(code) }
        }
        self.fleet.agent = Some(pid);
        self.fleet.restart_at = None;
        crate::log_notice!("fleet agent started, pid {pid}");
    }

    /// A child exited: if it was the fleet agent, restart it in a second.
    pub(super) fn fleet_agent_exited(&mut self, pid: libc::pid_t) -> bool {
        if self.fleet.agent != Some(pid) {
            return false;
        }
        self.fleet.agent = None;
        if !self.stopping {
            crate::log_error!("fleet agent (pid {pid}) ended; restarting it in 1 s");
            self.fleet.restart_at = Some(Instant::now() + Duration::from_secs(1));
        }
        true
    }

    /// The revision named by the configuration file just applied.
    pub(super) fn fleet_applied(&mut self, text: &str) {
        if self.opts.fleet.is_some() {
            self.fleet.revision = crate::fleet::revision_in(text);
        }
    }

    /// The lineage a member starts with: the earlier configurations etcd
    /// lists with the revision of its configuration file
    /// (`fleet::Joined`), so that it fences, waits for the fleet's
    /// barrier and then pulls moved keys as the members that reloaded do.
    pub(super) fn fleet_lineage(&mut self, config: &Config) -> Lineage {
        let Some(opts) = self.fleet_opts().cloned() else {
            return Lineage::default();
        };
        let revision = std::fs::read_to_string(&self.opts.conf_path)
            .map(|t| crate::fleet::revision_in(&t))
            .unwrap_or(0);
        let joined = std::fs::read_to_string(opts.lineage_path())
            .ok()
            .and_then(|t| crate::fleet::Joined::from_text(&t));
        let Some(joined) = joined.filter(|j| j.revision == revision && revision != 0) else {
            crate::log_warn!(
                "fleet '{}': no lineage for revision {revision}; starting without earlier placements",
                opts.name
            );
            return Lineage::default();
        };
        match joined.lineage(config) {
            Ok(l) => {
                if !l.is_empty() {
                    crate::log_notice!(
                        "fleet '{}': revision {revision} migrates; this member joins: moved keys are refused until the fleet's barrier, then pulled",
                        opts.name
                    );
                    self.pending_migrations = true;
                }
                l
            }
            Err(e) => {
                crate::log_error!(
                    "fleet '{}': the earlier configurations of revision {revision} cannot be read: {e}",
                    opts.name
                );
                Lineage::default()
            }
        }
    }

    /// Each pass: restart the agent when due, rewrite the state file when
    /// what it says changed.
    pub(super) fn fleet_due(&mut self) {
        let Some(opts) = self.fleet_opts().cloned() else {
            return;
        };
        if matches!(self.fleet.restart_at, Some(t) if t <= Instant::now()) && !self.stopping {
            self.spawn_fleet_agent();
        }
        if self.placement_switched() {
            self.fleet.prepared = self.fleet.revision;
        }
        let state = self.fleet_state().to_string();
        if state != self.fleet.state {
            if let Err(e) = crate::fleet::write_atomic(&opts.state_path(), state.as_bytes()) {
                crate::log_error!("fleet: cannot write {}: {e}", opts.state_path().display());
                return;
            }
            self.fleet.state = state;
            // The agent reads the file at once rather than in its next
            // pass (`fleet::agent`'s `WAKE`).
            if let Some(pid) = self.fleet.agent {
                // SAFETY: signalling our own child.
                unsafe {
                    libc::kill(pid, libc::SIGURG);
                }
            }
        }
    }

    /// What this instance runs, as its member record carries it.
    fn fleet_state(&self) -> Value {
        let mut pools = serde_json::Map::new();
        let mut listen = Vec::new();
        if let Some(g) = &self.current {
            for p in &g.config.pools {
                listen.push(json!(p.listen.to_string()));
                // `done` and `steady` tell a member that starts that the
                // pool's migration to this revision ended
                // (`fleet::settled_pools`): a migration of an earlier
                // change, done, does not say it while a new one waits.
                let switching = self.pending_migrations && !self.lineage.of(&p.name).is_empty();
                let phase = match self.migrations.iter().find(|m| m.pool == p.name) {
                    _ if switching => "switching",
                    Some(m) => m.progress.state().name(),
                    None => "steady",
                };
                pools.insert(p.name.clone(), json!(phase));
            }
        }
        json!({
            "revision": self.fleet.revision,
            "prepared": self.fleet.prepared,
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "generation": self.current.as_ref().map_or(0, |g| g.id),
            "listen": listen,
            "admin": self.admin.as_ref().map(|a| a.local_addr()),
            "stats": self.stats.as_ref().and_then(|s| s.local_addr().ok()).map(|a| a.to_string()),
            "pools": pools,
        })
    }

    fn fleet_members(&self) -> Vec<Value> {
        self.fleet_opts()
            .and_then(|o| std::fs::read(o.members_path()).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// The admin port's `fleet` reply.
    pub(super) fn fleet_lines(&self) -> Option<Vec<String>> {
        let opts = self.fleet_opts()?;
        let members = self.fleet_members();
        let mut out = vec![format!(
            "fleet {} member {} applied revision {}, {} members",
            opts.name,
            opts.id,
            self.fleet.revision,
            members.len()
        )];
        out.extend(crate::fleet::cmd::member_lines(&members));
        Some(out)
    }

    /// `/metrics` families of the fleet.
    pub(super) fn fleet_metrics(&self) -> String {
        let Some(opts) = self.fleet_opts() else {
            return String::new();
        };
        let name = &opts.name;
        format!(
            "# HELP walnut_fleet_config_revision The fleet configuration's etcd revision this instance runs.\n\
             # TYPE walnut_fleet_config_revision gauge\n\
             walnut_fleet_config_revision{{fleet=\"{name}\",member=\"{}\"}} {}\n\
             # HELP walnut_fleet_members Members of the fleet registered in etcd, as last listed.\n\
             # TYPE walnut_fleet_members gauge\n\
             walnut_fleet_members{{fleet=\"{name}\"}} {}\n",
            opts.id,
            self.fleet.revision,
            self.fleet_members().len()
        )
    }

    /// Whether a reload's migrations may start: outside a fleet at once;
    /// in one, once the fleet passed the barrier of the revision running
    /// (every member prepared it, `fleet/agent.rs`).
    pub(super) fn fleet_go(&self) -> bool {
        let Some(opts) = self.fleet_opts() else {
            return true;
        };
        std::fs::read_to_string(opts.go_path())
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .is_some_and(|go| go >= self.fleet.revision)
    }

    /// The barrier passed: workers pull moved keys instead of refusing
    /// them (respawned ones are told again).
    pub(super) fn fleet_release(&mut self) {
        if self.opts.fleet.is_none() {
            return;
        }
        let Some(gen) = self.current.as_mut() else {
            return;
        };
        let pools: Vec<String> = gen
            .config
            .pools
            .iter()
            .filter(|p| p.migration)
            .map(|p| p.name.clone())
            .collect();
        for pool in pools {
            let param = Param::FleetGo { pool };
            let msg = Message::Set(param.clone());
            for w in gen.workers.iter_mut().filter(|w| w.alive) {
                let _ = w.channel.send(&msg);
            }
            self.runtime.retain(|(p, _)| p != &param);
            self.runtime.push((param, "go".into()));
        }
        crate::log_notice!(
            "fleet: every member prepared revision {}; moved keys are pulled (go read {})",
            self.fleet.revision,
            if self.fleet.woken {
                "on the agent's wake-up"
            } else {
                "in a timed pass"
            }
        );
    }

    /// Stop the agent (the master is stopping): it revokes its lease,
    /// given up to 3 s (an etcd call's timeout is 2 s).
    pub(super) fn stop_fleet_agent(&mut self) {
        let Some(pid) = self.fleet.agent.take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        // SAFETY: signalling and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
            let mut status = 0;
            while libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 {
                if Instant::now() > deadline {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
