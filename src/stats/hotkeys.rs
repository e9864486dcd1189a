//! Hot keys: the keys clients ask for most, per pool, so an operator can
//! see why one shard is hot.
//!
//! Each worker samples about one request in [`SAMPLE`] (a random gap, so
//! that no periodic pattern of requests aliases with the sampling) into a
//! space-saving sketch per pool ([`CAPACITY`] counters: bounded memory). A
//! new key replaces the least counted of [`EVICT_CHOICES`] counters picked
//! at random, not the global minimum, so the textbook guarantee (a key with
//! more than 1/CAPACITY of the samples is always kept) becomes a strong
//! likelihood: a key that hot holds a count far above most others', and
//! is replaced only when every counter drawn beside it is hotter still.
//! Once a second the worker publishes its top [`PER_POOL`] keys of each
//! pool into its slot of the shared counters region and starts a new
//! window; the admin port merges the workers' tables (`hotkeys`, and the
//! `walnut_hotkey_requests_per_second` family of `/metrics`). Only the
//! first key of a request is counted (of `MGET`/`get k1 … kn`, the first);
//! keys are kept to their first [`KEY_MAX`] bytes.
//!
//! Table layout per pool: word 0 a version (odd while the worker writes),
//! word 1 the window length in ms, then [`PER_POOL`] entries of a sampled
//! count, a key length and the key's bytes. A reader retries while the
//! version is odd or changed under it.

use super::slowlog::{KeyPrefix, KEY_MAX};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One request in about this many is sampled.
pub const SAMPLE: u32 = 16;
/// Counters of a pool's sketch.
pub const CAPACITY: usize = 128;
/// Keys of a pool published per worker.
pub const PER_POOL: usize = 16;
const ENTRY_WORDS: usize = 2 + KEY_MAX / 8;
/// Words of one pool's table.
pub const POOL_WORDS: usize = 2 + PER_POOL * ENTRY_WORDS;

/// A key as the sketch keeps it: its first [`KEY_MAX`] bytes inline, so
/// counting a new key allocates nothing.
#[derive(Clone, Copy)]
struct Key(KeyPrefix);

impl PartialEq for Key {
    fn eq(&self, o: &Key) -> bool {
        self.0.bytes() == o.0.bytes()
    }
}
impl Eq for Key {}
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write(self.0.bytes());
    }
}

/// FNV-1a for the sketch's index: keys are short and the index is private
/// to one worker (no flooding to defend against), where std's SipHash
/// cost a measurable share of a request.
#[derive(Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// How many counters a new key's replacement is chosen among.
const EVICT_CHOICES: usize = 4;

/// A space-saving sketch of one pool's sampled keys. When full, a new key
/// takes the least counted of a few counters picked at random (not the
/// global minimum, which would cost a scan of every counter per new key),
/// and inherits its count: a key that is really hot has a count far above
/// the others' and is not picked out.
#[derive(Default)]
struct Sketch {
    counts: Vec<(Key, u64)>,
    index: HashMap<Key, usize, std::hash::BuildHasherDefault<Fnv>>,
}

impl std::fmt::Debug for Sketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sketch({} keys)", self.counts.len())
    }
}

impl Sketch {
    fn add(&mut self, key: &[u8], rnd: u32) {
        let key = Key(KeyPrefix::new(key));
        if let Some(&i) = self.index.get(&key) {
            self.counts[i].1 += 1;
            return;
        }
        if self.counts.len() < CAPACITY {
            self.index.insert(key, self.counts.len());
            self.counts.push((key, 1));
            return;
        }
        let mut i = rnd as usize % CAPACITY;
        for c in 1..EVICT_CHOICES {
            let j = (rnd as usize).rotate_right(8 * c as u32) % CAPACITY;
            if self.counts[j].1 < self.counts[i].1 {
                i = j;
            }
        }
        let old = std::mem::replace(&mut self.counts[i].0, key);
        self.index.remove(&old);
        self.index.insert(key, i);
        self.counts[i].1 += 1;
    }

    /// The top keys, most counted first; the sketch starts over.
    fn take_top(&mut self) -> Vec<(Key, u64)> {
        let mut all = std::mem::take(&mut self.counts);
        self.index.clear();
        all.sort_unstable_by_key(|e| std::cmp::Reverse(e.1));
        all.truncate(PER_POOL);
        all
    }
}

/// A worker's hot-key sampler.
#[derive(Debug)]
pub struct Sampler {
    pools: Vec<Sketch>,
    gap: u32,
    rng: u32,
}

impl Sampler {
    /// A sampler for `pools` pools.
    pub fn new(pools: usize) -> Sampler {
        Sampler {
            pools: (0..pools).map(|_| Sketch::default()).collect(),
            gap: 0,
            rng: 0x9e37_79b9 ^ std::process::id(),
        }
    }

    /// A request for `key` in `pool` (cheap unless sampled).
    #[inline]
    pub fn note(&mut self, pool: usize, key: &[u8]) {
        if self.gap > 0 {
            self.gap -= 1;
            return;
        }
        // xorshift32: a gap uniform in 0..2*SAMPLE-1, SAMPLE-1 on average.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 17;
        self.rng ^= self.rng << 5;
        self.gap = self.rng % (2 * SAMPLE - 1);
        if !key.is_empty() {
            if let Some(s) = self.pools.get_mut(pool) {
                s.add(key, self.rng);
            }
        }
    }

