//! Logging with twemproxy's levels (`-v 0..11`, default 5 = notice) to
//! stderr or a file (`-o`) that can be reopened after rotation.
//!
//! Each process is single-threaded on its data path, so the logger is a pair
//! of atomics (level, descriptor) and one `write(2)` per line: lines from
//! several workers appended to the same file never interleave mid-line.

use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

/// twemproxy's log levels.
pub mod level {
    /// system in unusable
    pub const EMERG: u8 = 0;
    /// immediate action required
    pub const ALERT: u8 = 1;
    /// critical conditions
    pub const CRIT: u8 = 2;
    /// error conditions
    pub const ERR: u8 = 3;
    /// warning conditions
    pub const WARN: u8 = 4;
    /// normal but significant condition (default)
    pub const NOTICE: u8 = 5;
    /// informational
    pub const INFO: u8 = 6;
    /// debug messages
    pub const DEBUG: u8 = 7;
    /// verbose messages
    pub const VERB: u8 = 8;
    /// verbose messages on crack
    pub const VVERB: u8 = 9;
    /// periodic verbose messages on crack
    pub const VVVERB: u8 = 10;
    /// ok, this is the max
    pub const PVERB: u8 = 11;
}

static LEVEL: AtomicU8 = AtomicU8::new(level::NOTICE);
static FD: AtomicI32 = AtomicI32::new(2);
static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
static ROLE: AtomicI32 = AtomicI32::new(-1);
/// A worker's pid, taken once when it learns its role (a worker may log a
/// line per slow request; getpid is a system call each time).
static WORKER_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Current level.
pub fn level() -> u8 {
    LEVEL.load(Ordering::Relaxed)
}

/// Set the level (clamped to 0..=11).
pub fn set_level(l: u8) {
    LEVEL.store(l.min(level::PVERB), Ordering::Relaxed);
}

/// Raise the level by one (SIGTTIN).
pub fn level_up() {
    set_level(level().saturating_add(1));
}

/// Lower the level by one (SIGTTOU).
pub fn level_down() {
    set_level(level().saturating_sub(1));
}

/// Name this process in log lines: -1 master/single, i for worker i.
/// The role of a migrator process (`set_role`).
pub const MIGRATOR: i32 = -2;
/// The role of the fleet agent process (`set_role`).
pub const FLEET_AGENT: i32 = -3;

pub fn set_role(worker: i32) {
    ROLE.store(worker, Ordering::Relaxed);
    WORKER_PID.store(std::process::id(), Ordering::Relaxed);
}

/// This process's role: -1 master (or single process), i for worker i.
pub fn role() -> i32 {
    ROLE.load(Ordering::Relaxed)
}

/// Log to `path` (appending) instead of stderr. Called once at startup,
/// before any other thread or child exists.
pub fn init(path: Option<&std::path::Path>) -> std::io::Result<()> {
    if let Some(p) = path {
        let _ = PATH.set(p.to_path_buf());
        reopen()?;
    }
    Ok(())
}

/// Reopen the log file (after logrotate moved it); no-op on stderr.
pub fn reopen() -> std::io::Result<()> {
    let Some(path) = PATH.get() else {
        return Ok(());
    };
    use std::os::fd::IntoRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let new = file.into_raw_fd();
    let old = FD.swap(new, Ordering::SeqCst);
    if old > 2 {
        // SAFETY: `old` was a log descriptor we opened and no longer use.
        unsafe {
            libc::close(old);
        }
    }
    Ok(())
}

/// The log descriptor, for redirecting a daemon's stderr.
pub fn fd() -> i32 {
    FD.load(Ordering::Relaxed)
}

/// Write one line at `lvl` (use the macros).
pub fn write(lvl: u8, args: std::fmt::Arguments<'_>) {
    if lvl > level() {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, ms) = (now.as_secs() as libc::time_t, now.subsec_millis());
    // SAFETY: zeroed tm is valid; localtime_r fills it from `secs`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    unsafe {
        libc::localtime_r(&secs, &mut tm);
    }
    let role = ROLE.load(Ordering::Relaxed);
    let (pid, who) = if role == MIGRATOR {
        (std::process::id(), String::from("migrator"))
    } else if role == FLEET_AGENT {
        (std::process::id(), String::from("fleet agent"))
    } else if role < 0 {
        (std::process::id(), String::from("master"))
    } else {
        (WORKER_PID.load(Ordering::Relaxed), format!("worker {role}"))
    };
    let line = format!(
        "[{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}] {} {}: {}\n",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ms,
        pid,
        who,
        args
    );
    let fd = FD.load(Ordering::Relaxed);
    // SAFETY: writing a valid buffer to a descriptor we own (or stderr).
    unsafe {
        libc::write(fd, line.as_ptr() as *const libc::c_void, line.len());
    }
}

/// Log whatever the level (twemproxy's `loga`): for lines about logging
/// itself, such as the new level after TTIN/TTOU.
#[macro_export]
macro_rules! log_always { ($($a:tt)*) => { $crate::log::write($crate::log::level::EMERG, format_args!($($a)*)) } }
/// Log at error level.
#[macro_export]
macro_rules! log_error { ($($a:tt)*) => { $crate::log::write($crate::log::level::ERR, format_args!($($a)*)) } }
/// Log at warning level.
#[macro_export]
macro_rules! log_warn { ($($a:tt)*) => { $crate::log::write($crate::log::level::WARN, format_args!($($a)*)) } }
/// Log at notice level (the default).
#[macro_export]
macro_rules! log_notice { ($($a:tt)*) => { $crate::log::write($crate::log::level::NOTICE, format_args!($($a)*)) } }
/// Log at info level.
#[macro_export]
macro_rules! log_info { ($($a:tt)*) => { $crate::log::write($crate::log::level::INFO, format_args!($($a)*)) } }
/// Log at twemproxy's most verbose level, 11 (`-v 11`): per-connection
/// events and parse errors; the arguments are not evaluated below it.
#[macro_export]
macro_rules! log_pverb { ($($a:tt)*) => { if $crate::log::level() >= $crate::log::level::PVERB { $crate::log::write($crate::log::level::PVERB, format_args!($($a)*)) } } }
/// Log at debug level.
#[macro_export]
macro_rules! log_debug { ($($a:tt)*) => { if $crate::log::level() >= $crate::log::level::DEBUG { $crate::log::write($crate::log::level::DEBUG, format_args!($($a)*)) } } }
