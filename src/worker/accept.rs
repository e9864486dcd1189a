//! How a worker takes its share of new connections, in the three listener
//! modes (as nginx's ngx_event_accept.c does it):
//!
//! - `reuseport`: the worker has listening sockets of its own (the kernel
//!   spreads connections); they are registered normally.
//! - `epoll_exclusive`: every worker watches the same sockets with
//!   EPOLLEXCLUSIVE, so the kernel wakes one waiter per connection.
//! - `accept_mutex`: a non-blocking try-lock in shared memory; only the
//!   holder watches the listening sockets. A worker with clearly more
//!   clients than the average skips the lock so others catch up.

use crate::config::ListenerMode;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// The accept mutex: one word in shared memory holding the owner's pid.
pub struct AcceptMutex {
    ptr: *mut AtomicU64,
}

// SAFETY: only accessed through the atomic.
unsafe impl Send for AcceptMutex {}
// SAFETY: only accessed through the atomic.
unsafe impl Sync for AcceptMutex {}

impl AcceptMutex {
    /// Map a fresh unlocked mutex shared with children forked later.
    pub fn new() -> std::io::Result<AcceptMutex> {
        let ptr = crate::util::shared_page()?;
        Ok(AcceptMutex {
            ptr: ptr as *mut AtomicU64,
        })
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the page stays mapped for the life of self.
        unsafe { &*self.ptr }
    }

    /// Try to take the lock for `pid`; true if now held by `pid`.
    pub fn try_lock(&self, pid: u64) -> bool {
        match self
            .word()
            .compare_exchange(0, pid, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => true,
            Err(owner) => owner == pid,
        }
    }

    /// Release the lock if `pid` holds it.
    pub fn unlock(&self, pid: u64) {
        let _ = self
            .word()
            .compare_exchange(pid, 0, Ordering::Release, Ordering::Relaxed);
    }

    /// The master releases a lock a dead worker held (nginx does the same).
    pub fn force_unlock_if(&self, pid: u64) {
        self.unlock(pid)
    }
}

impl Drop for AcceptMutex {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `new`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, 4096);
        }
    }
}

/// A worker's accept policy.
pub struct AcceptPolicy<'a> {
    /// Listener mode.
    pub mode: ListenerMode,
    /// The shared mutex (accept_mutex mode).
    pub mutex: Option<&'a AcceptMutex>,
    /// How long to sleep before trying the mutex again.
    pub delay: std::time::Duration,
    /// This worker holds the mutex.
    pub held: bool,
    /// Listeners are registered with epoll.
    pub registered: bool,
}

impl<'a> AcceptPolicy<'a> {
    /// Policy for one worker.
    pub fn new(mode: ListenerMode, mutex: Option<&'a AcceptMutex>, delay_ms: u64) -> Self {
        AcceptPolicy {
            mode,
            mutex,
            delay: std::time::Duration::from_millis(delay_ms.max(1)),
            held: false,
            registered: false,
        }
    }
}

/// accept_mutex mode: whether a worker holding `mine` clients, of `sum`
/// over `slots` workers, is loaded enough to leave the lock to the others:
/// 1/8 more than the average plus a small constant (as nginx's
/// accept_mutex holds off a worker past 7/8 of its connections).
pub fn loaded(mine: u64, sum: u64, slots: u64) -> bool {
    let avg = sum / slots.max(1);
    slots > 1 && mine > avg + avg / 8 + 4
}

/// `max_connections`: the most clients a worker holds before it stops
/// accepting; it accepts again once below 90% of that.
#[derive(Debug, Default)]
pub struct Cap {
    /// The cap (0: none).
    max: usize,
    /// Accepting is paused at the cap.
    capped: bool,
}

impl Cap {
    /// A cap of `max` clients (0: none).
    pub fn new(max: usize) -> Cap {
        Cap { max, capped: false }
    }

    /// Accepting is paused at the cap.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// A client was just accepted with `open` others already held: true
    /// when that reaches the cap (once, until [`Cap::below`] resumes).
    pub fn reached(&mut self, open: usize) -> bool {
        if self.max == 0 || self.capped || open + 1 < self.max {
            return false;
        }
        self.capped = true;
        true
    }

    /// A client left, `open` are held now: true when a paused worker is
    /// below 90% of the cap and accepts again.
    pub fn below(&mut self, open: usize) -> bool {
        if !self.capped || open * 10 >= self.max * 9 {
            return false;
        }
        self.capped = false;
        true
    }
}

/// epoll_exclusive mode: move this worker's wait entry on a listening
/// socket to the back of the socket's wait queue (delete and add it again).
///
/// The kernel wakes the first exclusive waiter in queue order, so without
/// this an idle worker at the head of the queue takes every connection; after
/// each accept batch the worker that accepted steps to the back and the
/// workers take turns.
pub fn requeue_exclusive(epfd: RawFd, fd: RawFd, token: u64) -> std::io::Result<()> {
    // SAFETY: removing a descriptor this worker added to its own epoll set.
    unsafe {
        libc::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
    }
    add_exclusive(epfd, fd, token)
}

/// Add a listening socket to an epoll set with EPOLLEXCLUSIVE (mio has no
/// flag for it). The event's data is the token, as mio reads it back.
pub fn add_exclusive(epfd: RawFd, fd: RawFd, token: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
        u64: token,
    };
    // SAFETY: valid epoll and socket descriptors and a valid event struct.
    let rc = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_pauses_once_and_resumes_below_ninety_percent() {
        let mut cap = Cap::new(10);
        assert!(!cap.reached(7), "the 9th client is under the cap");
        assert!(cap.reached(9), "the 10th reaches it");
        assert!(cap.capped());
        assert!(!cap.reached(10), "reported once");
        assert!(!cap.below(9), "90% is not below 90%");
        assert!(cap.capped());
        assert!(cap.below(8));
        assert!(!cap.capped());
        assert!(!cap.below(0), "not paused: nothing to resume");
    }

    #[test]
    fn no_cap_never_pauses() {
        let mut cap = Cap::new(0);
        assert!(!cap.reached(0));
        assert!(!cap.reached(1_000_000));
        assert!(!cap.capped());
    }

    #[test]
    fn a_worker_well_above_the_average_leaves_the_mutex() {
        // Alone, a worker always takes the lock.
        assert!(!loaded(1000, 1000, 1));
        // Four workers, 400 clients: average 100, threshold 100 + 12 + 4.
        assert!(!loaded(116, 400, 4));
        assert!(loaded(117, 400, 4));
        // Two workers, all clients on one: the constant lets it take a
        // few before it steps back.
        assert!(!loaded(8, 8, 2));
        assert!(loaded(9, 9, 2));
        // No slots reported: no division by zero.
        assert!(!loaded(0, 0, 0));
    }
}
