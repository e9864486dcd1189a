//! The master's side of its workers: forking a generation's workers (each
//! pinned to its CPU, holding only its own descriptors), reaping them, and
//! restarting one that died, with backoff.

use super::channel::{Channel, Message};
use super::{log_switch, worker_proc, Generation, Master, WorkerProc, EXIT_FATAL};
use crate::config::{Config, CpuAffinity, ListenerMode};
use crate::worker::ListenerFd;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

fn cpu_for(config: &Config, index: usize) -> Option<usize> {
    match &config.process.cpu_affinity {
        CpuAffinity::None => None,
        CpuAffinity::Auto => {
            // Worker i on the i-th CPU this process may run on (which is
            // CPU i unless walnut was started under a narrower mask).
            let cpus = allowed_cpus();
            cpus.get(index % cpus.len().max(1)).copied().or(Some(index))
        }
        CpuAffinity::List(cpus) => cpus.get(index % cpus.len().max(1)).copied(),
    }
}

/// CPUs in the calling process's affinity mask, in ascending order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it and
    // CPU_ISSET reads within its bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

impl Master {
    /// Fork worker `index` of `gen`.
    pub(super) fn spawn(&self, gen: &Generation, index: usize) -> std::io::Result<WorkerProc> {
        let (master_end, worker_end) = Channel::pair()?;
        let handin = self.handin.try_clone()?;
        let mut listeners = Vec::new();
        for l in &gen.listeners[index] {
            listeners.push(ListenerFd {
                pool: l.pool,
                fd: l.fd.try_clone()?,
                tcp: l.tcp,
            });
        }
        // SAFETY: the master is single-threaded, so the child is a complete
        // copy; it only runs worker code and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            drop(master_end);
            self.close_in_child(gen);
            worker_proc::worker_main(worker_proc::WorkerStart {
                index,
                config: &gen.config,
                listeners,
                region: &gen.region,
                mutex: gen.mutex.as_deref(),
                channel: worker_end,
                cpu: cpu_for(&gen.config, index),
                handin: Some(handin),
                lineage: &gen.lineage,
                fleet: self
                    .fleet_page
                    .map(|p| (p, gen.id > 1 || !gen.lineage.is_empty())),
            });
        }
        drop(worker_end);
        drop(handin);
        crate::log_notice!("worker {} started, pid {}", index, pid);
        Ok(WorkerProc {
            pid,
            channel: master_end,
            started: Instant::now(),
            quick_deaths: 0,
            respawn_at: None,
            alive: true,
            fatal: false,
            respawns: 0,
        })
    }

    /// In a freshly forked helper process (a migrator, the fleet agent):
    /// die with the master, drop the master's descriptors and signal
    /// handlers, and take the log role and title given.
    pub(super) fn become_helper(&self, role: i32, title: &str) {
        // SAFETY: prctl with a valid signal: die with the master.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        }
        if let Some(gen) = self.current.as_ref() {
            self.close_in_child(gen);
        }
        super::signals::reset();
        crate::log::set_role(role);
        super::title::set(title);
    }

    /// In a new worker: close descriptors that belong to the master only,
    /// and every listening socket but the worker's own copies (a worker
    /// must not keep another slot's reuseport socket open).
    pub(super) fn close_in_child(&self, new_gen: &Generation) {
        let mut fds: Vec<RawFd> = self.socks.raw_fds();
        if let Some(s) = &self.stats {
            fds.push(s.as_raw_fd());
        }
        if let Some(a) = &self.admin {
            fds.extend(a.fds());
        }
        fds.extend(&self.admin_fds);
        if let Some(p) = &self.ready_pipe {
            fds.push(p.as_raw_fd());
        }
        if let Some(s) = &self.successor {
            fds.push(s.pipe_fd());
        }
        fds.push(self.handin.as_raw_fd());
        for gen in self
            .current
            .iter()
            .chain(self.old.iter())
            .chain(std::iter::once(new_gen))
        {
            for w in &gen.workers {
                fds.push(w.channel.fd());
            }
            for l in gen.listeners.iter().flatten() {
                fds.push(l.fd.as_raw_fd());
            }
        }
        fds.sort_unstable();
        fds.dedup();
        for fd in fds {
            // SAFETY: closing the child's copies of master-only descriptors.
            unsafe {
                libc::close(fd);
            }
        }
    }

    pub(super) fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            let how = if libc::WIFSIGNALED(status) {
                format!("killed by signal {}", libc::WTERMSIG(status))
            } else {
                format!("exited with code {}", libc::WEXITSTATUS(status))
            };
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            if self.migrator_exited(pid, code) || self.fleet_agent_exited(pid) {
                continue;
            }
            let fatal = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == EXIT_FATAL;
            let clean = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            let stopping = self.stopping;
            let mut found = false;
            let mut abandoned: Option<usize> = None;
            for gen in self.current.iter_mut().chain(self.old.iter_mut()) {
                let draining = gen.draining;
                for (i, w) in gen.workers.iter_mut().enumerate() {
                    if w.pid != pid || !w.alive {
                        continue;
                    }
                    found = true;
                    w.alive = false;
                    if let Some(m) = &gen.mutex {
                        m.force_unlock_if(pid as u64);
                    }
                    if draining || stopping || clean {
                        crate::log_notice!("worker {} (pid {}) {}", i, pid, how);
                        continue;
                    }
                    crate::log_error!("worker {} (pid {}) {}", i, pid, how);
                    if fatal {
                        w.fatal = true;
                        crate::log_error!("worker {} failed fatally, not restarting it", i);
                        if !draining {
                            abandoned = Some(i);
                        }
                        continue;
                    }
                    // Restart at once; a worker that keeps dying right after
                    // start is restarted with growing delays.
                    if w.started.elapsed() < Duration::from_secs(1) {
                        w.quick_deaths += 1;
                    } else {
                        w.quick_deaths = 0;
                    }
                    let delay = if w.quick_deaths <= 1 {
                        Duration::ZERO
                    } else {
                        Duration::from_millis((50u64 << w.quick_deaths.min(7)).min(5000))
                    };
                    if delay.is_zero() {
                        crate::log_notice!("worker {i} restarts at once");
                    } else {
                        crate::log_warn!(
                            "worker {i} restarts in {} ms ({} deaths within 1 s of starting)",
                            delay.as_millis(),
                            w.quick_deaths
                        );
                    }
                    w.respawn_at = Some(Instant::now() + delay);
                }
            }
            if let (Some(i), Some(gen)) = (abandoned, self.current.as_mut()) {
                self.socks.close_slot(&gen.config, i);
                if gen.config.process.listener == ListenerMode::Reuseport {
                    if let Some(l) = gen.listeners.get_mut(i) {
                        l.clear();
                    }
                }
            }
            if self.upgrade_child == Some(pid) {
                self.upgrade_child = None;
                self.upgrade_child_exited(pid, clean, &how);
            } else if !found {
                crate::log_info!("child pid {} {}", pid, how);
            }
        }
        // Finished old generations: keep what they counted.
        let (ended, live): (Vec<Generation>, Vec<Generation>) = std::mem::take(&mut self.old)
            .into_iter()
            .partition(|g| !g.workers.iter().any(|w| w.alive));
        self.old = live;
        let current = self.current.as_ref().map_or(0, |g| g.id);
        for mut g in ended {
            log_switch(&mut g, current);
            self.fold_generation(&g.region, &g.names);
            crate::log_notice!("generation {} ended", g.id);
        }
        self.respawn_due();
    }

    pub(super) fn respawn_due(&mut self) {
        let now = Instant::now();
        let Some(mut gen) = self.current.take() else {
            return;
        };
        for i in 0..gen.workers.len() {
            let due = matches!(gen.workers[i].respawn_at, Some(t) if t <= now);
            if !due || self.stopping {
                continue;
            }
            gen.region.reset_gauges(i);
            let quick = gen.workers[i].quick_deaths;
            let respawns = gen.workers[i].respawns + 1;
            match self.spawn(&gen, i) {
                Ok(mut w) => {
                    w.quick_deaths = quick;
                    w.respawns = respawns;
                    for (p, _) in &self.runtime {
                        let _ = w.channel.send(&Message::Set(p.clone()));
                    }
                    gen.workers[i] = w;
                }
                Err(e) => {
                    crate::log_error!("cannot restart worker {i}: {e}");
                    gen.workers[i].respawn_at = Some(now + Duration::from_secs(1));
                }
            }
        }
        self.current = Some(gen);
    }
}
