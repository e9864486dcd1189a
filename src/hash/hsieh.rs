//! Paul Hsieh's SuperFastHash, as twemproxy computes it.
//!
//! Quirk: with three trailing bytes, the third is read through a signed
//! `char`, so a byte >= 0x80 is sign-extended before the shift by 18.

fn get16(b: &[u8]) -> u32 {
    u32::from(b[0]) | (u32::from(b[1]) << 8)
}

/// Hsieh hash of `key`; the empty key hashes to 0.
pub fn hash(key: &[u8]) -> u32 {
    if key.is_empty() {
        return 0;
    }
    let mut h: u32 = 0;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        h = h.wrapping_add(get16(c));
        let tmp = (get16(&c[2..]) << 11) ^ h;
        h = (h << 16) ^ tmp;
        h = h.wrapping_add(h >> 11);
    }
    let rest = chunks.remainder();
    match rest.len() {
        3 => {
            h = h.wrapping_add(get16(rest));
            h ^= h << 16;
            h ^= (rest[2] as i8 as i32 as u32) << 18;
            h = h.wrapping_add(h >> 11);
        }
        2 => {
            h = h.wrapping_add(get16(rest));
            h ^= h << 11;
            h = h.wrapping_add(h >> 17);
        }
        1 => {
            h = h.wrapping_add(u32::from(rest[0]));
            h ^= h << 10;
            h = h.wrapping_add(h >> 1);
        }
        _ => {}
    }
    h ^= h << 3;
    h = h.wrapping_add(h >> 5);
    h ^= h << 4;
    h = h.wrapping_add(h >> 17);
    h ^= h << 25;
    h.wrapping_add(h >> 6)
}

#[cfg(test)]
mod tests {
    use super::hash;

    #[test]
    fn known_values() {
        assert_eq!(hash(b"apple"), 3_738_850_110);
        assert_eq!(hash(b""), 0);
    }

    #[test]
    fn third_tail_byte_sign_extends() {
        // Only the sign-extended bits above bit 25 differ between the two.
        assert_ne!(hash(&[1, 2, 0x80]), hash(&[1, 2, 0x7f]));
    }
}
