//! Process titles: a worker rewrites its argument area so `ps` and
//! `pgrep -f` show `walnut: worker N`, while the master keeps the command
//! line it was started with (tools find the master by it).

/// Overwrite this process's command line (as seen in /proc/PID/cmdline)
/// with `title`, truncated to the original argument area.
pub fn set(title: &str) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the parenthesised command name; arg_start and arg_end
    // are fields 48 and 49 (1-based) of the whole line.
    let Some(close) = stat.rfind(')') else { return };
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let (Some(start), Some(end)) = (
        fields.get(45).and_then(|s| s.parse::<usize>().ok()),
        fields.get(46).and_then(|s| s.parse::<usize>().ok()),
    ) else {
        return;
    };
    if end <= start + 1 {
        return;
    }
    let len = end - start;
    let bytes = title.as_bytes();
    let n = bytes.len().min(len - 1);
    // SAFETY: [start, end) is this process's own argument area on its stack,
    // mapped and writable; nothing in walnut reads argv after startup.
    unsafe {
        let p = start as *mut u8;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, n);
        std::ptr::write_bytes(p.add(n), 0, len - n);
    }
    // The kernel keeps 15 bytes of the name (`comm`): drop the ": " so a
    // worker's index survives ("walnut worker 3").
    let short: Vec<u8> = title.replacen(": ", " ", 1).into_bytes();
    let name = std::ffi::CString::new(&short[..short.len().min(15)]).unwrap_or_default();
    // SAFETY: PR_SET_NAME with a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong);
    }
}
