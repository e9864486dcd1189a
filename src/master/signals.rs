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

/// Restore default dispositions (in a freshly forked worker before it
/// installs its own handling).
pub fn reset() {
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
