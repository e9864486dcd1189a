//! The counters region: one shared mapping (a memfd, so a new binary can
//! map it too) created by the master before it forks workers. Each worker
//! owns one slot (a whole number of 128-byte lines, so no two workers share
//! a cache line) and is its only writer; the master sums the slots when
//! asked, without asking anyone. One more slot, the carry, is written by
//! the master alone: what earlier generations and binaries counted (see
//! `carry.rs`), so the sums never go back across a reload or an upgrade.

use super::histogram::{self, Cell, Class, Snapshot};
use super::hotkeys;
use super::slowlog::{self, Ring};
use super::{PoolField, ServerField, WorkerField};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

const LINE_WORDS: usize = 16; // 128 bytes

/// Shape of one worker's slot for a given configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Number of servers of each pool, in config order.
    pub servers_per_pool: Vec<usize>,
    /// Number of prefix routes of each pool (0 but for route pools).
    pub routes_per_pool: Vec<usize>,
    /// First route counter of each pool.
    route_base: Vec<usize>,
    pool_base: usize,
    server_base: Vec<usize>,
    /// First histogram series of each pool's servers.
    hist_server_base: Vec<usize>,
    /// Counters of servers a worker added at run time (Redis Cluster nodes
    /// not in the configuration): written, never reported per server.
    spare_server: usize,
    spare_series: usize,
    hist_base: usize,
    hist_series: usize,
    slowlog_base: usize,
    hot_base: usize,
    slot_words: usize,
}

impl Layout {
    /// Words of one slot.
    pub(super) fn slot_words(&self) -> usize {
        self.slot_words
    }
    /// Number of histogram series.
    pub(super) fn hist_series(&self) -> usize {
        self.hist_series
    }
}

