//! Hot upgrade (nginx's USR2): the master forks and execs the binary it
//! was started from, handing down its listening sockets; the pid file moves
//! to `PIDFILE.oldbin` meanwhile.

use super::{listeners, signals, Master};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

impl Master {
    /// Exec a new binary that inherits the listening sockets (nginx's USR2).
    pub(super) fn upgrade(&mut self) {
        let mut spec = self.socks.export_for_exec();
        if let Some(s) = &self.stats {
            listeners::set_cloexec(s.as_raw_fd(), false);
            spec.push_str(&format!("{}={}=t;", listeners::STATS_KEY, s.as_raw_fd()));
        }
        let exe = std::ffi::CString::new(self.opts.exe.as_os_str().as_encoded_bytes())
            .unwrap_or_default();
        let args: Vec<std::ffi::CString> = self
            .opts
            .args
            .iter()
            .map(|a| std::ffi::CString::new(a.as_bytes()).unwrap_or_default())
            .collect();
        let env_kv = std::ffi::CString::new(format!("{}={}", listeners::INHERIT_ENV, spec))
            .unwrap_or_default();
        if self.upgrade_child.is_some() {
            crate::log_error!("hot upgrade: a new binary is already running");
            return;
        }
        if let Some(p) = &self.opts.pid_file {
            let _ = std::fs::rename(p, oldbin(p));
        }
        // SAFETY: single-threaded master; the child only execs.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
            argv.push(std::ptr::null());
            // SAFETY: putenv with a string that lives until exec; execv with
            // NUL-terminated argv.
            signals::unblock();
            unsafe {
                libc::putenv(env_kv.as_ptr() as *mut libc::c_char);
                libc::execv(exe.as_ptr(), argv.as_ptr());
                libc::_exit(1);
            }
        }
        self.socks.restore_cloexec();
        if let Some(s) = &self.stats {
            listeners::set_cloexec(s.as_raw_fd(), true);
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
            self.upgrade_child = Some(pid);
            crate::log_notice!(
                "hot upgrade: started {} as pid {}",
                self.opts.exe.display(),
                pid
            );
        }
    }
}

/// `PIDFILE.oldbin`: where the old master's pid goes during a hot upgrade.
pub(super) fn oldbin(p: &Path) -> PathBuf {
    let mut old = p.to_path_buf().into_os_string();
    old.push(".oldbin");
    PathBuf::from(old)
}
