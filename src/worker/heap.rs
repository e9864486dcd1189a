//! Giving freed heap back to the kernel after many clients have gone.
//!
//! A closed client's memory returns to the C allocator, which keeps it for
//! reuse: glibc only shrinks the top of its heap, so after a crowd of
//! clients leaves, a worker's RSS stays near its peak. Once a second the
//! worker compares its connection count with the highest since the last
//! trim; when it has fallen to half or less, by at least `TRIM_MIN_DROP`
//! connections, `malloc_trim(0)` returns the free pages (anywhere in the
//! heap, not only at its top). Rare by construction: it needs a large drop.

/// Fewest connections that must have gone before a trim is worth it.
const TRIM_MIN_DROP: usize = 1024;

/// Highest connection count since the last trim, and the decision.
#[derive(Debug, Default)]
pub struct HeapTrim {
    peak: usize,
}

impl HeapTrim {
    /// Note the current number of connections (called on accept).
    #[inline]
    pub fn seen(&mut self, conns: usize) {
        self.peak = self.peak.max(conns);
    }

    /// Whether `conns` connections, after the peak seen, call for a trim;
    /// if so the peak restarts from `conns`.
    pub fn due(&mut self, conns: usize) -> bool {
        let due = self.peak >= conns + TRIM_MIN_DROP && conns * 2 <= self.peak;
        if due {
            self.peak = conns;
        }
        due
    }
}

/// Return the allocator's free memory to the kernel.
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims the allocator's own free
    // lists; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_after_a_large_drop_only() {
        let mut t = HeapTrim::default();
        t.seen(500);
        assert!(!t.due(0), "fewer than TRIM_MIN_DROP connections went");
        t.seen(10_000);
        assert!(!t.due(6_000), "more than half are still open");
        assert!(t.due(5_000));
        assert!(!t.due(5_000), "the peak restarts after a trim");
        assert!(!t.due(4_000), "1 000 gone is under TRIM_MIN_DROP");
        assert!(t.due(2_000));
    }
}
