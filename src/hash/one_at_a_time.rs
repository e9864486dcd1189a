//! Bob Jenkins' one-at-a-time hash, as twemproxy computes it.
//!
//! twemproxy reads the key through a `char *`, which is signed on x86, so
//! bytes >= 0x80 enter the sum sign-extended to 32 bits.

/// One-at-a-time hash of `key`.
pub fn hash(key: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &b in key {
        value = value.wrapping_add(b as i8 as i32 as u32);
        value = value.wrapping_add(value << 10);
        value ^= value >> 6;
    }
    value = value.wrapping_add(value << 3);
    value ^= value >> 11;
    value.wrapping_add(value << 15)
}

#[cfg(test)]
mod tests {
    use super::hash;

    #[test]
    fn known_values() {
        assert_eq!(hash(b"apple"), 2_297_466_611);
        assert_eq!(hash(b""), 0);
    }

    #[test]
    fn high_bytes_sign_extend() {
        // 0xff sign-extends to 0xffffffff: one round gives
        // v = 0xffffffff; v += v << 10; v ^= v >> 6.
        let mut v: u32 = 0xffff_ffff;
        v = v.wrapping_add(v << 10);
        v ^= v >> 6;
        v = v.wrapping_add(v << 3);
        v ^= v >> 11;
        v = v.wrapping_add(v << 15);
        assert_eq!(hash(&[0xff]), v);
    }
}
