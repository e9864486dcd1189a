//! Latency histograms: fixed log-linear buckets with two significant
//! decimal digits (HdrHistogram's idea with base-10 sub-buckets), stored as
//! plain u64 counters in the shared counters region. Each histogram has one
//! writer (the worker owning the slot) that updates with load + store, so
//! histograms of different workers can be merged by summing buckets.
//!
//! Values are microseconds. Buckets: one per µs below 100, then 90 per
//! decade (10..99 × 10^k) up to 10^8 µs (100 s); larger values land in the
//! last bucket (the exact maximum is kept separately).
//!
//! Windows: every series has a lifetime histogram and two "halves" that
//! cover alternating periods of [`WINDOW_SECS`]; a writer that enters a new
//! period clears the half it switches to. The recent view sums the halves
//! whose period is the current or the previous one, so it covers the last
//! `WINDOW_SECS` to `2 × WINDOW_SECS` seconds.

use crate::proto::Op;
use std::sync::atomic::{AtomicU64, Ordering};

/// Decades of 90 buckets above the 100 unit buckets.
const DECADES: usize = 6;
/// Number of buckets.
pub const BUCKETS: usize = 100 + 90 * DECADES;
/// Header words: count, sum, max, period.
const HDR: usize = 4;
/// Words one histogram occupies in the shared region.
pub const WORDS: usize = HDR + BUCKETS;
/// Length of one half of the recent window, in seconds.
pub const WINDOW_SECS: u64 = 30;
/// Histogram windows stored per series: lifetime and two halves.
pub const WINDOWS: usize = 3;

/// Prometheus bucket bounds, in µs (`le` is the bound in seconds).
pub const PROM_BOUNDS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Command classes latencies are kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Class {
    /// Single-key reads (get, GET, HGET, ...).
    Read,
    /// Single-key writes (set, delete, SET, INCR, ...).
    Write,
    /// Fragments of multi-key requests (MGET/MSET/DEL/EXISTS, and memcached
    /// `get` with several keys is counted as a read).
    Multi,
    /// Everything else (EVAL, broadcasts, admin-like commands).
    Other,
}

impl Class {
    /// Every class, in label order.
    pub const ALL: [Class; 4] = [Class::Read, Class::Write, Class::Multi, Class::Other];
    /// Number of classes.
    pub const COUNT: usize = 4;
    /// Label value.
    pub fn name(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::Write => "write",
            Class::Multi => "multi",
            Class::Other => "other",
        }
    }
    /// The class of a request.
    pub fn of(op: Op) -> Class {
        use crate::proto::memcache::McOp;
        use crate::proto::redis::CmdClass;
        match op {
            Op::Mc(m) => match m {
                McOp::Get | McOp::Gets | McOp::Gat | McOp::Gats => Class::Read,
                McOp::Set
                | McOp::Add
                | McOp::Replace
                | McOp::Append
                | McOp::Prepend
                | McOp::Cas
                | McOp::Delete
                | McOp::Incr
                | McOp::Decr
                | McOp::Touch => Class::Write,
                _ => Class::Other,
            },
            Op::Redis(r) => match r.class {
                CmdClass::MGet | CmdClass::MSet | CmdClass::SumInt => Class::Multi,
                CmdClass::Single if redis_reads()[r.cmd.index()] => Class::Read,
                CmdClass::Single => Class::Write,
                _ => Class::Other,
            },
        }
    }
}

/// Per command of the table: whether it only reads (built once; classing
/// every reply must not compare names).
fn redis_reads() -> &'static [bool] {
    static READS: std::sync::OnceLock<Vec<bool>> = std::sync::OnceLock::new();
    READS.get_or_init(|| {
        crate::proto::redis::Cmd::all()
            .map(|c| redis_read(c.name()))
            .collect()
    })
}

