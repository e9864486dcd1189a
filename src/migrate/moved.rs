//! The keys a pool's migrator has moved, told to the workers
//! (`MovedKeys`): a bitmap in memory shared by the master, the migrator
//! and the workers of every generation that serves the pool while it
//! migrates (an anonymous shared mapping the master makes with the
//! pool's lineage entry, before it forks them).
//!
//! The migrator sets a key's bit once the key is on its new owner; a
//! worker reading a moved key asks the new owner first when its bit is
//! set, the old owners first otherwise (`worker/migrate.rs`,
//! `PoolRt::moving`). Without it a read guesses by where reads found
//! keys lately, and while a migration runs about one read in five asked
//! the wrong server first, then the other one.
//!
//! Lossy both ways, by design: keys share bits (a hash of the key picks
//! one of [`BITS`]), so a set bit may be another key's; and a bit is set
//! after its key moved, so a read may come between. Either costs a read
//! a second server, never a wrong answer: a read asks every server the
//! key may be on, in turn, until one has it. A member of a fleet sees
//! only its own migrator's bits; keys the others' moved are found as
//! without the map.
//!
//! Written by hand: a few lines of atomics over `mmap`; no crate shares
//! memory across `fork` this way.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits in the map: 512 KiB, touched (hence resident) only where keys
/// moved.
pub const BITS: usize = 1 << 22;
const WORDS: usize = BITS / 64;

/// One migration's map of moved keys (see the module).
pub struct MovedKeys {
    words: *mut AtomicU64,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for MovedKeys {}
// SAFETY: the mapping is only accessed through atomics.
unsafe impl Sync for MovedKeys {}

impl std::fmt::Debug for MovedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MovedKeys")
    }
}

impl MovedKeys {
    /// An empty map, shared with the processes forked after this.
    pub fn new() -> std::io::Result<MovedKeys> {
        let ptr = crate::util::shared_zeroed(WORDS * 8)?;
        Ok(MovedKeys {
            words: ptr as *mut AtomicU64,
        })
    }

    /// The bit of `key`: a hash of the key itself, not of the pool's
    /// placement, so migrator and workers agree whatever the pool's hash,
    /// hash tag or routes.
    fn bit(key: &[u8]) -> usize {
        crate::hash::HashKind::Fnv1a_64.hash(key) as usize % BITS
    }

    fn word(&self, bit: usize) -> &AtomicU64 {
        // SAFETY: bit < BITS, so the word is inside the mapping, which
        // lives as long as `self`.
        unsafe { &*self.words.add(bit / 64) }
    }

    /// `key` is on its new owner now.
    pub fn mark(&self, key: &[u8]) {
        let bit = Self::bit(key);
        self.word(bit).fetch_or(1 << (bit % 64), Ordering::Relaxed);
    }

    /// Whether `key` (or another key of the same bit) was marked.
    pub fn has(&self, key: &[u8]) -> bool {
        let bit = Self::bit(key);
        self.word(bit).load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
    }
}

impl Drop for MovedKeys {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of that size; a forked
        // process keeps its own.
        unsafe {
            libc::munmap(self.words as *mut libc::c_void, WORDS * 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_key_is_seen_by_a_forked_process_and_others_mostly_not() {
        let m = MovedKeys::new().unwrap();
        // Made before the fork: the child of a threaded test process
        // must not allocate.
        let moved: Vec<String> = (0..1000).map(|k| format!("moved:{k}")).collect();
        // SAFETY: the child only marks keys and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            for k in &moved {
                m.mark(k.as_bytes());
            }
            // SAFETY: leave the test's process copy at once.
            unsafe { libc::_exit(0) }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(moved.iter().all(|k| m.has(k.as_bytes())));
        // Keys sharing a bit with a marked one: about 1000 in BITS.
        let shared = (0..100_000)
            .filter(|k| m.has(format!("stayed:{k}").as_bytes()))
            .count();
        assert!(shared < 50, "{shared}");
    }
}
