//! Number parsing with the acceptance rules of memcached's `safe_strto*`
//! helpers (C `strtoul`/`strtol` on a 64-bit host): leading C whitespace, an
//! optional sign, decimal digits, then either the end of the token or a
//! whitespace byte. The proxy must accept exactly what the server accepts,
//! so that it frames a request (notably the data block length) the same way.

/// C `isspace` in the "C" locale.
pub(crate) fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Sign, magnitude (`None` on overflow of u64) of the leading number, or
/// `None` when the token holds no valid number.
fn scan(tok: &[u8]) -> Option<(bool, Option<u64>)> {
    let mut i = tok.iter().take_while(|&&b| c_isspace(b)).count();
    let mut neg = false;
    if let Some(&s) = tok.get(i) {
        if s == b'+' || s == b'-' {
            neg = s == b'-';
            i += 1;
        }
    }
    let start = i;
    let mut mag: Option<u64> = Some(0);
    while let Some(&d) = tok.get(i) {
        if !d.is_ascii_digit() {
            break;
        }
        mag = mag
            .and_then(|m| m.checked_mul(10))
            .and_then(|m| m.checked_add(u64::from(d - b'0')));
        i += 1;
    }
    if i == start {
        return None;
    }
    match tok.get(i) {
        None => Some((neg, mag)),
        Some(&b) if c_isspace(b) => Some((neg, mag)),
        Some(_) => None,
    }
}

/// `strtoull` then memcached's check: a value that is negative as a signed
/// number is refused when the token holds a minus sign.
pub(crate) fn safe_strtoull(tok: &[u8]) -> Option<u64> {
    let (neg, mag) = scan(tok)?;
    let v = mag?;
    let v = if neg { v.wrapping_neg() } else { v };
    if (v as i64) < 0 && tok.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// `safe_strtoul`: as [`safe_strtoull`], truncated to 32 bits.
pub(crate) fn safe_strtoul(tok: &[u8]) -> Option<u32> {
    safe_strtoull(tok).map(|v| v as u32)
}

/// `safe_strtol`: `strtol` (64-bit range), truncated to 32 bits.
pub(crate) fn safe_strtol(tok: &[u8]) -> Option<i32> {
    let (neg, mag) = scan(tok)?;
    let m = mag?;
    let v: i64 = if neg {
        if m > 1u64 << 63 {
            return None;
        }
        0i64.wrapping_sub_unsigned(m)
    } else {
        i64::try_from(m).ok()?
    };
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned() {
        assert_eq!(safe_strtoul(b"0"), Some(0));
        assert_eq!(safe_strtoul(b"+7"), Some(7));
        assert_eq!(safe_strtoul(b"-0"), Some(0));
        assert_eq!(safe_strtoul(b"-1"), None);
        assert_eq!(safe_strtoul(b"4294967296"), Some(0));
        assert_eq!(safe_strtoul(b"12x"), None);
        assert_eq!(safe_strtoul(b"12\tx"), Some(12));
        assert_eq!(safe_strtoul(b"\t12"), Some(12));
        assert_eq!(safe_strtoul(b""), None);
        assert_eq!(safe_strtoul(b"-"), None);
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"-18446744073709551615"), Some(1));
    }

    #[test]
    fn signed() {
        assert_eq!(safe_strtol(b"-1"), Some(-1));
        assert_eq!(safe_strtol(b"2147483648"), Some(i32::MIN));
        assert_eq!(safe_strtol(b"4294967297"), Some(1));
        assert_eq!(safe_strtol(b"9223372036854775807"), Some(-1));
        assert_eq!(safe_strtol(b"9223372036854775808"), None);
        assert_eq!(safe_strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(safe_strtol(b"-9223372036854775809"), None);
        assert_eq!(safe_strtol(b"x"), None);
    }
}