/// Whether a single-key Redis command only reads.
fn redis_read(name: &str) -> bool {
    const READS: &[&str] = &[
        "BITCOUNT",
        "BITPOS",
        "DUMP",
        "GET",
        "GETBIT",
        "GETRANGE",
        "HEXISTS",
        "HGET",
        "HGETALL",
        "HKEYS",
        "HLEN",
        "HMGET",
        "HRANDFIELD",
        "HSCAN",
        "HSTRLEN",
        "HVALS",
        "LINDEX",
        "LLEN",
        "LPOS",
        "LRANGE",
        "PFCOUNT",
        "PTTL",
        "SCARD",
        "SISMEMBER",
        "SMEMBERS",
        "SMISMEMBER",
        "SRANDMEMBER",
        "SSCAN",
        "STRLEN",
        "SUBSTR",
        "TTL",
        "TYPE",
        "XLEN",
        "XRANGE",
        "XREVRANGE",
        "ZCARD",
        "ZCOUNT",
        "ZLEXCOUNT",
        "ZMSCORE",
        "ZRANGE",
        "ZRANGEBYLEX",
        "ZRANGEBYSCORE",
        "ZRANK",
        "ZREVRANGE",
        "ZREVRANGEBYLEX",
        "ZREVRANGEBYSCORE",
        "ZREVRANK",
        "ZSCAN",
        "ZSCORE",
        "GEODIST",
        "GEOHASH",
        "GEOPOS",
        "EXPIRETIME",
        "PEXPIRETIME",
        "OBJECT",
    ];
    READS.contains(&name)
}

/// Bucket index of a value in µs.
#[inline]
pub fn bucket_of(v: u64) -> usize {
    if v < 100 {
        return v as usize;
    }
    let mut step = 10u64;
    let mut d = 0usize;
    while d + 1 < DECADES && v >= step * 100 {
        step *= 10;
        d += 1;
    }
    let m = (v / step).min(99) as usize;
    100 + d * 90 + (m - 10)
}

/// The range `[lo, hi)` of values (µs) bucket `i` holds.
pub fn bucket_bounds(i: usize) -> (u64, u64) {
    if i < 100 {
        return (i as u64, i as u64 + 1);
    }
    let d = (i - 100) / 90;
    let m = ((i - 100) % 90 + 10) as u64;
    let step = 10u64.pow(d as u32 + 1);
    (m * step, (m + 1) * step)
}

/// The current period number (shared by all processes: monotonic clock).
pub fn period_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts);
    }
    ts.tv_sec.max(0) as u64 / WINDOW_SECS
}

/// A histogram inside the shared region (exactly [`WORDS`] words).
pub struct Cell<'a>(pub &'a [AtomicU64]);

impl Cell<'_> {
    #[inline]
    fn bump(&self, i: usize, n: u64) {
        if let Some(w) = self.0.get(i) {
            w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// Record one value (single writer only).
    #[inline]
    pub fn record(&self, us: u64) {
        self.record_in(us, bucket_of(us));
    }

    /// [`Cell::record`] with `us`'s bucket already known (one value is
    /// recorded in several cells).
    #[inline]
    pub fn record_in(&self, us: u64, bucket: usize) {
        self.record_n(us, bucket, 1);
    }

    /// `n` values of `us` at once (replies of one pipelined batch share
    /// their send and arrival instants, hence their latency).
    #[inline]
    pub fn record_n(&self, us: u64, bucket: usize, n: u64) {
        self.bump(0, n);
        self.bump(1, us.wrapping_mul(n));
        if let Some(w) = self.0.get(2) {
            if us > w.load(Ordering::Relaxed) {
                w.store(us, Ordering::Relaxed);
            }
        }
        self.bump(HDR + bucket, n);
    }

    /// For a window half: clear it first if it holds another period.
    #[inline]
    pub fn enter_period(&self, period: u64) {
        let Some(p) = self.0.get(3) else { return };
        if p.load(Ordering::Relaxed) != period + 1 {
            for w in self.0 {
                w.store(0, Ordering::Relaxed);
            }
            p.store(period + 1, Ordering::Relaxed);
        }
    }

    /// The period a half holds (None if never written).
    pub fn period(&self) -> Option<u64> {
        let p = self.0.get(3)?.load(Ordering::Relaxed);
        p.checked_sub(1)
    }

    /// Add this histogram into `snap`.
    pub fn add_to(&self, snap: &mut Snapshot) {
        let get = |i: usize| self.0.get(i).map_or(0, |w| w.load(Ordering::Relaxed));
        snap.count += get(0);
        snap.sum += get(1);
        snap.max = snap.max.max(get(2));
        for (i, b) in snap.buckets.iter_mut().enumerate() {
            *b += get(HDR + i);
        }
    }
}

/// A merged, private copy of one or more histograms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Number of values.
    pub count: u64,
    /// Sum of values (µs).
    pub sum: u64,
    /// Largest value (µs).
    pub max: u64,
    /// Per-bucket counts.
    pub buckets: Vec<u64>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            count: 0,
            sum: 0,
            max: 0,
            buckets: vec![0; BUCKETS],
        }
    }
}