impl Layout {
    /// What a layout is made of, as a number: a region can only be read
    /// with the layout it was written with, so a binary hands its region
    /// to its successor with this (`PREV_STATS_ENV`), and a successor
    /// that counts other fields, or lays them out otherwise, does not
    /// read it.
    pub fn schema() -> u64 {
        let mut text = String::from("layout 2");
        for f in WorkerField::ALL {
            text.push_str(f.name());
        }
        text.push('|');
        for f in PoolField::ALL {
            text.push_str(f.name());
        }
        text.push('|');
        for f in ServerField::ALL {
            text.push_str(f.name());
        }
        let sizes = [
            Class::COUNT,
            histogram::WINDOWS,
            histogram::WORDS,
            slowlog::WORDS,
            hotkeys::POOL_WORDS,
            LINE_WORDS,
        ];
        text.push_str(&format!("|{sizes:?}"));
        // FNV-1a, 64 bits: the same number from every build.
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// Layout for pools with the given server and route counts.
    pub fn new(servers_per_pool: Vec<usize>, routes_per_pool: Vec<usize>) -> Layout {
        let pool_base = WorkerField::COUNT;
        let mut next = pool_base + servers_per_pool.len() * PoolField::COUNT;
        let mut server_base = Vec::with_capacity(servers_per_pool.len());
        for n in &servers_per_pool {
            server_base.push(next);
            next += n * ServerField::COUNT;
        }
        let spare_server = next;
        next += ServerField::COUNT;
        // Histograms: per pool and class, then per server, each in the
        // lifetime window and two halves; then the slow-log ring.
        let hist_base = next.div_ceil(LINE_WORDS) * LINE_WORDS;
        let mut series = servers_per_pool.len() * Class::COUNT;
        let mut hist_server_base = Vec::with_capacity(servers_per_pool.len());
        for n in &servers_per_pool {
            hist_server_base.push(series);
            series += n;
        }
        let spare_series = series;
        series += 1;
        let slowlog_base = hist_base + series * histogram::WINDOWS * histogram::WORDS;
        let hot_base = slowlog_base + slowlog::WORDS;
        // Per-route request counters last.
        let mut next = hot_base + servers_per_pool.len() * hotkeys::POOL_WORDS;
        let mut route_base = Vec::with_capacity(servers_per_pool.len());
        for p in 0..servers_per_pool.len() {
            route_base.push(next);
            next += routes_per_pool.get(p).copied().unwrap_or(0);
        }
        let slot_words = next.div_ceil(LINE_WORDS) * LINE_WORDS;
        Layout {
            routes_per_pool: (0..servers_per_pool.len())
                .map(|p| routes_per_pool.get(p).copied().unwrap_or(0))
                .collect(),
            route_base,
            servers_per_pool,
            pool_base,
            server_base,
            hist_server_base,
            spare_server,
            spare_series,
            hist_base,
            hist_series: series,
            slowlog_base,
            hot_base,
            slot_words,
        }
    }

    pub(super) fn hist_idx(&self, window: usize, series: usize) -> usize {
        self.hist_base + (window * self.hist_series + series) * histogram::WORDS
    }
    pub(super) fn class_series(&self, pool: usize, class: Class) -> usize {
        pool * Class::COUNT + class as usize
    }
    pub(super) fn server_series(&self, pool: usize, server: usize) -> usize {
        match self.servers_per_pool.get(pool) {
            Some(n) if server < *n => self.hist_server_base[pool] + server,
            _ => self.spare_series,
        }
    }

    pub(super) fn worker_idx(&self, f: WorkerField) -> usize {
        f as usize
    }
    pub(super) fn pool_idx(&self, pool: usize, f: PoolField) -> usize {
        self.pool_base + pool * PoolField::COUNT + f as usize
    }
    /// The request counter of route `route` of `pool`.
    pub(super) fn route_idx(&self, pool: usize, route: usize) -> Option<usize> {
        (route < *self.routes_per_pool.get(pool)?).then(|| self.route_base[pool] + route)
    }
    pub(super) fn server_idx(&self, pool: usize, server: usize, f: ServerField) -> usize {
        match self.servers_per_pool.get(pool) {
            Some(n) if server < *n => {
                self.server_base[pool] + server * ServerField::COUNT + f as usize
            }
            _ => self.spare_server + f as usize,
        }
    }
}

/// A shared mapping holding one slot per worker, and the carry slot.
pub struct Region {
    ptr: *mut AtomicU64,
    words: usize,
    slots: usize,
    layout: Layout,
    /// The memfd behind the mapping (handed to a new binary on upgrade).
    fd: OwnedFd,
    /// Mapped read-only (a previous binary's region).
    read_only: bool,
}

// SAFETY: the region is only accessed through atomics.
unsafe impl Send for Region {}
// SAFETY: the region is only accessed through atomics.
unsafe impl Sync for Region {}

impl Region {
    /// Map a zeroed region for `slots` workers (and the carry slot),
    /// shared across fork.
    pub fn new(layout: Layout, slots: usize) -> std::io::Result<Region> {
        let slots = slots.max(1);
        let words = layout.slot_words * (slots + 1);
        let bytes = words * std::mem::size_of::<AtomicU64>();
        // SAFETY: memfd_create with a NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"walnut-stats".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Self::map(fd, layout, slots, false)
    }