    /// Publish the window that ends now (`window_ms` long) into `tables`
    /// (one [`POOL_WORDS`] table per pool) and start the next.
    pub fn publish(&mut self, tables: &[AtomicU64], window_ms: u64) {
        for (p, sketch) in self.pools.iter_mut().enumerate() {
            let Some(t) = tables.get(p * POOL_WORDS..(p + 1) * POOL_WORDS) else {
                return;
            };
            let top = sketch.take_top();
            let v = t[0].load(Ordering::Relaxed);
            t[0].store(v | 1, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Release);
            t[1].store(window_ms, Ordering::Relaxed);
            for i in 0..PER_POOL {
                let e = &t[2 + i * ENTRY_WORDS..2 + (i + 1) * ENTRY_WORDS];
                let (key, n) = top.get(i).map_or((&b""[..], 0), |(k, n)| (k.0.bytes(), *n));
                e[0].store(n, Ordering::Relaxed);
                e[1].store(key.len() as u64, Ordering::Relaxed);
                for (w, chunk) in e[2..].iter().zip(key.chunks(8)) {
                    let mut b = [0u8; 8];
                    b[..chunk.len()].copy_from_slice(chunk);
                    w.store(u64::from_le_bytes(b), Ordering::Relaxed);
                }
            }
            t[0].store((v | 1) + 1, Ordering::Release);
        }
    }
}

/// One pool's table as a worker last published it: (key, requests per
/// second estimated from the samples).
pub fn read(table: &[AtomicU64]) -> Vec<(Vec<u8>, f64)> {
    for _ in 0..100 {
        let v = table[0].load(Ordering::Acquire);
        if v & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let window_ms = table[1].load(Ordering::Relaxed).max(1);
        let mut out = Vec::new();
        for i in 0..PER_POOL {
            let e = &table[2 + i * ENTRY_WORDS..2 + (i + 1) * ENTRY_WORDS];
            let n = e[0].load(Ordering::Relaxed);
            let len = (e[1].load(Ordering::Relaxed) as usize).min(KEY_MAX);
            if n == 0 {
                break;
            }
            let mut key = Vec::with_capacity(len);
            for w in &e[2..] {
                key.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            key.truncate(len);
            let rate = n as f64 * f64::from(SAMPLE) * 1000.0 / window_ms as f64;
            out.push((key, rate));
        }
        std::sync::atomic::fence(Ordering::Acquire);
        if table[0].load(Ordering::Relaxed) == v {
            return out;
        }
    }
    Vec::new()
}

/// Sum per key over the workers' tables of one pool; most requested first.
pub fn merge(tables: impl Iterator<Item = Vec<(Vec<u8>, f64)>>) -> Vec<(Vec<u8>, f64)> {
    let mut sum: HashMap<Vec<u8>, f64> = HashMap::new();
    for t in tables {
        for (k, r) in t {
            *sum.entry(k).or_default() += r;
        }
    }
    let mut out: Vec<(Vec<u8>, f64)> = sum.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// A key as text: printable ASCII as it is, other bytes as `\xNN`.
pub fn printable(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    for &b in key {
        if (0x21..0x7f).contains(&b) && b != b'\\' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(pools: usize) -> Vec<AtomicU64> {
        (0..pools * POOL_WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_hot_key_among_many_cold_ones_comes_first() {
        let mut s = Sampler::new(2);
        for i in 0..200_000u32 {
            if i % 4 == 0 {
                s.note(1, b"hot:key");
            } else if i % 9 == 0 {
                s.note(1, b"warm");
            } else {
                s.note(1, format!("cold:{i}").as_bytes());
            }
            s.note(0, b"other-pool");
        }
        let t = tables(2);
        s.publish(&t, 1000);
        let top = read(&t[POOL_WORDS..]);
        assert_eq!(top[0].0, b"hot:key");
        // 50,000 requests in a 1 s window, estimated from ~1 in 16.
        assert!((40_000.0..60_000.0).contains(&top[0].1), "{}", top[0].1);
        assert_eq!(top[1].0, b"warm");
        assert!(top.len() <= PER_POOL);
        assert_eq!(read(&t[..POOL_WORDS])[0].0, b"other-pool");
        // The next window starts empty.
        s.publish(&t, 1000);
        assert!(read(&t[POOL_WORDS..]).is_empty());
    }

    #[test]
    fn long_and_binary_keys_are_cut_and_printed() {
        let mut s = Sampler::new(1);
        let long = vec![b'k'; 300];
        for _ in 0..100 {
            s.note(0, &long);
            s.note(0, b"a b\x00\\");
        }
        let t = tables(1);
        s.publish(&t, 2000);
        let top = read(&t);
        assert!(top.iter().any(|(k, _)| k.len() == KEY_MAX));
        let bin = top.iter().find(|(k, _)| k.len() == 5).unwrap();
        assert_eq!(printable(&bin.0), "a\\x20b\\x00\\x5c");
    }

    #[test]
    fn merged_over_workers() {
        let m = merge(
            vec![
                vec![(b"a".to_vec(), 10.0), (b"b".to_vec(), 5.0)],
                vec![(b"b".to_vec(), 8.0)],
            ]
            .into_iter(),
        );
        assert_eq!(m, vec![(b"b".to_vec(), 13.0), (b"a".to_vec(), 10.0)]);
    }
}
