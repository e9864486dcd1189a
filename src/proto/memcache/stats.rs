//! memcached `stats` as the proxy answers it: which group a request asks
//! for, and the reply's `STAT` lines. The figures are the worker's.

/// The group a `stats` request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsGroup<'a> {
    /// `stats` alone.
    General,
    /// `stats settings`.
    Settings,
    /// `stats reset`: acknowledged with [`RESET`].
    Reset,
    /// `stats slabs|items|sizes|conns|extstore|detail|cachedump`: they
    /// describe one server's memory, which a proxy does not have.
    ServerOnly(&'a [u8]),
    /// Anything else: answered `ERROR`, as memcached answers a group it
    /// does not know.
    Unknown,
}

/// The reply to `stats reset`.
pub const RESET: &[u8] = b"RESET\r\n";
/// The reply to a `stats` group memcached does not know.
pub const UNKNOWN: &[u8] = b"ERROR\r\n";

/// The group the `stats` request `req` (its whole line) asks for.
pub fn group(req: &[u8]) -> StatsGroup<'_> {
    let line = req
        .strip_suffix(b"\r\n")
        .or_else(|| req.strip_suffix(b"\n"))
        .unwrap_or(req);
    let mut args = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).skip(1);
    match args.next() {
        None => StatsGroup::General,
        Some(b"reset") => StatsGroup::Reset,
        Some(b"settings") => StatsGroup::Settings,
        Some(
            group @ (b"slabs" | b"items" | b"sizes" | b"conns" | b"extstore" | b"detail"
            | b"cachedump"),
        ) => StatsGroup::ServerOnly(group),
        Some(_) => StatsGroup::Unknown,
    }
}

/// The reply to a group only servers have: `CLIENT_ERROR` naming it, a
/// complete reply.
pub fn server_only(group: &[u8]) -> Vec<u8> {
    format!(
        "CLIENT_ERROR stats {} is kept by each memcached server, not by the proxy: ask the servers directly\r\n",
        String::from_utf8_lossy(group)
    )
    .into_bytes()
}

/// The reply listing `rows` (`STAT <name> <value>` each, then `END`).
pub fn listing<'a, V: std::fmt::Display + 'a>(
    rows: impl IntoIterator<Item = (&'a str, V)>,
) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut s = String::new();
    for (k, v) in rows {
        let _ = write!(s, "STAT {k} {v}\r\n");
    }
    s.push_str("END\r\n");
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups() {
        assert_eq!(group(b"stats\r\n"), StatsGroup::General);
        assert_eq!(group(b"stats \n"), StatsGroup::General);
        assert_eq!(group(b"stats  settings\r\n"), StatsGroup::Settings);
        assert_eq!(group(b"stats reset\r\n"), StatsGroup::Reset);
        assert_eq!(group(b"stats slabs\r\n"), StatsGroup::ServerOnly(b"slabs"));
        assert_eq!(
            group(b"stats cachedump 1 1\r\n"),
            StatsGroup::ServerOnly(b"cachedump")
        );
        assert_eq!(group(b"stats nonsense\r\n"), StatsGroup::Unknown);
    }

    #[test]
    fn replies() {
        assert_eq!(
            listing([("pid", "7".to_string()), ("pool", "p".to_string())]),
            b"STAT pid 7\r\nSTAT pool p\r\nEND\r\n"
        );
        assert_eq!(listing::<String>([]), b"END\r\n");
        assert_eq!(
            server_only(b"items"),
            b"CLIENT_ERROR stats items is kept by each memcached server, not by the proxy: ask the servers directly\r\n"
        );
    }
}