    /// Map the region of a previous binary (read-only): `slots` workers
    /// and its carry slot, in `layout`.
    pub fn open(fd: OwnedFd, layout: Layout, slots: usize) -> std::io::Result<Region> {
        let words = layout.slot_words * (slots.max(1) + 1);
        // Its size, through a `File` of the same descriptor (no copy of it).
        let file = std::fs::File::from(fd);
        let size = file.metadata()?.len();
        let fd = OwnedFd::from(file);
        if size < (words * std::mem::size_of::<AtomicU64>()) as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "inherited stats region is smaller than its layout",
            ));
        }
        Self::map(fd, layout, slots.max(1), true)
    }

    fn map(fd: OwnedFd, layout: Layout, slots: usize, read_only: bool) -> std::io::Result<Region> {
        let words = layout.slot_words * (slots + 1);
        let bytes = words * std::mem::size_of::<AtomicU64>();
        let prot = if read_only {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // SAFETY: shared mapping of our memfd, checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Region {
            ptr: ptr as *mut AtomicU64,
            words,
            slots,
            layout,
            fd,
            read_only,
        })
    }

    /// The memfd behind the mapping.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Index of the carry slot (after the workers' slots).
    pub fn carry_slot(&self) -> usize {
        self.slots
    }

    /// The layout the region was made for.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Number of worker slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    pub(super) fn word(&self, slot: usize, idx: usize) -> &AtomicU64 {
        let i = slot * self.layout.slot_words + idx;
        assert!(i < self.words);
        // SAFETY: `i` is inside the mapping (checked above); AtomicU64 has
        // the alignment of the page-aligned mapping's u64 words.
        unsafe { &*self.ptr.add(i) }
    }

    /// The writer handle for one worker's slot.
    pub fn slot(&self, slot: usize) -> StatsSlot<'_> {
        StatsSlot {
            region: self,
            slot,
            period: std::cell::Cell::new(histogram::period_now()),
        }
    }

    /// Zero one worker's slot (a respawned worker starts from zero gauges;
    /// counters of the dead worker are folded into `retired` by the caller).
    pub fn clear_slot(&self, slot: usize) {
        assert!(!self.read_only);
        for i in 0..self.layout.slot_words {
            self.word(slot, i).store(0, Ordering::Relaxed);
        }
    }

    /// Zero the gauges of a slot whose worker died (its connections are
    /// gone); counters keep what the dead worker counted.
    pub fn reset_gauges(&self, slot: usize) {
        for f in WorkerField::ALL {
            if f.kind() != super::Kind::Counter {
                self.word(slot, self.layout.worker_idx(*f))
                    .store(0, Ordering::Relaxed);
            }
        }
        for p in 0..self.layout.servers_per_pool.len() {
            for f in PoolField::ALL {
                if f.kind() == super::Kind::Gauge {
                    self.word(slot, self.layout.pool_idx(p, *f))
                        .store(0, Ordering::Relaxed);
                }
            }
            for s in 0..self.layout.servers_per_pool[p] {
                for f in ServerField::ALL {
                    if f.kind() == super::Kind::Gauge {
                        self.word(slot, self.layout.server_idx(p, s, *f))
                            .store(0, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Sum of a worker field over all slots.
    pub fn worker_sum(&self, f: WorkerField) -> u64 {
        let idx = self.layout.worker_idx(f);
        self.fold(idx, f.kind())
    }
    /// One worker's value of a worker field.
    pub fn worker_get(&self, slot: usize, f: WorkerField) -> u64 {
        self.word(slot, self.layout.worker_idx(f))
            .load(Ordering::Relaxed)
    }
    /// Sum of a pool field over all slots.
    pub fn pool_sum(&self, pool: usize, f: PoolField) -> u64 {
        self.fold(self.layout.pool_idx(pool, f), f.kind())
    }
    /// Sum of a server field over all slots.
    pub fn server_sum(&self, pool: usize, server: usize, f: ServerField) -> u64 {
        self.fold(self.layout.server_idx(pool, server, f), f.kind())
    }
    /// Requests this region's workers sent to `pool`'s configured
    /// servers: their own slots only, not the carry slot, whose counts
    /// come in steps from other generations (a retired generation's
    /// totals, added at once).
    pub fn pool_requests(&self, pool: usize) -> u64 {
        let servers = self.layout.servers_per_pool.get(pool).copied();
        let mut n = 0u64;
        for s in 0..servers.unwrap_or(0) {
            let idx = self.layout.server_idx(pool, s, ServerField::Requests);
            for slot in 0..self.slots {
                n = n.wrapping_add(self.word(slot, idx).load(Ordering::Relaxed));
            }
        }
        n
    }
    /// Requests of route `route` of `pool` over all slots.
    pub fn route_sum(&self, pool: usize, route: usize) -> u64 {
        self.layout
            .route_idx(pool, route)
            .map_or(0, |i| self.fold(i, super::Kind::Counter))
    }

    pub(super) fn words(&self, slot: usize, idx: usize, len: usize) -> &[AtomicU64] {
        let i = slot * self.layout.slot_words + idx;
        assert!(i + len <= self.words);
        // SAFETY: the range is inside the mapping (checked above).
        unsafe { std::slice::from_raw_parts(self.ptr.add(i), len) }
    }

    fn hist_cell(&self, slot: usize, window: usize, series: usize) -> Cell<'_> {
        Cell(self.words(slot, self.layout.hist_idx(window, series), histogram::WORDS))
    }

    /// Merge a series over every worker: the lifetime histogram, or the
    /// recent window (the halves of the current and previous periods).
    fn hist_merge(&self, series: usize, recent: bool) -> Snapshot {
        let mut snap = Snapshot::default();
        let period = histogram::period_now();
        // The lifetime histograms include the carry slot; the recent
        // window is the live workers' alone.
        for slot in 0..=self.slots {
            if !recent {
                self.hist_cell(slot, 0, series).add_to(&mut snap);
                continue;
            }
            if slot == self.slots {
                break;
            }
            for half in 1..histogram::WINDOWS {
                let c = self.hist_cell(slot, half, series);
                if matches!(c.period(), Some(p) if p + 1 >= period && p <= period) {
                    c.add_to(&mut snap);
                }
            }
        }
        snap
    }

    /// Latency of one command class of a pool, merged over workers.
    pub fn latency_class(&self, pool: usize, class: Class, recent: bool) -> Snapshot {
        self.hist_merge(self.layout.class_series(pool, class), recent)
    }

    /// Latency of a pool (every class), merged over workers.
    pub fn latency_pool(&self, pool: usize, recent: bool) -> Snapshot {
        let mut s = Snapshot::default();
        for c in Class::ALL {
            s.merge(&self.latency_class(pool, c, recent));
        }
        s
    }

    /// Latency of one server, merged over workers.
    pub fn latency_server(&self, pool: usize, server: usize, recent: bool) -> Snapshot {
        self.hist_merge(self.layout.server_series(pool, server), recent)
    }

    /// The slow-log ring of one worker slot.
    pub fn slowlog(&self, slot: usize) -> Ring<'_> {
        Ring(self.words(slot, self.layout.slowlog_base, slowlog::WORDS))
    }

    /// One worker slot's hot-key table of `pool` (see `hotkeys.rs`).
    pub fn hotkeys(&self, slot: usize, pool: usize) -> &[AtomicU64] {
        self.words(
            slot,
            self.layout.hot_base + pool * hotkeys::POOL_WORDS,
            hotkeys::POOL_WORDS,
        )
    }

    fn fold(&self, idx: usize, kind: super::Kind) -> u64 {
        let vals = (0..=self.slots).map(|s| self.word(s, idx).load(Ordering::Relaxed));
        match kind {
            super::Kind::Timestamp => vals.max().unwrap_or(0),
            _ => vals.fold(0u64, |a, b| a.wrapping_add(b)),
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`.
        unsafe {
            libc::munmap(
                self.ptr as *mut libc::c_void,
                self.words * std::mem::size_of::<AtomicU64>(),
            );
        }
    }
}

/// One worker's slot. The worker is the only writer, so updates are a plain
/// load and store (no locked read-modify-write on the hot path).
#[derive(Clone)]
pub struct StatsSlot<'a> {
    region: &'a Region,
    slot: usize,
    /// The window period replies are recorded in, read from the clock once
    /// per event-loop turn ([`StatsSlot::tick`]) rather than once per reply.
    period: std::cell::Cell<u64>,
}

impl StatsSlot<'_> {
    #[inline]
    fn add_at(&self, idx: usize, n: u64) {
        let w = self.region.word(self.slot, idx);
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline]
    fn sub_at(&self, idx: usize, n: u64) {
        let w = self.region.word(self.slot, idx);
        w.store(w.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
    }
    /// Add to a worker field.
    #[inline]
    pub fn worker_add(&self, f: WorkerField, n: u64) {
        self.add_at(self.region.layout.worker_idx(f), n)
    }
    /// Subtract from a worker gauge.
    #[inline]
    pub fn worker_sub(&self, f: WorkerField, n: u64) {
        self.sub_at(self.region.layout.worker_idx(f), n)
    }
    /// Set a worker field.
    #[inline]
    pub fn worker_set(&self, f: WorkerField, v: u64) {
        let idx = self.region.layout.worker_idx(f);
        self.region.word(self.slot, idx).store(v, Ordering::Relaxed)
    }
    /// Count a request of route `route` of `pool`.
    #[inline]
    pub fn route_add(&self, pool: usize, route: usize, n: u64) {
        if let Some(i) = self.region.layout.route_idx(pool, route) {
            self.add_at(i, n)
        }
    }
    /// Add to a pool field.
    #[inline]
    pub fn pool_add(&self, pool: usize, f: PoolField, n: u64) {
        self.add_at(self.region.layout.pool_idx(pool, f), n)
    }
    /// Subtract from a pool gauge.
    #[inline]
    pub fn pool_sub(&self, pool: usize, f: PoolField, n: u64) {
        self.sub_at(self.region.layout.pool_idx(pool, f), n)
    }
    /// Add to a server field.
    #[inline]
    pub fn server_add(&self, pool: usize, server: usize, f: ServerField, n: u64) {
        self.add_at(self.region.layout.server_idx(pool, server, f), n)
    }
    /// Subtract from a server gauge.
    #[inline]
    pub fn server_sub(&self, pool: usize, server: usize, f: ServerField, n: u64) {
        self.sub_at(self.region.layout.server_idx(pool, server, f), n)
    }
    /// A pool field summed over every worker's slot (the pool's
    /// connections through the whole proxy, for Redis `INFO`).
    pub fn pool_total(&self, pool: usize, f: PoolField) -> u64 {
        self.region.pool_sum(pool, f)
    }
    /// Read back a worker field of this slot.
    pub fn get_worker(&self, f: WorkerField) -> u64 {
        let idx = self.region.layout.worker_idx(f);
        self.region.word(self.slot, idx).load(Ordering::Relaxed)
    }
    /// Sum of a worker field over every worker's slot (memcached `stats`
    /// answered by one worker for the whole instance).
    pub fn worker_total(&self, f: WorkerField) -> u64 {
        self.region.worker_sum(f)
    }
    /// Read back a pool field of this slot.
    pub fn get_pool(&self, pool: usize, f: PoolField) -> u64 {
        let idx = self.region.layout.pool_idx(pool, f);
        self.region.word(self.slot, idx).load(Ordering::Relaxed)
    }
    /// Read the clock for the recent window's period (once per event-loop
    /// turn).
    pub fn tick(&self) {
        self.period.set(histogram::period_now());
    }

    /// Record one reply's latency for its pool, class and server, in the
    /// lifetime histograms and the current half of the recent window.
    pub fn record_latency(&self, pool: usize, server: usize, class: Class, us: u64) {
        self.record_latencies(pool, server, class, us, 1);
    }

    /// [`StatsSlot::record_latency`] for `n` replies of the same latency.
    pub fn record_latencies(&self, pool: usize, server: usize, class: Class, us: u64, n: u64) {
        let layout = &self.region.layout;
        let period = self.period.get();
        let half = 1 + (period % 2) as usize;
        let bucket = histogram::bucket_of(us);
        for series in [
            layout.class_series(pool, class),
            layout.server_series(pool, server),
        ] {
            self.region
                .hist_cell(self.slot, 0, series)
                .record_n(us, bucket, n);
            let c = self.region.hist_cell(self.slot, half, series);
            c.enter_period(period);
            c.record_n(us, bucket, n);
        }
    }

    /// This worker's slow-log ring.
    pub fn slowlog(&self) -> Ring<'_> {
        self.region.slowlog(self.slot)
    }

    /// This worker's hot-key tables, every pool's.
    pub fn hotkeys(&self) -> &[AtomicU64] {
        let l = &self.region.layout;
        self.region.words(
            self.slot,
            l.hot_base,
            l.servers_per_pool.len() * hotkeys::POOL_WORDS,
        )
    }

    /// Set a server field (timestamps).
    #[inline]
    pub fn server_set(&self, pool: usize, server: usize, f: ServerField, v: u64) {
        let idx = self.region.layout.server_idx(pool, server, f);
        self.region.word(self.slot, idx).store(v, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_sum_and_are_line_aligned() {
        let layout = Layout::new(vec![2, 3], vec![0, 2]);
        assert_eq!(layout.slot_words % LINE_WORDS, 0);
        let r = Region::new(layout, 2).unwrap();
        r.slot(0).server_add(1, 2, ServerField::Requests, 5);
        r.slot(1).server_add(1, 2, ServerField::Requests, 7);
        r.slot(1).pool_add(0, PoolField::Fragments, 1);
        r.slot(0).server_set(0, 1, ServerField::ServerEjectedAt, 10);
        r.slot(1).server_set(0, 1, ServerField::ServerEjectedAt, 30);
        assert_eq!(r.server_sum(1, 2, ServerField::Requests), 12);
        assert_eq!(r.server_sum(1, 1, ServerField::Requests), 0);
        assert_eq!(r.pool_requests(1), 12);
        assert_eq!(r.pool_requests(0), 0);
        r.slot(r.carry_slot())
            .server_add(1, 2, ServerField::Requests, 100);
        assert_eq!(r.server_sum(1, 2, ServerField::Requests), 112);
        assert_eq!(r.pool_requests(1), 12, "not the carry slot's");
        r.clear_slot(r.carry_slot());
        assert_eq!(r.pool_sum(0, PoolField::Fragments), 1);
        assert_eq!(r.server_sum(0, 1, ServerField::ServerEjectedAt), 30);
        r.clear_slot(1);
        assert_eq!(r.server_sum(1, 2, ServerField::Requests), 5);
        // Route counters: pool 1's two, nothing else written.
        r.slot(0).route_add(1, 1, 4);
        r.slot(1).route_add(1, 1, 2);
        r.slot(1).route_add(1, 2, 9);
        r.slot(1).route_add(0, 0, 9);
        assert_eq!((r.route_sum(1, 0), r.route_sum(1, 1)), (0, 6));
        assert_eq!((r.route_sum(1, 2), r.route_sum(0, 0)), (0, 0));
        assert_eq!(r.server_sum(1, 2, ServerField::Requests), 5);
    }

    #[test]
    fn servers_added_at_run_time_touch_no_configured_counter() {
        let r = Region::new(Layout::new(vec![1, 2], Vec::new()), 1).unwrap();
        for server in 1..40 {
            r.slot(0).server_add(0, server, ServerField::Requests, 1);
            r.slot(0).record_latency(0, server, Class::Read, 100);
        }
        r.slot(0).server_add(1, 2, ServerField::Requests, 1);
        assert_eq!(r.server_sum(0, 0, ServerField::Requests), 0);
        assert_eq!(r.server_sum(1, 0, ServerField::Requests), 0);
        assert_eq!(r.server_sum(1, 1, ServerField::Requests), 0);
        assert_eq!(r.latency_server(0, 0, false).count, 0);
        assert_eq!(r.latency_server(1, 0, false).count, 0);
        assert_eq!(r.latency_server(1, 1, false).count, 0);
    }

    #[test]
    fn latency_merges_over_slots() {
        let r = Region::new(Layout::new(vec![1, 2], Vec::new()), 2).unwrap();
        r.slot(0).record_latency(1, 1, Class::Read, 100);
        r.slot(1).record_latency(1, 1, Class::Write, 300);
        r.slot(1).record_latency(0, 0, Class::Read, 7);
        assert_eq!(r.latency_pool(1, false).count, 2);
        assert_eq!(r.latency_pool(1, true).count, 2);
        assert_eq!(r.latency_class(1, Class::Write, false).max, 300);
        assert_eq!(r.latency_server(1, 1, false).sum, 400);
        assert_eq!(r.latency_server(1, 0, false).count, 0);
        assert_eq!(r.latency_server(0, 0, false).count, 1);
        r.slot(1).slowlog().push(&crate::stats::slowlog::Entry {
            seq: 0,
            time_us: 1,
            pool: 1,
            server: 1,
            latency_us: 300,
            size: 10,
            cmd: "get".into(),
            key: b"k".to_vec(),
        });
        assert_eq!(r.slowlog(1).read(0).len(), 1);
        assert!(r.slowlog(0).read(0).is_empty());
    }
}
