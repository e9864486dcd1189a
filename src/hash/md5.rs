//! MD5-based hashes: the `md5` key hash and ketama's point hash.

use md5::{Digest, Md5};

/// The 16-byte MD5 digest of `data`.
pub fn digest(data: &[u8]) -> [u8; 16] {
    Md5::digest(data).into()
}

/// Reads the `group`-th 4-byte group (0..=3) of an MD5 digest as a
/// little-endian `u32`, the way ketama turns one digest into four points.
pub fn digest_word(d: &[u8; 16], group: usize) -> u32 {
    let g = (group & 3) * 4;
    u32::from_le_bytes([d[g], d[g + 1], d[g + 2], d[g + 3]])
}

/// twemproxy's `md5` hash: the first four digest bytes, little-endian.
pub fn hash(key: &[u8]) -> u32 {
    digest_word(&digest(key), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(hash(b"apple"), 3_195_025_439);
        let d = digest(b"server1-8");
        assert_eq!(digest_word(&d, 0), 3_853_726_576);
        assert_eq!(digest_word(&d, 3), 2_667_054_752);
    }
}
