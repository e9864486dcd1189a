//! Signal handling as nginx does it: handlers only record which signal
//! arrived; the loops act on the records.

use std::sync::atomic::{AtomicU64, Ordering};

static PENDING: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    if (0..64).contains(&sig) {
        PENDING.fetch_or(1u64 << sig, Ordering::SeqCst);
    }
}

/// Signals walnut handles.
pub const HANDLED: &[libc::c_int] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGCHLD,
    // From the fleet agent: it wrote the go file (`master/fleet.rs`).
    libc::SIGURG,
];

/// Signals that end the process with a core dump: logged by name (as
/// twemproxy logs every signal it gets), then their default action.
pub const FATAL: &[libc::c_int] = &[
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// Seconds east of UTC at startup, so the fatal handler can print local
/// time without calling localtime (not async-signal-safe).
static UTC_OFFSET: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// A small stack buffer a signal handler formats into (no allocation).
struct Line {
    buf: [u8; 160],
    len: usize,
}

impl Line {
    fn push(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }
    fn num(&mut self, mut v: u64, width: usize) {
        let mut d = [b'0'; 20];
        let mut i = d.len();
        while v > 0 || d.len() - i < width.max(1) {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        self.push(&d[i..]);
    }
}

/// Civil date of a day count since 1970-01-01 (Howard Hinnant's
/// days-to-civil): pure arithmetic, safe in a signal handler.
fn civil(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The handler of the fatal signals: one log line in the format of the
/// others (`[date time] pid role: received SIGSEGV, dumping core`), written
/// with async-signal-safe calls only, then the signal again with its
/// default action (SA_RESETHAND restored it), which dumps core. A fault
/// (not a `kill`) would also re-fault on return; raising makes both the same.
extern "C" fn on_fatal(sig: libc::c_int) {
    let mut l = Line {
        buf: [0; 160],
        len: 0,
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime and getpid are async-signal-safe.
    let pid = unsafe {
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
        libc::getpid()
    };
    let local = ts.tv_sec + UTC_OFFSET.load(Ordering::Relaxed);
    let (y, mo, d) = civil(local.div_euclid(86_400));
    let secs = local.rem_euclid(86_400) as u64;
    l.push(b"[");
    l.num(y as u64, 4);
    l.push(b"-");
    l.num(mo, 2);
    l.push(b"-");
    l.num(d, 2);
    l.push(b" ");
    l.num(secs / 3600, 2);
    l.push(b":");
    l.num(secs / 60 % 60, 2);
    l.push(b":");
    l.num(secs % 60, 2);
    l.push(b".");
    l.num((ts.tv_nsec / 1_000_000) as u64, 3);
    l.push(b"] ");
    l.num(pid as u64, 1);
    let role = crate::log::role();
    if role < 0 {
        l.push(b" master: received ");
    } else {
        l.push(b" worker ");
        l.num(role as u64, 1);
        l.push(b": received ");
    }
    l.push(name(sig).as_bytes());
    l.push(b", dumping core\n");
    // SAFETY: write(2) and raise(3) are async-signal-safe; the buffer is
    // valid for its length. The disposition is back to SIG_DFL (SA_RESETHAND).
    unsafe {
        libc::write(
            crate::log::fd(),
            l.buf.as_ptr() as *const libc::c_void,
            l.len,
        );
        libc::raise(sig);
    }
}

/// Install the flag-setting handler for every handled signal, the logging
/// handler for the fatal ones, and ignore SIGPIPE.
pub fn install() {
    install_fatal();
    for &sig in HANDLED {
        // SAFETY: a zeroed sigaction with a plain handler is valid; the
        // handler only does an atomic or.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    // SAFETY: ignoring SIGPIPE so writes to closed sockets return EPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

fn handled_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set; sigaddset with valid signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &sig in HANDLED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Block the handled signals: the master takes them only while waiting in
/// [`wait`], so one arriving between two checks is never left unseen until
/// the next timeout.
pub fn block() {
    let set = handled_set();
    // SAFETY: changing this (single-threaded) process's signal mask.
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Unblock the handled signals (a forked worker, or before exec).
pub fn unblock() {
    let set = handled_set();
    // SAFETY: changing this process's signal mask.
    unsafe {
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Wait up to `timeout_ms` for one of `pfds` to be readable or a handled signal to
/// arrive (signals are unblocked only during the wait). True when `fd` is
/// readable.
pub fn wait(pfds: &mut [libc::pollfd], timeout_ms: u64) -> bool {
    let ts = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: ((timeout_ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: an empty mask built by sigprocmask's query plus removal of
    // the handled signals; ppoll on one pollfd (ignored when fd is -1).
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask);
        for &sig in HANDLED {
            libc::sigdelset(&mut mask, sig);
        }
        let rc = libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &ts, &mask);
        if rc > 0 {
            // ppoll that returns descriptors restores the mask before a
            // pending signal is taken: take it now, or a descriptor that
            // stays ready (a dead worker's channel until SIGCHLD reaps
            // it) would keep it pending forever.
            let set = handled_set();
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        rc > 0 && pfds.iter().any(|p| p.revents & libc::POLLIN != 0)
    }
}

/// Log-then-die handling of [`FATAL`] signals, on the alternate signal
/// stack when there is one (the Rust runtime sets one up, so a stack
/// overflow is reported too), replacing the runtime's SIGSEGV/SIGBUS
/// handler, which silently ignored a first `kill -SEGV`.
fn install_fatal() {
    // SAFETY: zeroed tm is valid; localtime_r fills it (startup, before
    // any handler can run).
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        UTC_OFFSET.store(tm.tm_gmtoff, Ordering::Relaxed);
    }
    for &sig in FATAL {
        // SAFETY: a zeroed sigaction with a plain handler is valid; the
        // handler uses async-signal-safe calls only.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fatal as *const () as usize;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Restore default dispositions (in a freshly forked worker before it
/// installs its own handling), unblock them, and let SIGSEGV and SIGBUS
/// kill the process as they would a C program (the runtime's stack-overflow
/// handler would otherwise swallow a first `kill -SEGV`).
pub fn reset() {
    unblock();
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        // SAFETY: resetting a signal to its default disposition.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    for &sig in HANDLED {
        // SAFETY: resetting a signal to its default disposition.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    PENDING.store(0, Ordering::SeqCst);
}

/// Take the set of signals received since the last call.
pub fn take() -> u64 {
    PENDING.swap(0, Ordering::SeqCst)
}

/// Whether `sig` is in a set returned by `take`.
pub fn has(set: u64, sig: libc::c_int) -> bool {
    set & (1u64 << sig) != 0
}

/// The signal's name, for logs.
pub fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGURG => "SIGURG",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(19_782), (2024, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31));
    }

    #[test]
    fn line_numbers_are_padded() {
        let mut l = Line {
            buf: [0; 160],
            len: 0,
        };
        l.num(7, 2);
        l.num(0, 3);
        l.num(12345, 1);
        assert_eq!(&l.buf[..l.len], b"0700012345");
    }
}
