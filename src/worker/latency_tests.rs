//! The recorder without sockets: what is recorded at which knobs, runs
//! of equal latency, the slow log, the hot-key window and the line budget.

use super::*;
use crate::config::Config;
use crate::proto::{Limits, Parse, Protocol};
use crate::stats::shm::{Layout, Region};
use crate::worker::conn::Waiter;
use std::path::Path;
use std::time::Duration;

/// Two memcached pools of two servers; the second has its own slow-log
/// threshold of 1000 µs.
fn pools() -> Vec<PoolRt> {
    let yaml = "a:\n  listen: 127.0.0.1:22995\n  servers:\n    - 127.0.0.1:11211:1 a1\n    - 127.0.0.1:11212:1 a2\n\
b:\n  listen: 127.0.0.1:22996\n  slowlog_threshold: 1ms\n  servers:\n    - 127.0.0.1:11213:1 b1\n    - 127.0.0.1:11214:1 b2\n";
    let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
    c.pools.iter().map(|p| PoolRt::new(p, &[])).collect()
}

fn region() -> Region {
    Region::new(Layout::new(vec![2, 2], Vec::new()), 1).unwrap()
}

/// A memcached get of `key` sent at `sent`.
fn get(key: &[u8], sent: Instant) -> Inflight {
    let mut b = b"get ".to_vec();
    b.extend_from_slice(key);
    b.extend_from_slice(b"\r\n");
    let Ok(Parse::Done(r)) = Protocol::Memcache.parse_request(&b, &Limits::default()) else {
        panic!("get parses");
    };
    Inflight {
        waiter: Waiter::Internal,
        op: r.op,
        len: b.len(),
        sent_at: sent,
        timed_from: sent,
        key: KeyPrefix::new(key),
    }
}

#[test]
fn thresholds_own_else_global() {
    let p = pools();
    let mut r = Recorder::new(&p, true, 0);
    assert_eq!(r.slow_us, vec![0, 1000]);
    r.knobs(true, 50);
    assert_eq!(r.slow_us, vec![50, 1000]);
    r.knobs(false, 0);
    assert_eq!(r.slow_us, vec![0, 1000]);
    assert!(!r.latency);
}

#[test]
fn replies_of_one_batch_are_one_run() {
    let (p, reg) = (pools(), region());
    let stats = reg.slot(0);
    let mut r = Recorder::new(&p, true, 0);
    let t0 = Instant::now();
    let sent = get(b"k", t0);
    for _ in 0..5 {
        r.record_reply(&stats, &p, (0, 1), &sent, t0 + Duration::from_micros(300));
    }
    // Held in the run until the pass ends.
    assert_eq!(reg.latency_server(0, 1, false).count, 0);
    r.end_pass(&stats);
    let s = reg.latency_server(0, 1, false);
    assert_eq!((s.count, s.sum), (5, 1500));
    assert_eq!(reg.latency_server(0, 0, false).count, 0);
}

#[test]
fn nothing_recorded_with_latency_off_and_no_slow_log() {
    let (p, reg) = (pools(), region());
    let stats = reg.slot(0);
    let mut r = Recorder::new(&p, false, 0);
    let t0 = Instant::now();
    r.record_reply(
        &stats,
        &p,
        (0, 0),
        &get(b"k", t0),
        t0 + Duration::from_secs(1),
    );
    r.end_pass(&stats);
    assert_eq!(reg.latency_server(0, 0, false).count, 0);
    assert_eq!(reg.slowlog(0).written(), 0);
}

#[test]
fn slow_replies_go_to_the_slow_log() {
    let (p, reg) = (pools(), region());
    let stats = reg.slot(0);
    // Latencies off: pool b's own threshold still logs.
    let mut r = Recorder::new(&p, false, 0);
    let t0 = Instant::now();
    r.record_reply(
        &stats,
        &p,
        (1, 1),
        &get(b"fast", t0),
        t0 + Duration::from_micros(999),
    );
    r.record_reply(
        &stats,
        &p,
        (1, 1),
        &get(b"slow", t0),
        t0 + Duration::from_micros(1000),
    );
    // Pool a has no threshold.
    r.record_reply(
        &stats,
        &p,
        (0, 0),
        &get(b"a", t0),
        t0 + Duration::from_secs(1),
    );
    let log = reg.slowlog(0).read(0);
    assert_eq!(log.len(), 1);
    let e = &log[0];
    assert_eq!((e.pool, e.server, e.latency_us), (1, 1, 1000));
    assert_eq!((e.cmd.as_str(), e.key.as_slice()), ("get", &b"slow"[..]));
    r.end_pass(&stats);
    assert_eq!(reg.latency_server(1, 1, false).count, 0);
}

#[test]
fn the_slow_key_is_kept_only_while_the_slow_log_is_on() {
    let p = pools();
    let mut r = Recorder::new(&p, true, 0);
    r.note_key(0, b"k0");
    assert_eq!(r.slow_key().bytes(), b"");
    r.note_key(1, b"k1");
    assert_eq!(r.slow_key().bytes(), b"k1");
    r.knobs(true, 10);
    r.note_key(0, b"k2");
    assert_eq!(r.slow_key().bytes(), b"k2");
}

#[test]
fn budget_per_second() {
    let mut s = SlowLines::default();
    let written = (0..100).filter(|_| s.take()).count();
    assert_eq!(written, SLOW_LINES_PER_SECOND as usize);
    assert_eq!(s.skipped, 100 - u64::from(SLOW_LINES_PER_SECOND));
    s.new_second();
    assert!(s.take());
    assert_eq!(s.skipped, 0);
}
