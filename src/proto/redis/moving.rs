//! The replies of the commands that move one key between Redis servers
//! (`DUMP` + `PTTL` on the old owner, `RESTORE` without `REPLACE` on the
//! new one): read by a worker pulling a key on demand and by a pool
//! warming from another.

/// A bulk reply's payload (a `DUMP`'s serialized value); `None` for a
/// null (the key is not there) or another reply.
pub fn bulk_payload(reply: &[u8]) -> Option<&[u8]> {
    super::resp::bulk(reply).map(|(payload, _)| payload)
}

/// An integer reply (a `PTTL`: -2 when the key is gone, -1 without TTL).
pub fn integer(reply: &[u8]) -> Option<i64> {
    std::str::from_utf8(reply.strip_prefix(b":")?)
        .ok()?
        .trim_end()
        .parse()
        .ok()
}

/// Whether the new owner has the key after a `RESTORE` without
/// `REPLACE`: stored (`+OK`), or not because it already had a (newer)
/// value (`-BUSYKEY`).
pub fn copied(reply: &[u8]) -> bool {
    reply.starts_with(b"+OK") || reply.starts_with(b"-BUSYKEY")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_and_pttl() {
        assert_eq!(bulk_payload(b"$3\r\nabc\r\n"), Some(&b"abc"[..]));
        assert_eq!(bulk_payload(b"$0\r\n\r\n"), Some(&b""[..]));
        assert_eq!(bulk_payload(b"$-1\r\n"), None);
        assert_eq!(bulk_payload(b"_\r\n"), None);
        assert_eq!(bulk_payload(b"$5\r\nab\r\n"), None);
        assert_eq!(integer(b":-1\r\n"), Some(-1));
        assert_eq!(integer(b":-2\r\n"), Some(-2));
        assert_eq!(integer(b":1500\r\n"), Some(1500));
        assert_eq!(integer(b"$-1\r\n"), None);
    }

    #[test]
    fn restore() {
        assert!(copied(b"+OK\r\n"));
        assert!(copied(b"-BUSYKEY Target key name already exists.\r\n"));
        assert!(!copied(
            b"-ERR DUMP payload version or checksum are wrong\r\n"
        ));
    }
}
