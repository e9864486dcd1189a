//! Hot upgrade (nginx's USR2): the master forks and execs the binary it
//! was started from, handing down its listening sockets, its counters
//! region (so the new binary's counters continue from this one's) and the
//! write end of a pipe; the pid file moves to `PIDFILE.oldbin` meanwhile.
//!
//! The new master writes `ready PID` on the pipe once its workers run, and
//! keeps the pipe open while it lives. From `ready` on, the new master
//! serves the stats and admin ports (this one stops answering them, so a
//! reader never sees the two masters' sums alternate), and QUIT to this
//! master hands every client over to the new binary's workers. End of the
//! pipe before `ready`: the upgrade failed; after it: the new master died.
//! Either way this master is the live one again (nginx's rule).

use super::{listeners, signals, Master};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Environment variable carrying the readiness pipe's write end.
const READY_ENV: &str = "WALNUT_UPGRADE_READY";

/// A new binary started by USR2.
pub struct Successor {
    pipe: OwnedFd,
    buf: Vec<u8>,
    /// Pid of its master, once it reported ready.
    ready_pid: Option<u32>,
}

impl Successor {
    /// Its master reported ready.
    pub fn ready(&self) -> bool {
        self.ready_pid.is_some()
    }
    /// The pipe's read end (closed in workers).
    pub fn pipe_fd(&self) -> std::os::fd::RawFd {
        self.pipe.as_raw_fd()
    }
}

