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
