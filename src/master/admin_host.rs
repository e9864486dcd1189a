//! The master as the admin port's host: its state for `status`, the
//! running configuration and counters, and `config set` validated then
//! sent to every worker with their acknowledgements collected.

use super::channel::Message;
use super::Master;
use crate::admin::{AdminServer, Host, HostInfo, WorkerInfo};
use crate::config::runtime::Param;
use crate::config::Config;
use crate::stats::shm::Region;
use std::time::{Duration, Instant};

/// How long `config set` waits for the workers' acknowledgements.
const ACK_WAIT: Duration = Duration::from_secs(2);

/// Open the admin port, or take the one a previous binary handed down
/// (hot upgrade). A port taken by another process is a start-up error, as
/// for the stats port (nutcracker refuses too), unless the address is the
/// default (`fallback`): a second instance on the host then listens on a
/// port the kernel picks and says where; `off` turns it off.
pub(super) fn open(
    addr: Option<&str>,
    fallback: bool,
    inherited: Option<std::os::fd::OwnedFd>,
) -> std::io::Result<Option<AdminServer>> {
    if let Some(fd) = inherited {
        let a = AdminServer::from_fd(fd)?;
        crate::log_notice!("admin listening on {} (inherited)", a.local_addr());
        return Ok(Some(a));
    }
    let Some(addr) = addr else {
        return Ok(None);
    };
    let a = match AdminServer::bind(addr) {
        Ok(a) => a,
        Err(e) if fallback && e.kind() == std::io::ErrorKind::AddrInUse => {
            let a = AdminServer::bind(crate::cli::ANY_LOOPBACK_PORT)?;
            crate::log_warn!(
                "admin port {addr} is in use (another walnut on this host?): admin listening on {} instead; give each instance its own with --admin or _walnut: admin",
                a.local_addr()
            );
            return Ok(Some(a));
        }
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("admin port {addr}: {e} (turn it off with --admin off)"),
            ))
        }
    };
    crate::log_notice!("admin listening on {}", a.local_addr());
    Ok(Some(a))
}

impl Master {
    /// Serve the admin connections that are ready.
    pub(super) fn serve_admin(&mut self) {
        if let Some(mut admin) = self.admin.take() {
            admin.service(self);
            self.admin = Some(admin);
            self.admin_fds.clear();
        }
    }
}

impl Host for Master {
    fn info(&self) -> HostInfo {
        let gen = self.current.as_ref();
        HostInfo {
            master_pid: std::process::id(),
            uptime_secs: self.started.elapsed().as_secs(),
            conf_path: self.opts.conf_path.clone(),
            generation: gen.map_or(0, |g| g.id),
            workers: gen
                .map(|g| {
                    g.workers
                        .iter()
                        .enumerate()
                        .map(|(i, w)| WorkerInfo {
                            index: i,
                            pid: w.pid,
                            uptime_secs: w.started.elapsed().as_secs(),
                            alive: w.alive,
                            respawns: w.respawns,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            draining: self
                .old
                .iter()
                .map(|g| g.workers.iter().filter(|w| w.alive).count())
                .sum(),
            runtime: self
                .runtime
                .iter()
                .map(|(p, v)| (p.key(), v.clone()))
                .collect(),
        }
    }

    fn config(&self) -> Option<&Config> {
        self.current.as_ref().map(|g| &g.config)
    }

    fn region(&self) -> Option<&Region> {
        self.current.as_ref().map(|g| &*g.region)
    }

    fn stats_json(&self) -> String {
        Master::stats_json(self)
    }

    fn set_param(&mut self, key: &str, value: &str) -> Vec<String> {
        let Some(gen) = self.current.as_mut() else {
            return vec!["no workers".into()];
        };
        // Refused here, before any worker hears of it: every worker runs
        // this configuration, so one answer stands for all of them.
        let param = match Param::parse(key, value, |p| gen.config.pools.iter().any(|c| c.name == p))
        {
            Ok(p) => p,
            Err(e) => return vec![e],
        };
        let msg = Message::Set(param.clone());
        let mut errors = Vec::new();
        let mut waiting = Vec::new();
        for (i, w) in gen.workers.iter_mut().enumerate().filter(|(_, w)| w.alive) {
            match w.channel.send(&msg) {
                Ok(()) => waiting.push(i),
                Err(e) => errors.push(format!("worker {i} (pid {}): {e}", w.pid)),
            }
        }
        let deadline = Instant::now() + ACK_WAIT;
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut pfds: Vec<libc::pollfd> = waiting
                .iter()
                .map(|&i| libc::pollfd {
                    fd: gen.workers[i].channel.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: poll on a valid array of pollfds.
            unsafe {
                libc::poll(
                    pfds.as_mut_ptr(),
                    pfds.len() as libc::nfds_t,
                    left.as_millis().min(100) as i32,
                );
            }
            waiting.retain(|&i| {
                let w = &mut gen.workers[i];
                match w.channel.recv() {
                    Ok(msgs) => {
                        let mut acked = false;
                        for m in msgs {
                            if let Message::Ack(e) = m {
                                acked = true;
                                if !e.is_empty() {
                                    errors.push(format!("worker {i} (pid {}): {e}", w.pid));
                                }
                            }
                        }
                        !acked
                    }
                    Err(e) => {
                        errors.push(format!("worker {i} (pid {}): {e}", w.pid));
                        false
                    }
                }
            });
        }
        for i in waiting {
            errors.push(format!("worker {i}: no answer"));
        }
        if errors.is_empty() {
            if let Param::LogLevel(n) = param {
                crate::log::set_level(n);
            }
            self.runtime.retain(|(p, _)| p.key() != key);
            self.runtime.push((param, value.to_string()));
            crate::log_notice!("admin: {key} set to {value}");
        }
        errors
    }

    fn admin_fds(&mut self, fds: Vec<std::os::fd::RawFd>) {
        self.admin_fds = fds;
    }

    fn migrations(&self) -> Vec<String> {
        self.migration_lines()
    }

    fn migration_control(&mut self, what: &str, pool: &str) -> Result<(), String> {
        Master::migration_control(self, what, pool)
    }

    fn extra_metrics(&self) -> String {
        self.migration_metrics() + &self.fleet_metrics()
    }

    fn fleet(&self) -> Option<Vec<String>> {
        self.fleet_lines()
    }

    fn reload(&mut self) -> Result<Vec<String>, String> {
        crate::log_notice!("admin: reload");
        let _ = crate::log::reopen();
        self.broadcast(&Message::ReopenLogs);
        Master::reload(self)
    }
}
