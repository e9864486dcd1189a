//! Fowler–Noll–Vo hashes, with twemproxy's quirks.
//!
//! Every variant reads the key through a signed `char`, so bytes >= 0x80
//! are sign-extended before being mixed in. `fnv1a_64` works entirely in
//! 32 bits, with the 64-bit offset basis and prime truncated.

const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV_32_INIT: u32 = 2_166_136_261;
const FNV_32_PRIME: u32 = 16_777_619;

/// A key byte as twemproxy's signed `char`, widened to 64 bits.
fn sx64(b: u8) -> u64 {
    b as i8 as i64 as u64
}

/// A key byte as twemproxy's signed `char`, widened to 32 bits.
fn sx32(b: u8) -> u32 {
    b as i8 as i32 as u32
}

/// FNV-1, 64-bit state, low 32 bits returned.
pub fn fnv1_64(key: &[u8]) -> u32 {
    key.iter()
        .fold(FNV_64_INIT, |h, &b| h.wrapping_mul(FNV_64_PRIME) ^ sx64(b)) as u32
}

/// "FNV-1a 64": computed in 32 bits with truncated constants.
pub fn fnv1a_64(key: &[u8]) -> u32 {
    key.iter().fold(FNV_64_INIT as u32, |h, &b| {
        (h ^ sx32(b)).wrapping_mul(FNV_64_PRIME as u32)
    })
}

/// FNV-1, 32-bit.
pub fn fnv1_32(key: &[u8]) -> u32 {
    key.iter()
        .fold(FNV_32_INIT, |h, &b| h.wrapping_mul(FNV_32_PRIME) ^ sx32(b))
}

/// FNV-1a 64 as specified, over unsigned bytes and in 64 bits (not a
/// placement hash: the configuration's checksum, `status` and `config
/// show`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_64_INIT, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_64_PRIME)
    })
}

/// FNV-1a, 32-bit.
pub fn fnv1a_32(key: &[u8]) -> u32 {
    key.iter().fold(FNV_32_INIT, |h, &b| {
        (h ^ sx32(b)).wrapping_mul(FNV_32_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn known_values() {
        assert_eq!(fnv1_32(b"apple"), 67_176_023);
        assert_eq!(fnv1a_32(b"apple"), 280_767_167);
        assert_eq!(fnv1_64(b"apple"), 473_199_127);
        assert_eq!(fnv1a_64(b"apple"), 1_488_911_807);
    }

    #[test]
    fn empty_key_is_offset_basis() {
        assert_eq!(fnv1_32(b""), FNV_32_INIT);
        assert_eq!(fnv1a_32(b""), FNV_32_INIT);
        assert_eq!(fnv1_64(b""), FNV_64_INIT as u32);
        assert_eq!(fnv1a_64(b""), 0x8422_2325);
    }

    #[test]
    fn high_bytes_sign_extend() {
        let expect = (0x8422_2325u32 ^ 0xffff_ff80).wrapping_mul(0x1b3);
        assert_eq!(fnv1a_64(&[0x80]), expect);
        let expect64 = (FNV_64_INIT.wrapping_mul(FNV_64_PRIME) ^ 0xffff_ffff_ffff_ff80) as u32;
        assert_eq!(fnv1_64(&[0x80]), expect64);
    }
}
