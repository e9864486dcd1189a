//! Small helpers shared across modules.

/// Microseconds since the Unix epoch.
pub fn epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The text of an OS error as strerror(3) gives it ("Connection refused"),
/// which is what twemproxy puts in its error replies.
pub fn strerror(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            // SAFETY: strerror returns a valid NUL-terminated static string.
            let s = unsafe { std::ffi::CStr::from_ptr(libc::strerror(code)) };
            s.to_string_lossy().into_owned()
        }
        None => e.to_string(),
    }
}

static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Record the process start time (call once at startup).
pub fn mark_start() {
    let _ = START.set(std::time::Instant::now());
}

/// Seconds since `mark_start`.
pub fn uptime_secs() -> u64 {
    START.get().map_or(0, |s| s.elapsed().as_secs())
}
