//! A migration's state and counters in a small shared mapping: written by
//! the migrator process, read by the master (admin `migration`,
//! `/metrics`), and words the master writes that the migrator reads
//! between keys: the operator's control (pause, resume, abort) and how
//! many requests the pool's clients have sent (for the pace).
//!
//! Layout: [`HEADER`] words of the pool's state and counters, then
//! [`PER_SOURCE`] words (scanned, moved) for each server the migrator
//! walks, in the order of `Plan::sources` (the master and the migrator
//! compute the same list from the same configurations, so the mapping's
//! size is fixed when it is made, before the fork).

use std::sync::atomic::{AtomicU64, Ordering};

/// Where a migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not started yet.
    Pending = 0,
    /// Moving keys.
    Running = 1,
    /// Paused by the operator.
    Paused = 2,
    /// Every key that had to move did.
    Done = 3,
    /// Stopped by the operator (workers keep pulling keys on demand).
    Aborted = 4,
}

impl State {
    /// Its name (admin, logs, `/metrics` label).
    pub fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Paused => "paused",
            State::Done => "done",
            State::Aborted => "aborted",
        }
    }
}

const STATE: usize = 0;
const CONTROL: usize = 1;
const SCANNED: usize = 2;
const MOVED: usize = 3;
const SKIPPED: usize = 4;
const FAILED: usize = 5;
const BYTES: usize = 6;
const STARTED: usize = 7;
const ENDED: usize = 8;
const TOTAL: usize = 9;
const CLIENTS: usize = 10;
const PACE: usize = 11;
const PACE_CLIENTS: usize = 12;
const HEADER: usize = 16;
const PER_SOURCE: usize = 2;
const SRC_SCANNED: usize = 0;
const SRC_MOVED: usize = 1;

const CTL_RUN: u64 = 0;
const CTL_PAUSE: u64 = 1;
const CTL_ABORT: u64 = 2;

/// One migration's shared words.
pub struct Progress {
    ptr: *mut AtomicU64,
    /// Servers walked (per-source words after the header).
    sources: usize,
}

// SAFETY: only accessed through atomics.
unsafe impl Send for Progress {}
// SAFETY: only accessed through atomics.
unsafe impl Sync for Progress {}

impl Progress {
    /// A zeroed shared mapping for a migration walking `sources` servers
    /// (made before the migrator is forked).
    pub fn new(sources: usize) -> std::io::Result<Progress> {
        let ptr = crate::util::shared_zeroed(Self::bytes(sources))?;
        Ok(Progress {
            ptr: ptr as *mut AtomicU64,
            sources,
        })
    }

    fn bytes(sources: usize) -> usize {
        (HEADER + PER_SOURCE * sources) * 8
    }

    fn w(&self, i: usize) -> &AtomicU64 {
        assert!(i < HEADER + PER_SOURCE * self.sources);
        // SAFETY: inside the mapping, u64-aligned (page-aligned base).
        unsafe { &*self.ptr.add(i) }
    }

    fn get(&self, i: usize) -> u64 {
        self.w(i).load(Ordering::Relaxed)
    }

    fn add(&self, i: usize, n: u64) {
        self.w(i).fetch_add(n, Ordering::Relaxed);
    }

    /// Current state.
    pub fn state(&self) -> State {
        match self.get(STATE) {
            1 if self.get(CONTROL) == CTL_PAUSE => State::Paused,
            1 => State::Running,
            2 => State::Paused,
            3 => State::Done,
            4 => State::Aborted,
            _ => State::Pending,
        }
    }

    /// Set by the migrator.
    pub fn set_state(&self, s: State) {
        self.w(STATE).store(s as u64, Ordering::Relaxed);
        let now = crate::util::epoch_us() / 1_000_000;
        match s {
            State::Running if self.get(STARTED) == 0 => {
                self.w(STARTED).store(now, Ordering::Relaxed)
            }
            State::Done | State::Aborted => self.w(ENDED).store(now, Ordering::Relaxed),
            _ => {}
        }
    }

