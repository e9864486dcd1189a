//! CRC-32 hashes: libmemcached's 15-bit `crc32` and the standard `crc32a`.

/// Reflected table for polynomial 0xEDB88320.
const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
            bit += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

fn crc(key: &[u8]) -> u32 {
    !key.iter().fold(u32::MAX, |c, &b| {
        (c >> 8) ^ TABLE[((c ^ u32::from(b)) & 0xff) as usize]
    })
}

/// twemproxy's `crc32`: bits 16..31 of the standard CRC-32, masked to 15
/// bits (libmemcached compatible).
pub fn hash(key: &[u8]) -> u32 {
    (crc(key) >> 16) & 0x7fff
}

/// twemproxy's `crc32a`: the standard CRC-32.
pub fn hash_a(key: &[u8]) -> u32 {
    crc(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(hash(b"apple"), 10_542);
        assert_eq!(hash_a(b"apple"), 2_838_417_488);
        assert_eq!(hash_a(b"123456789"), 0xCBF4_3926);
        assert_eq!(hash_a(b""), 0);
    }

    #[test]
    fn table_spot_checks() {
        assert_eq!(TABLE[1], 0x7707_3096);
        assert_eq!(TABLE[255], 0x2D02_EF8D);
    }
}
