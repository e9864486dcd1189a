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

/// Free heap memory the allocator may keep beyond what it kept after the
/// last trim before it is handed back.
const TRIM_ABOVE: usize = 4 << 20;

/// Free heap bytes left after the last trim (fragments smaller than a page
/// cannot be returned; they must not make every call trim again).
static TRIMMED_TO: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Give freed heap memory back to the kernel once glibc holds
/// [`TRIM_ABOVE`] more of it unused than after the last trim (after a
/// million-key MGET, say: the allocator would otherwise keep its
/// high-water mark for good). Called from a worker's once-a-second
/// housekeeping; `mallinfo2` only sums the free lists, `malloc_trim` runs
/// only when there is something to return. Returns whether it trimmed.
pub fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::sync::atomic::Ordering::Relaxed;
        // SAFETY: plain glibc calls with no pointer arguments.
        let free = unsafe { libc::mallinfo2() }.fordblks;
        if free > TRIMMED_TO.load(Relaxed) + TRIM_ABOVE {
            // SAFETY: as above.
            unsafe { libc::malloc_trim(0) };
            TRIMMED_TO.store(unsafe { libc::mallinfo2() }.fordblks, Relaxed);
            return true;
        }
        TRIMMED_TO.store(TRIMMED_TO.load(Relaxed).min(free), Relaxed);
    }
    false
}
