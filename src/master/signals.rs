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
];

/// Install the flag-setting handler for every handled signal and ignore SIGPIPE.
pub fn install() {
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
        rc > 0 && pfds.iter().any(|p| p.revents & libc::POLLIN != 0)
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
        _ => "signal",
    }
}
