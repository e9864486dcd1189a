//! The fixed memcached replies and requests the proxy sends itself, and
//! what a reply says of a key.

/// The end of a retrieval reply; alone, a `get` that found nothing (and
/// the reply of a multi-key read's fragment that carries no key).
pub const END: &[u8] = b"END\r\n";
/// `version`, the health probe of a memcached server.
pub const VERSION_PROBE: &[u8] = b"version\r\n";

/// Whether `reply` (to a single-key read) says the key is not there: a
/// text retrieval's bare `END`, a meta `EN`.
pub fn is_miss(reply: &[u8]) -> bool {
    reply == END || reply.starts_with(b"EN\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses() {
        assert!(is_miss(b"END\r\n"));
        assert!(is_miss(b"EN\r\n"));
        assert!(!is_miss(b"VALUE k 0 1\r\nx\r\nEND\r\n"));
        assert!(!is_miss(b"VA 1\r\nx\r\n") && !is_miss(b"HD\r\n"));
        assert!(!is_miss(b"SERVER_ERROR out of memory\r\n"));
    }
}