impl Snapshot {
    /// Add another snapshot.
    pub fn merge(&mut self, o: &Snapshot) {
        self.count += o.count;
        self.sum += o.sum;
        self.max = self.max.max(o.max);
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
    }

    /// Record a value (tests and private use).
    pub fn record(&mut self, us: u64) {
        self.count += 1;
        self.sum += us;
        self.max = self.max.max(us);
        self.buckets[bucket_of(us)] += 1;
    }

    /// Mean in µs.
    pub fn mean(&self) -> u64 {
        self.sum.checked_div(self.count).unwrap_or(0)
    }

    /// The value at quantile `q` (0..=1), µs: the middle of the bucket
    /// holding the rank, never above the maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (lo, hi) = bucket_bounds(i);
                return (lo + (hi - 1 - lo) / 2).min(self.max);
            }
        }
        self.max
    }

    /// Cumulative counts of values below each of [`PROM_BOUNDS_US`].
    pub fn cumulative(&self) -> [u64; PROM_BOUNDS_US.len()] {
        let mut out = [0u64; PROM_BOUNDS_US.len()];
        let mut acc = 0;
        let mut j = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            let (_, hi) = bucket_bounds(i);
            while j < out.len() && hi > PROM_BOUNDS_US[j] {
                out[j] = acc;
                j += 1;
            }
            acc += n;
        }
        while j < out.len() {
            out[j] = acc;
            j += 1;
        }
        out
    }
}

/// The standard quantiles reported everywhere.
pub const QUANTILES: [(&str, f64); 7] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p95", 0.95),
    ("p98", 0.98),
    ("p99", 0.99),
    ("p999", 0.999),
    ("p100", 1.0),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_two_digit() {
        let mut prev_hi = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_bounds(i);
            assert_eq!(lo, prev_hi, "bucket {i}");
            assert!(hi > lo);
            if lo >= 100 {
                assert!((hi - lo) * 10 <= lo, "bucket {i} wider than 10%");
            }
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(hi - 1), i);
            prev_hi = hi;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_of(60_000_000), bucket_of(60_999_999));
    }

    #[test]
    fn quantiles_within_bucket_error() {
        let mut s = Snapshot::default();
        for v in 1..=10_000u64 {
            s.record(v * 10);
        }
        for (q, want) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.999, 99_900.0)] {
            let got = s.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.06, "q{q}: {got} vs {want}");
        }
        assert_eq!(s.quantile(1.0), 100_000);
        assert_eq!(s.mean(), 50_005);
    }

    #[test]
    fn merge_and_cumulative() {
        let mut a = Snapshot::default();
        let mut b = Snapshot::default();
        a.record(50);
        a.record(900);
        b.record(20_000);
        b.record(20_000_000);
        a.merge(&b);
        assert_eq!(a.count, 4);
        let c = a.cumulative();
        assert_eq!(c[0], 1); // < 100 µs
        assert_eq!(c[3], 2); // < 1 ms
        assert_eq!(c[7], 3); // < 25 ms
        assert_eq!(c[15], 3); // < 10 s
    }

    #[test]
    fn cell_record_and_periods() {
        let words: Vec<AtomicU64> = (0..WORDS).map(|_| AtomicU64::new(0)).collect();
        let c = Cell(&words);
        c.enter_period(7);
        c.record(1234);
        c.record(5);
        assert_eq!(c.period(), Some(7));
        let mut s = Snapshot::default();
        c.add_to(&mut s);
        assert_eq!((s.count, s.sum, s.max), (2, 1239, 1234));
        c.enter_period(7);
        c.enter_period(8);
        let mut s = Snapshot::default();
        c.add_to(&mut s);
        assert_eq!(s.count, 0);
        assert_eq!(c.period(), Some(8));
    }
}
