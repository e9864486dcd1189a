//! The slow log: requests slower than a threshold, kept in a bounded ring of
//! fixed-size entries per worker inside the shared counters region. The
//! worker is the only writer; the master reads every ring and merges them
//! by time.
//!
//! Ring layout: word 0 is the number of entries ever written (the sequence
//! of the next entry), then [`ENTRIES`] entries of [`ENTRY_WORDS`] words.
//! An entry's first word is its sequence + 1, stored last (release) and
//! cleared first, so a reader never takes a half-written entry for whole.

use std::sync::atomic::{AtomicU64, Ordering};

/// Entries per worker ring.
pub const ENTRIES: usize = 128;
/// Longest key prefix kept.
pub const KEY_MAX: usize = 64;
/// Longest command name kept.
const CMD_MAX: usize = 16;
/// Words per entry: seq, time, pool/server, latency, size, lengths,
/// command (2 words), key (8 words).
pub const ENTRY_WORDS: usize = 6 + CMD_MAX / 8 + KEY_MAX / 8;
/// Words of one ring.
pub const WORDS: usize = 1 + ENTRIES * ENTRY_WORDS;

/// The first bytes of a request's first key, carried with the request so a
/// slow reply can name it.
#[derive(Clone, Copy)]
pub struct KeyPrefix {
    len: u8,
    buf: [u8; KEY_MAX],
}

impl std::fmt::Debug for KeyPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}

impl Default for KeyPrefix {
    fn default() -> Self {
        KeyPrefix::EMPTY
    }
}

impl KeyPrefix {
    /// No key.
    pub const EMPTY: KeyPrefix = KeyPrefix {
        len: 0,
        buf: [0; KEY_MAX],
    };
    /// The first [`KEY_MAX`] bytes of `key`.
    pub fn new(key: &[u8]) -> KeyPrefix {
        let n = key.len().min(KEY_MAX);
        let mut buf = [0u8; KEY_MAX];
        buf[..n].copy_from_slice(&key[..n]);
        KeyPrefix { len: n as u8, buf }
    }
    /// The kept bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len).min(KEY_MAX)]
    }
}

/// One slow request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Sequence number within its worker's ring.
    pub seq: u64,
    /// When the reply arrived, µs since the epoch.
    pub time_us: u64,
    /// Pool index.
    pub pool: u32,
    /// Server index in the pool.
    pub server: u32,
    /// Latency in µs.
    pub latency_us: u64,
    /// Request size in bytes (as sent to the server).
    pub size: u64,
    /// Command name.
    pub cmd: String,
    /// First key (at most [`KEY_MAX`] bytes).
    pub key: Vec<u8>,
}

fn pack(bytes: &[u8], words: &mut [u64]) {
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        if let Some(w) = words.get_mut(i) {
            *w = u64::from_le_bytes(b);
        }
    }
}

fn unpack(words: &[u64], len: usize) -> Vec<u8> {
    let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    out.truncate(len);
    out
}

/// A ring inside the shared region (exactly [`WORDS`] words).
pub struct Ring<'a>(pub &'a [AtomicU64]);

impl Ring<'_> {
    fn w(&self, i: usize) -> Option<&AtomicU64> {
        self.0.get(i)
    }

    /// Number of entries ever written.
    pub fn written(&self) -> u64 {
        self.w(0).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Append an entry (single writer only).
    pub fn push(&self, e: &Entry) {
        let seq = self.written();
        let base = 1 + (seq as usize % ENTRIES) * ENTRY_WORDS;
        let Some(words) = self.0.get(base..base + ENTRY_WORDS) else {
            return;
        };
        words[0].store(0, Ordering::Release);
        let cmd = &e.cmd.as_bytes()[..e.cmd.len().min(CMD_MAX)];
        let key = &e.key[..e.key.len().min(KEY_MAX)];
        let mut body = [0u64; ENTRY_WORDS];
        body[1] = e.time_us;
        body[2] = (u64::from(e.pool) << 32) | u64::from(e.server);
        body[3] = e.latency_us;
        body[4] = e.size;
        body[5] = ((cmd.len() as u64) << 8) | key.len() as u64;
        pack(cmd, &mut body[6..6 + CMD_MAX / 8]);
        pack(key, &mut body[6 + CMD_MAX / 8..]);
        for (w, v) in words.iter().zip(body).skip(1) {
            w.store(v, Ordering::Relaxed);
        }
        words[0].store(seq + 1, Ordering::Release);
        if let Some(w) = self.w(0) {
            w.store(seq + 1, Ordering::Release);
        }
    }

    /// Entries with sequence >= `from`, oldest first.
    pub fn read(&self, from: u64) -> Vec<Entry> {
        let end = self.written();
        let start = from.max(end.saturating_sub(ENTRIES as u64));
        let mut out = Vec::new();
        for seq in start..end {
            let base = 1 + (seq as usize % ENTRIES) * ENTRY_WORDS;
            let Some(words) = self.0.get(base..base + ENTRY_WORDS) else {
                continue;
            };
            let before = words[0].load(Ordering::Acquire);
            if before != seq + 1 {
                continue;
            }
            let body: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
            if words[0].load(Ordering::Acquire) != before {
                continue;
            }
            let cmd_len = ((body[5] >> 8) as usize).min(CMD_MAX);
            let key_len = ((body[5] & 0xff) as usize).min(KEY_MAX);
            out.push(Entry {
                seq,
                time_us: body[1],
                pool: (body[2] >> 32) as u32,
                server: body[2] as u32,
                latency_us: body[3],
                size: body[4],
                cmd: String::from_utf8_lossy(&unpack(&body[6..6 + CMD_MAX / 8], cmd_len))
                    .into_owned(),
                key: unpack(&body[6 + CMD_MAX / 8..], key_len),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> Entry {
        Entry {
            seq: 0,
            time_us: 1000 + i,
            pool: 1,
            server: 2,
            latency_us: 20_000 + i,
            size: 33,
            cmd: "GET".into(),
            key: format!("key:{i}").into_bytes(),
        }
    }

    #[test]
    fn ring_wraps_and_reads_back() {
        let words: Vec<AtomicU64> = (0..WORDS).map(|_| AtomicU64::new(0)).collect();
        let r = Ring(&words);
        assert!(r.read(0).is_empty());
        for i in 0..(ENTRIES as u64 + 5) {
            r.push(&entry(i));
        }
        let got = r.read(0);
        assert_eq!(got.len(), ENTRIES);
        assert_eq!(got[0].seq, 5);
        assert_eq!(got[0].key, b"key:5");
        assert_eq!(got[0].cmd, "GET");
        assert_eq!(got[0].latency_us, 20_005);
        assert_eq!((got[0].pool, got[0].server), (1, 2));
        assert_eq!(r.read(ENTRIES as u64 + 4).len(), 1);
    }

    #[test]
    fn key_prefix_truncates() {
        let long = vec![b'k'; 300];
        assert_eq!(KeyPrefix::new(&long).bytes().len(), KEY_MAX);
        assert_eq!(KeyPrefix::new(b"ab").bytes(), b"ab");
        assert!(KeyPrefix::EMPTY.bytes().is_empty());
    }
}