/// In a new binary: the readiness pipe its predecessor gave it.
pub fn inherit_ready_pipe() -> Option<OwnedFd> {
    let fd: i32 = std::env::var(READY_ENV).ok()?.parse().ok()?;
    std::env::remove_var(READY_ENV);
    listeners::set_cloexec(fd, true);
    // SAFETY: the previous binary passed us this open descriptor.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// In a new binary whose workers run: tell the predecessor (the pipe then
/// stays open for as long as this master lives).
pub fn report_ready(pipe: Option<&OwnedFd>) {
    let Some(p) = pipe else { return };
    let msg = format!("ready {}\n", std::process::id());
    // SAFETY: writing our own buffer to our own pipe.
    let n = unsafe {
        libc::write(
            p.as_raw_fd(),
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
        )
    };
    if n < 0 {
        crate::log_warn!(
            "cannot tell the previous binary that this one is ready: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// What the child of a hot upgrade execs, built before the fork.
struct Exec {
    exe: CString,
    start_dir: CString,
    args: Vec<CString>,
    /// `KEY=value` entries added to the environment.
    env: Vec<CString>,
    /// Descriptors the new binary inherits besides the listening sockets.
    keep: Vec<RawFd>,
}

impl Exec {
    /// In the forked child: exec the binary (exit 1 if that fails).
    fn exec(&self) -> ! {
        let mut argv: Vec<*const libc::c_char> = self.args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        signals::unblock();
        // SAFETY: putenv with strings that live until exec; execv with
        // NUL-terminated argv.
        unsafe {
            for kv in &self.env {
                libc::putenv(kv.as_ptr() as *mut libc::c_char);
            }
            for &fd in &self.keep {
                listeners::set_cloexec(fd, false);
            }
            // A daemon (`-d`) runs in `/`: relative `-c`, `-o`, `-p`
            // are relative to where walnut was started.
            libc::chdir(self.start_dir.as_ptr());
            libc::execv(self.exe.as_ptr(), argv.as_ptr());
            libc::_exit(1);
        }
    }
}

fn c_string(bytes: impl Into<Vec<u8>>) -> CString {
    CString::new(bytes).unwrap_or_default()
}

/// The readiness pipe (read end, write end), both close-on-exec.
fn ready_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Master {
    /// Exec a new binary that inherits the listening sockets (nginx's USR2).
    pub(super) fn upgrade(&mut self) {
        let spec = self.export_listeners();
        if self.upgrade_child.is_some() || self.successor.is_some() {
            crate::log_error!("hot upgrade: a new binary is already running");
            self.socks.restore_cloexec();
            return;
        }
        let (ready_r, ready_w) = match ready_pipe() {
            Ok(p) => p,
            Err(e) => {
                crate::log_error!("hot upgrade: pipe failed: {e}");
                self.socks.restore_cloexec();
                return;
            }
        };
        let exec = self.exec_spec(&spec, ready_w.as_raw_fd());
        if let Some(p) = &self.opts.pid_file {
            let _ = std::fs::rename(p, oldbin(p));
        }
        // SAFETY: single-threaded master; the child only execs.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            exec.exec();
        }
        drop(ready_w);
        self.socks.restore_cloexec();
        if let Some(s) = &self.stats {
            listeners::set_cloexec(s.as_raw_fd(), true);
        }
        if let Some(a) = &self.admin {
            listeners::set_cloexec(a.listener_fd(), true);
        }
        if pid < 0 {
            crate::log_error!(
                "hot upgrade: fork failed: {}",
                std::io::Error::last_os_error()
            );
            if let Some(p) = &self.opts.pid_file {
                let _ = std::fs::rename(oldbin(p), p);
            }
        } else {
            self.await_successor(pid, ready_r);
        }
    }

    /// The listening sockets, the stats port's and the admin port's
    /// included, as `WALNUT_LISTENERS` names them; each is left open
    /// across exec until [`Master::upgrade`] is done with the fork.
    fn export_listeners(&self) -> String {
        let mut spec = self.socks.export_for_exec();
        if let Some(s) = &self.stats {
            listeners::set_cloexec(s.as_raw_fd(), false);
            spec.push_str(&format!("{}={}=t;", listeners::STATS_KEY, s.as_raw_fd()));
        }
        if let Some(a) = &self.admin {
            listeners::set_cloexec(a.listener_fd(), false);
            spec.push_str(&format!("{}={}=t;", listeners::ADMIN_KEY, a.listener_fd()));
        }
        spec
    }

    /// The new binary's command line and what it inherits: the listening
    /// sockets (`spec`), the readiness pipe's write end, the counters
    /// region and the migrations under way.
    fn exec_spec(&self, spec: &str, ready_w: RawFd) -> Exec {
        let mut env = vec![
            c_string(format!("{}={}", listeners::INHERIT_ENV, spec)),
            c_string(format!("{READY_ENV}={ready_w}")),
        ];
        // Migrations under way go on in the new binary.
        env.extend(self.export_lineage());
        let mut keep = vec![ready_w];
        if let Some(g) = &self.current {
            keep.push(g.region.fd().as_raw_fd());
            env.push(c_string(format!(
                "{}={}",
                super::counters::PREV_STATS_ENV,
                super::counters::export_spec(&g.region, &g.names)
            )));
        }
        Exec {
            exe: c_string(self.opts.exe.as_os_str().as_encoded_bytes()),
            start_dir: c_string(self.opts.start_dir.as_os_str().as_encoded_bytes()),
            args: self
                .opts
                .args
                .iter()
                .map(|a| c_string(a.as_bytes()))
                .collect(),
            env,
            keep,
        }
    }

    /// The new binary runs as `pid`: wait for its word on the pipe.
    fn await_successor(&mut self, pid: libc::pid_t, ready_r: OwnedFd) {
        self.upgrade_child = Some(pid);
        // SAFETY: making our own pipe end non-blocking.
        unsafe {
            let fl = libc::fcntl(ready_r.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(ready_r.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        self.successor = Some(Successor {
            pipe: ready_r,
            buf: Vec::new(),
            ready_pid: None,
        });
        crate::log_notice!(
            "hot upgrade: started {} as pid {}",
            self.opts.exe.display(),
            pid
        );
    }
}

impl Master {
    /// Read what the new binary says on the readiness pipe.
    pub(super) fn watch_successor(&mut self) {
        let Some(s) = self.successor.as_mut() else {
            return;
        };
        let mut chunk = [0u8; 64];
        let eof = loop {
            // SAFETY: reading into our own buffer from our own pipe.
            let n = unsafe {
                libc::read(
                    s.pipe.as_raw_fd(),
                    chunk.as_mut_ptr() as *mut libc::c_void,
                    chunk.len(),
                )
            };
            match n {
                0 => break true,
                n if n > 0 => s.buf.extend_from_slice(&chunk[..n as usize]),
                _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
                    continue
                }
                _ => break false,
            }
        };
        if s.ready_pid.is_none() {
            if let Some(pid) = std::str::from_utf8(&s.buf)
                .ok()
                .and_then(|t| t.strip_prefix("ready "))
                .and_then(|t| t.split_once('\n'))
                .and_then(|(p, _)| p.parse::<u32>().ok())
            {
                s.ready_pid = Some(pid);
                crate::log_notice!(
                    "hot upgrade: the new master (pid {pid}) is ready and serves the stats and admin ports; send QUIT to this master (pid {}) to hand its clients over to it",
                    std::process::id()
                );
            }
        }
        if !eof {
            return;
        }
        let was_ready = s.ready_pid;
        self.successor = None;
        match was_ready {
            Some(pid) => crate::log_error!(
                "hot upgrade: the new master (pid {pid}) exited; this master serves again"
            ),
            None => crate::log_error!(
                "hot upgrade: the new binary did not start; this master serves on"
            ),
        }
        if let Some(p) = &self.opts.pid_file {
            let _ = std::fs::rename(oldbin(p), p);
        }
    }

    /// On QUIT: the handover socket of a ready new binary (one that was
    /// started but has not said it is ready is given a few seconds).
    pub(super) fn successor_handover(&mut self) -> Option<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            self.watch_successor();
            match &self.successor {
                Some(s) if s.ready() => break,
                Some(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => return None,
            }
        }
        let pid = self.successor.as_ref()?.ready_pid?;
        Some(crate::net::handover::name_for(pid))
    }

    /// The process USR2 forked exited: a failure, unless it only left
    /// its daemon behind (the readiness pipe tells the rest).
    pub(super) fn upgrade_child_exited(&mut self, pid: libc::pid_t, clean: bool, how: &str) {
        if clean {
            crate::log_notice!(
                "hot upgrade: process {pid} exited with code 0 (the new binary runs as a daemon)"
            );
        } else {
            crate::log_error!("hot upgrade: new binary (pid {pid}) {how}");
        }
    }
}

/// `PIDFILE.oldbin`: where the old master's pid goes during a hot upgrade.
pub(super) fn oldbin(p: &Path) -> PathBuf {
    let mut old = p.to_path_buf().into_os_string();
    old.push(".oldbin");
    PathBuf::from(old)
}
