//! The replies of the meta commands that move one key between memcached
//! servers (`mg <key> v f t` on the old owner, `ms ... ME` on the new
//! one): read by a worker pulling a key on demand and by a pool warming
//! from another.

/// A value as `mg <key> v f t` returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaValue<'a> {
    /// The client flags (`f`).
    pub flags: u32,
    /// Seconds left (`t`; -1: no expiry).
    pub ttl: i64,
    /// The data block.
    pub value: &'a [u8],
}

/// An `mg ... v f t` hit (`VA <len> f<flags> t<ttl>` and its data block);
/// `None` for a miss (`EN`) or any other reply.
pub fn meta_value(reply: &[u8]) -> Option<MetaValue<'_>> {
    let nl = memchr::memchr(b'\n', reply)?;
    let head = std::str::from_utf8(&reply[..nl]).ok()?.trim_end();
    let mut words = head.split(' ');
    if words.next()? != "VA" {
        return None;
    }
    let len: usize = words.next()?.parse().ok()?;
    let (mut flags, mut ttl) = (0u32, -1i64);
    for w in words {
        if let Some(f) = w.strip_prefix('f') {
            flags = f.parse().ok()?;
        } else if let Some(t) = w.strip_prefix('t') {
            ttl = t.parse().ok()?;
        }
    }
    let value = reply.get(nl + 1..nl + 1 + len)?;
    Some(MetaValue { flags, ttl, value })
}

/// Whether the new owner has the key after an `ms ... ME` (add): stored
/// (`HD`), or not because it already had a (newer) value (`NS`).
pub fn copied(reply: &[u8]) -> bool {
    reply.starts_with(b"HD") || reply.starts_with(b"NS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mg_hit_and_miss() {
        let v = |flags, ttl, value| Some(MetaValue { flags, ttl, value });
        assert_eq!(meta_value(b"VA 2 f7 t-1\r\nhi\r\n"), v(7, -1, &b"hi"[..]));
        assert_eq!(meta_value(b"VA 0 t30 f0\r\n\r\n"), v(0, 30, &b""[..]));
        assert_eq!(meta_value(b"EN\r\n"), None);
        assert_eq!(meta_value(b"VA 5 f0 t-1\r\nhi\r\n"), None);
        assert_eq!(meta_value(b"SERVER_ERROR out of memory\r\n"), None);
    }

    #[test]
    fn ms_add() {
        assert!(copied(b"HD\r\n") && copied(b"NS\r\n"));
        assert!(!copied(b"SERVER_ERROR out of memory\r\n"));
        assert!(!copied(b"CLIENT_ERROR bad data chunk\r\n"));
    }
}
