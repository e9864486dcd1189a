//! Life of a worker process after fork: process title, parent-death
//! signal, CPU affinity, signals, then the event loop until told to stop.

use super::channel::{Channel, Message};
use super::signals;
use crate::config::runtime::Param;
use crate::config::Config;
use crate::stats::shm::Region;
use crate::worker::{AcceptMutex, Control, ListenerFd, Stop, Worker, WorkerCtl, WorkerSetup};
use std::os::fd::RawFd;

/// Exit code of a worker that cannot start: the master does not respawn it
/// (nginx's rule for fatal worker errors).
pub const EXIT_FATAL: i32 = 2;

struct WorkerControl {
    channel: Channel,
    graceful: bool,
    handover: bool,
}

impl Control for WorkerControl {
    fn check(&mut self, ctl: &mut WorkerCtl, readable: bool) -> Stop {
        let sigs = signals::take();
        if sigs != 0 {
            for &s in signals::HANDLED {
                if signals::has(sigs, s) {
                    crate::log_info!("worker received {}", signals::name(s));
                }
            }
        }
        if signals::has(sigs, libc::SIGTERM) || signals::has(sigs, libc::SIGINT) {
            return Stop::Fast;
        }
        if signals::has(sigs, libc::SIGQUIT) || signals::has(sigs, libc::SIGWINCH) {
            self.graceful = true;
        }
        if signals::has(sigs, libc::SIGUSR1) || signals::has(sigs, libc::SIGHUP) {
            let _ = crate::log::reopen();
        }
        if signals::has(sigs, libc::SIGTTIN) {
            crate::log::level_up();
        }
        if signals::has(sigs, libc::SIGTTOU) {
            crate::log::level_down();
        }
        if readable {
            match self.channel.recv() {
                Ok(msgs) => {
                    for m in msgs {
                        match m {
                            Message::Stop => return Stop::Fast,
                            Message::Graceful => self.graceful = true,
                            Message::ReopenLogs => {
                                let _ = crate::log::reopen();
                            }
                            Message::Set(p) => {
                                let res = apply_param(ctl, &p);
                                let _ = self
                                    .channel
                                    .send(&Message::Ack(res.err().unwrap_or_default()));
                            }
                            Message::Handover(to) => {
                                ctl.handover_to = Some(to);
                                self.handover = true;
                            }
                            Message::Ack(_) | Message::Stopped | Message::Ready => {}
                        }
                    }
                }
                Err(_) => {
                    // The master is gone: nothing would restart us or
                    // collect our stats; stop at once.
                    return Stop::Fast;
                }
            }
        }
        if self.graceful {
            Stop::Graceful
        } else if self.handover {
            Stop::Handover
        } else {
            Stop::Run
        }
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.channel.fd())
    }

    fn stopped_routing(&mut self) {
        let _ = self.channel.send(&Message::Stopped);
    }
}

/// Apply a runtime parameter in this worker. The master validated it
/// against the configuration this worker runs, so only a pool it does not
/// have (a generation switch in between) is refused.
pub fn apply_param(ctl: &mut WorkerCtl, param: &Param) -> Result<(), String> {
    let pool_index = |pool: &str| {
        ctl.pool_names
            .iter()
            .position(|n| n == pool)
            .ok_or_else(|| format!("unknown pool '{pool}'"))
    };
    match param {
        Param::LogLevel(n) => crate::log::set_level(*n),
        Param::TcpQuickack(on) => ctl.quickack = *on,
        Param::ClientIdleTimeout(d) => ctl.client_idle = *d,
        Param::SlowlogThreshold(us) => ctl.slowlog_us = *us,
        Param::ClientOutputLimit(n) => ctl.client_output_limit = Some(*n),
        Param::ClientMaxInflight(n) => ctl.client_max_inflight = Some(n.get()),
        Param::Latency(on) => ctl.latency = *on,
        Param::ReplyHold(us) => ctl.reply_hold = crate::worker::reply_hold_bound(*us),
        Param::PoolTimeout { pool, ms } => {
            let idx = pool_index(pool)?;
            ctl.pool_timeouts.push((idx, *ms));
        }
        Param::MigrationDone { pool } => {
            let idx = pool_index(pool)?;
            ctl.migration_done.push(idx);
        }
        Param::FleetGo { pool } => {
            let idx = pool_index(pool)?;
            ctl.fleet_go.push(idx);
        }
    }
    Ok(())
}

/// Everything a forked worker starts from.
pub struct WorkerStart<'a> {
    /// Worker index (slot in the counters region).
    pub index: usize,
    /// Configuration of its generation.
    pub config: &'a Config,
    /// Its listeners.
    pub listeners: Vec<ListenerFd>,
    /// Counters region.
    pub region: &'a Region,
    /// Accept mutex (accept_mutex mode).
    pub mutex: Option<&'a AcceptMutex>,
    /// Its end of the channel.
    pub channel: Channel,
    /// CPU to pin to.
    pub cpu: Option<usize>,
    /// The master's handover socket (clients handed to this generation).
    pub handin: Option<std::os::fd::OwnedFd>,
    /// Earlier configurations of the pools that migrate.
    pub lineage: &'a crate::migrate::Lineage,
    /// A fleet member's page (`fleet/page.rs`), and whether its migrating
    /// pools start fenced (a reload, or a start while a migration runs:
    /// until the fleet's barrier passes).
    pub fleet: Option<(crate::fleet::page::FleetPage, bool)>,
}

/// Body of a worker process; never returns.
pub fn worker_main(start: WorkerStart<'_>) -> ! {
    crate::log::set_role(start.index as i32);
    // SAFETY: prctl with PR_SET_PDEATHSIG and a valid signal number.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    }
    super::title::set(&format!("walnut: worker {}", start.index));
    if let Some(cpu) = start.cpu {
        pin_to_cpu(cpu);
    }
    signals::reset();
    signals::install();
    let mut control = WorkerControl {
        channel: start.channel,
        graceful: false,
        handover: false,
    };
    let setup = WorkerSetup {
        listeners: start.listeners,
        region: start.region,
        slot: start.index,
        mutex: start.mutex,
        handin: start.handin,
        lineage: start.lineage,
        fleet: start.fleet,
    };
    let worker = Worker::new(start.config, setup);
    if worker.is_ok() {
        let _ = control.channel.send(&Message::Ready);
    }
    let code = match worker {
        Ok(mut w) => match w.run(&mut control) {
            Ok(()) => 0,
            Err(e) => {
                crate::log_error!("event loop failed: {e}");
                1
            }
        },
        Err(e) => {
            crate::log_error!("worker cannot start: {e}");
            EXIT_FATAL
        }
    };
    crate::log_info!("worker exiting");
    // SAFETY: leave without running the parent's atexit handlers or
    // destructors for state shared with the master.
    unsafe { libc::_exit(code) }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET within bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            crate::log_warn!(
                "cannot pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}
