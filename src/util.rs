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

/// One page of anonymous memory shared with every process forked after
/// this (zeroed, read and write, never unmapped): the accept mutex and the
/// fleet page live in one each.
pub fn shared_page() -> std::io::Result<*mut u8> {
    shared_zeroed(4096)
}

/// `bytes` of anonymous memory shared with every process forked after
/// this, zeroed, read and write (a migration's progress and its map of
/// moved keys; unmapped by their owners).
pub fn shared_zeroed(bytes: usize) -> std::io::Result<*mut u8> {
    // SAFETY: an anonymous shared mapping; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}
