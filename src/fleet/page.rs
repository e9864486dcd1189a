//! The fleet page: one shared anonymous mapping, made by the master before
//! it forks anything, in which the fleet agent says until when this
//! instance may route a `migration: true` pool (its lease is known alive
//! and the master runs the configuration etcd holds), and workers read it.
//!
//! The agent writes `in_step_until` = the moment it sent a keepalive that
//! etcd then answered, plus the lease TTL: etcd cannot let the lease end
//! before then, so the other members cannot count this one out (and pass
//! a barrier without it, `agent.rs`) before its workers stop routing those
//! pools. A frozen instance (SIGSTOP), or one cut off from etcd, finds the
//! moment passed when it runs again and refuses their requests until its
//! agent has renewed the lease or registered again and the master has
//! applied the configuration etcd holds, with its placement switch done
//! (no older generation of its own still routes requests).

use std::sync::atomic::{AtomicU64, Ordering};

/// Milliseconds of CLOCK_MONOTONIC (the same clock in every process of
/// the machine).
pub fn mono_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid timespec pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A handle on the page (the mapping lives as long as the process).
#[derive(Clone, Copy, Debug)]
pub struct FleetPage {
    words: *const AtomicU64,
}

const IN_STEP_UNTIL: usize = 0;
const HOLD_MS: usize = 1;

impl FleetPage {
    /// Maps a new page, shared with every process forked after this.
    pub fn new() -> std::io::Result<FleetPage> {
        let p = crate::util::shared_page()?;
        Ok(FleetPage {
            words: p as *const AtomicU64,
        })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the page holds 512 words, zeroed at mapping, never
        // unmapped; AtomicU64 has u64's layout.
        unsafe { &*self.words.add(i) }
    }

    /// Until when (`mono_ms`) this instance is known in step.
    pub fn in_step_until(&self) -> u64 {
        self.word(IN_STEP_UNTIL).load(Ordering::Acquire)
    }

    /// The agent: in step until `ms`.
    pub fn set_in_step_until(&self, ms: u64) {
        self.word(IN_STEP_UNTIL).store(ms, Ordering::Release);
    }

    /// How long a request may wait for the fleet (`--fleet-hold`, ms; 0:
    /// refused at once), see `worker/fleet_hold.rs`.
    pub fn hold_ms(&self) -> u64 {
        self.word(HOLD_MS).load(Ordering::Relaxed)
    }

    /// The master, before it forks: the bound of a wait for the fleet.
    pub fn set_hold_ms(&self, ms: u64) {
        self.word(HOLD_MS).store(ms, Ordering::Relaxed);
    }

    /// Whether a `migration: true` pool may be routed now.
    pub fn in_step(&self) -> bool {
        mono_ms() < self.in_step_until()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_across_fork() {
        let page = FleetPage::new().unwrap();
        assert!(!page.in_step());
        // SAFETY: the child only stores a word and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            page.set_hold_ms(1500);
            page.set_in_step_until(mono_ms() + 60_000);
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(page.in_step());
        assert_eq!(page.hold_ms(), 1500);
        page.set_in_step_until(mono_ms().saturating_sub(1));
        assert!(!page.in_step());
    }
}
