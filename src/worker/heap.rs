//! Giving freed heap back to the kernel after a burst.
//!
//! Memory a worker frees (a crowd of clients gone, the buffers of a
//! million-key MGET) returns to the C allocator, which keeps it for reuse:
//! glibc only shrinks the top of its heap by itself, so RSS would stay near
//! the peak for good. Once a second the worker asks glibc how much free
//! memory it holds (`mallinfo2` sums its free lists); when that grew by
//! `TRIM_ABOVE` since the last trim, `malloc_trim(0)` returns the free
//! pages, anywhere in the heap. Rare by construction: it needs a burst.

/// Growth of the allocator's free memory since the last trim that calls
/// for the next one.
const TRIM_ABOVE: usize = 4 << 20;

/// Free heap bytes left after the last trim: fragments smaller than a page
/// cannot be returned, and must not make every tick trim again.
#[derive(Debug, Default)]
pub struct HeapTrim {
    floor: usize,
    /// Resident bytes right after the last trim.
    resident_after: usize,
    /// Free heap bytes at the last tick.
    last_free: usize,
}

impl HeapTrim {
    /// Trim if the free heap grew enough, or if the process grew again
    /// while holding free heap; returns whether it trimmed. The second
    /// test is needed because a trim returns the pages of free chunks but
    /// leaves the chunks free: the next burst reuses them (touching the
    /// pages again) and frees them, all between two ticks, and the free
    /// heap reads the same before and after, so only the resident size
    /// shows that those pages came back.
    pub fn due(&mut self) -> bool {
        let free = free_heap();
        let regrown = free >= TRIM_ABOVE && resident() > self.resident_after + TRIM_ABOVE;
        let settled = self.settled(free);
        let due = self.decide(free) || regrown || settled;
        if due {
            release();
            self.floor = free_heap();
            self.resident_after = resident();
            self.last_free = self.floor;
        }
        due
    }

    /// Whether a burst is over with free heap the last trim did not see:
    /// the free heap did not move since the last tick, holds at least
    /// `TRIM_ABOVE`, and more than the last trim left. A trim that came in
    /// the middle of a burst (its memory partly freed) saw only part of
    /// it, and what the burst freed after it may not reach the growth
    /// `decide` asks for: it is returned once the burst has settled.
    fn settled(&mut self, free: usize) -> bool {
        let settled = free >= TRIM_ABOVE && free == self.last_free && free > self.floor;
        self.last_free = free;
        settled
    }

    /// The decision alone, given the free heap now.
    fn decide(&mut self, free: usize) -> bool {
        if free > self.floor + TRIM_ABOVE {
            return true;
        }
        self.floor = self.floor.min(free);
        false
    }
}

/// Bytes glibc holds free (0 elsewhere: no trimming there).
fn free_heap() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    unsafe {
        libc::mallinfo2().fordblks
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    0
}

/// Resident bytes of this process (0 when /proc cannot be read): one
/// small read once a second.
fn resident() -> usize {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * usize::try_from(page).unwrap_or(4096)
}

/// Return the allocator's free memory to the kernel.
fn release() {
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
    fn trims_after_growth_only() {
        let mut t = HeapTrim::default();
        assert!(!t.decide(TRIM_ABOVE), "not more than TRIM_ABOVE free");
        assert!(t.decide(TRIM_ABOVE + 1));
        t.floor = 3 << 20;
        assert!(!t.decide(6 << 20), "measured from what the last trim left");
        assert!(!t.decide(1 << 20));
        assert_eq!(t.floor, 1 << 20, "the floor follows the free heap down");
        assert!(t.decide(6 << 20));
    }

    #[test]
    fn what_a_burst_freed_after_a_trim_is_trimmed_once_it_settles() {
        let mut t = HeapTrim {
            floor: 5 << 20,
            ..HeapTrim::default()
        };
        // The rest of a burst freed after a trim in its middle: less
        // than TRIM_ABOVE of growth, and still moving.
        assert!(!t.decide(8 << 20));
        assert!(!t.settled(8 << 20), "moving since the last tick");
        assert!(t.settled(8 << 20), "settled, above what the trim left");
        // Trimmed: that level is the floor now, not trimmed again.
        t.floor = 8 << 20;
        assert!(!t.settled(8 << 20));
        // Little free heap is never worth a trim.
        let mut small = HeapTrim::default();
        assert!(!small.settled(1 << 20));
        assert!(!small.settled(1 << 20));
    }
}
