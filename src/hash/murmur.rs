//! MurmurHash2 with twemproxy's seed, `0xdeadbeef * len`.

const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// Murmur hash of `key`.
pub fn hash(key: &[u8]) -> u32 {
    let len = key.len() as u32;
    let mut h = 0xdead_beefu32.wrapping_mul(len) ^ len;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if let Some(&b) = rest.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::hash;

    #[test]
    fn known_values() {
        assert_eq!(hash(b"apple"), 4_142_305_122);
        assert_eq!(hash(b""), 0);
    }
}
