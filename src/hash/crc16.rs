//! CRC-16 (polynomial 0x1021, initial value 0) as twemproxy computes it.
//!
//! twemproxy keeps the running value in a 32-bit integer and never masks
//! it to 16 bits, so the shifted-out high bits survive into the result.

/// Table for polynomial 0x1021, MSB first.
const TABLE: [u16; 256] = build_table();

const fn build_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            bit += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// twemproxy's `crc16` hash of `key` (a 32-bit value, see module docs).
pub fn hash(key: &[u8]) -> u32 {
    key.iter().fold(0u32, |crc, &b| {
        let idx = ((crc >> 8) ^ u32::from(b)) & 0xff;
        (crc << 8) ^ u32::from(TABLE[idx as usize])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_spot_checks() {
        assert_eq!(TABLE[1], 0x1021);
        assert_eq!(TABLE[16], 0x1231);
        assert_eq!(TABLE[255], 0x1ef0);
    }

    #[test]
    fn known_values() {
        assert_eq!(hash(b"apple"), 3_662_830_516);
        assert_eq!(hash(b""), 0);
    }
}