    fn src(&self, source: usize, field: usize) -> usize {
        assert!(source < self.sources);
        HEADER + PER_SOURCE * source + field
    }

    /// Keys looked at on source server `source` (index in
    /// `Plan::sources`).
    pub fn add_scanned(&self, source: usize, n: u64) {
        self.add(SCANNED, n);
        self.add(self.src(source, SRC_SCANNED), n);
    }
    /// Keys moved from source server `source`, and their bytes.
    pub fn add_moved(&self, source: usize, n: u64, bytes: u64) {
        self.add(MOVED, n);
        self.add(BYTES, bytes);
        self.add(self.src(source, SRC_MOVED), n);
    }

    /// (scanned, moved) of source server `source`.
    pub fn source_counts(&self, source: usize) -> [u64; 2] {
        [
            self.get(self.src(source, SRC_SCANNED)),
            self.get(self.src(source, SRC_MOVED)),
        ]
    }
    /// Keys that stay (or were gone, or newer on the new owner).
    pub fn add_skipped(&self, n: u64) {
        self.add(SKIPPED, n);
    }
    /// Keys (or servers) that could not be moved.
    pub fn add_failed(&self, n: u64) {
        self.add(FAILED, n);
    }

    /// Keys on the servers walked, when the migration began (the
    /// estimate its ETA is made from).
    pub fn set_total(&self, n: u64) {
        self.w(TOTAL).store(n, Ordering::Relaxed);
    }

    /// Requests the pool's clients sent, as the master saw them in its
    /// workers' counters since the last call (it adds them up across
    /// reloads, whose workers count afresh).
    pub fn add_client_requests(&self, n: u64) {
        self.add(CLIENTS, n);
    }

    /// Requests the pool's clients sent since the migration was set up
    /// (read by the migrator's pace).
    pub fn client_requests(&self) -> u64 {
        self.get(CLIENTS)
    }

    /// The pace now (keys a second), and whether it counts the pool as
    /// having clients (set by the migrator at each sample).
    pub fn set_pace(&self, rate: u64, clients: bool) {
        self.w(PACE).store(rate, Ordering::Relaxed);
        self.w(PACE_CLIENTS)
            .store(u64::from(clients), Ordering::Relaxed);
    }

    /// What [`Progress::set_pace`] set last.
    pub fn pace(&self) -> (u64, bool) {
        (self.get(PACE), self.get(PACE_CLIENTS) == 1)
    }

    /// Operator control: pause, resume, abort.
    pub fn control(&self, what: &str) -> Result<(), String> {
        let v = match what {
            "pause" => CTL_PAUSE,
            "resume" => CTL_RUN,
            "abort" => CTL_ABORT,
            _ => {
                return Err(format!(
                    "unknown migration command '{what}' (pause, resume, abort)"
                ))
            }
        };
        self.w(CONTROL).store(v, Ordering::Relaxed);
        Ok(())
    }

    /// The operator paused it.
    pub fn paused(&self) -> bool {
        self.get(CONTROL) == CTL_PAUSE
    }

    /// The operator aborted it.
    pub fn aborted(&self) -> bool {
        self.get(CONTROL) == CTL_ABORT
    }

    /// (scanned, moved, skipped, failed, bytes).
    pub fn counts(&self) -> [u64; 5] {
        [
            self.get(SCANNED),
            self.get(MOVED),
            self.get(SKIPPED),
            self.get(FAILED),
            self.get(BYTES),
        ]
    }

    /// Seconds since it began (to its end, once ended).
    fn seconds(&self) -> u64 {
        let (started, ended) = (self.get(STARTED), self.get(ENDED));
        if started == 0 {
            0
        } else if ended >= started {
            ended - started
        } else {
            (crate::util::epoch_us() / 1_000_000).saturating_sub(started)
        }
    }

    /// Keys moved a second, on average since it began.
    pub fn rate(&self) -> u64 {
        let moved = self.get(MOVED);
        moved.checked_div(self.seconds()).unwrap_or(moved)
    }

    /// Seconds left, estimated from the keys there were to walk and the
    /// pace so far (0 once every key was looked at once).
    pub fn eta(&self) -> u64 {
        let (scanned, total, secs) = (self.get(SCANNED), self.get(TOTAL), self.seconds());
        if self.state() == State::Done || scanned >= total || scanned == 0 {
            return 0;
        }
        (total - scanned).saturating_mul(secs.max(1)) / scanned
    }

    /// One `key=value` line for the admin port.
    pub fn line(&self, pool: &str) -> String {
        let [scanned, moved, skipped, failed, bytes] = self.counts();
        let secs = self.seconds();
        let rate = self.rate();
        let (pace, clients) = self.pace();
        format!(
            "pool={pool} state={} keys={} scanned={scanned} moved={moved} skipped={skipped} failed={failed} bytes={bytes} seconds={secs} keys_per_second={rate} eta_seconds={} pace={pace} clients={}",
            self.state().name(),
            self.get(TOTAL),
            self.eta(),
            u8::from(clients)
        )
    }

    /// One `key=value` line per source server for the admin port, after
    /// the pool's: `source=ADDR pool=NAME scanned=N moved=N` (`source=`
    /// first, so that a reader looking for the pool's line by its first
    /// field does not take these for it).
    pub fn source_lines(&self, pool: &str, names: &[String]) -> Vec<String> {
        names
            .iter()
            .take(self.sources)
            .enumerate()
            .map(|(i, n)| {
                let [scanned, moved] = self.source_counts(i);
                format!("source={n} pool={pool} scanned={scanned} moved={moved}")
            })
            .collect()
    }

    /// The same as fields of the pool's object in the stats JSON (flat
    /// scalars: tools read object-valued keys of a pool as its servers).
    pub fn json_fields(&self) -> String {
        let [scanned, moved, skipped, failed, bytes] = self.counts();
        let (pace, clients) = self.pace();
        format!(
            "\"migration_state\":\"{}\", \"migration_keys\":{}, \"migration_scanned\":{scanned}, \"migration_moved\":{moved}, \"migration_skipped\":{skipped}, \"migration_failed\":{failed}, \"migration_bytes\":{bytes}, \"migration_seconds\":{}, \"migration_eta_seconds\":{}, \"migration_pace\":{pace}, \"migration_clients\":{}",
            self.state().name(),
            self.get(TOTAL),
            self.seconds(),
            self.eta(),
            u8::from(clients)
        )
    }

    /// Log the progress.
    pub fn log(&self, pool: &str) {
        crate::log_notice!("migration: {}", self.line(pool));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, Self::bytes(self.sources));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_control() {
        let p = Progress::new(2).unwrap();
        assert_eq!(p.state(), State::Pending);
        p.set_state(State::Running);
        p.add_scanned(0, 2);
        p.add_scanned(1, 1);
        p.add_moved(1, 2, 100);
        p.add_skipped(1);
        assert_eq!(p.counts(), [3, 2, 1, 0, 100]);
        assert_eq!(p.source_counts(0), [2, 0]);
        assert_eq!(p.source_counts(1), [1, 2]);
        assert_eq!(
            p.source_lines("x", &["a:1".into(), "b:2".into()]),
            [
                "source=a:1 pool=x scanned=2 moved=0",
                "source=b:2 pool=x scanned=1 moved=2"
            ]
        );
        p.control("pause").unwrap();
        assert_eq!(p.state(), State::Paused);
        assert!(p.paused());
        p.control("resume").unwrap();
        assert_eq!(p.state(), State::Running);
        p.control("abort").unwrap();
        assert!(p.aborted());
        assert!(p.control("explode").is_err());
        p.set_state(State::Done);
        assert!(p
            .line("x")
            .starts_with("pool=x state=done keys=0 scanned=3 moved=2"));
    }
}
