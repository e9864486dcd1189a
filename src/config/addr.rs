//! `listen:` and `servers:` strings, parsed as twemproxy 0.5 does.
//!
//! Both are split from the right: a listen address is `host:port` (so IPv6
//! literals such as `::1:22121` work) or `/path [octal-permissions]`; a server
//! is `host:port:weight [name]` or `/path:weight [name]`.

use std::path::PathBuf;

/// The memcached port that libmemcached-compatible ketama leaves out of a
/// server's hash name.
pub const KETAMA_DEFAULT_PORT: u16 = 11211;

/// Longest unix socket path accepted (`sun_path` holds 108 bytes with the NUL).
pub const UNIX_PATH_MAX: usize = 107;

/// Where a pool listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    /// `host:port`; `host` is an IP literal or a name resolved at start-up.
    Tcp {
        /// Host as written (IPv6 brackets removed).
        host: String,
        /// TCP port, 1..=65535.
        port: u16,
    },
    /// `/path [perm]`: a unix socket.
    Unix {
        /// Socket path.
        path: PathBuf,
        /// Octal mode to chmod the socket to; `None` leaves it as created
        /// (also when written as 0, as twemproxy does).
        perm: Option<u32>,
    },
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            ListenAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            ListenAddr::Unix { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

/// Where a backend server is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerAddr {
    /// `host:port`; the host is resolved on each new connection.
    Tcp {
        /// Host as written.
        host: String,
        /// TCP port, 1..=65535.
        port: u16,
    },
    /// A unix socket path.
    Unix {
        /// Socket path.
        path: PathBuf,
    },
}

/// `host:port` (IPv6 in brackets) or the socket path, for logs and admin
/// replies.
impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            ServerAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            ServerAddr::Unix { path } => write!(f, "{}", path.display()),
        }
    }
}

/// One backend server of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Address to connect to.
    pub addr: ServerAddr,
    /// Ketama / modula weight, at least 1.
    pub weight: u32,
    /// The `[name]` given after the weight. Also set when the address text
    /// differs from its canonical form (e.g. a port written `011211`), so
    /// that hashing keeps twemproxy's exact name.
    pub name: Option<String>,
    /// Line of the entry in the configuration file.
    pub line: usize,
}

impl ServerConfig {
    /// The string ketama hashes for this server: the name if given; else
    /// `host:port`, or `host` alone when the port is 11211; a unix socket
    /// hashes as its path followed by `:` (twemproxy keeps the separator).
    pub fn ketama_name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match &self.addr {
            ServerAddr::Tcp { host, port } if *port == KETAMA_DEFAULT_PORT => host.clone(),
            ServerAddr::Tcp { host, port } => format!("{host}:{port}"),
            ServerAddr::Unix { path } => format!("{}:", path.display()),
        }
    }

    /// The key of this server in the stats JSON: twemproxy uses the same
    /// name it hashes (`server->name`).
    pub fn stats_name(&self) -> String {
        self.ketama_name()
    }
}

/// twemproxy's `nc_atoi`: decimal digits only, no sign, accumulated in a
/// 32-bit `int` (so very long numbers wrap); a negative result is refused.
pub(crate) fn parse_uint(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let wrapped = text.bytes().fold(0u32, |v, b| {
        v.wrapping_mul(10).wrapping_add(u32::from(b - b'0'))
    });
    (wrapped <= i32::MAX as u32).then_some(wrapped)
}

/// True when `text` is a number larger than twemproxy's `int` holds.
pub(crate) fn overflows(text: &str) -> bool {
    text.trim_start_matches('0').len() > 10
        || text.parse::<u64>().map_or(true, |v| v > i32::MAX as u64)
}

fn parse_port(text: &str) -> Option<u16> {
    parse_uint(text)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
}

/// Result of parsing a listen string: the address and an optional warning.
pub(crate) type Parsed<T> = Result<(T, Option<String>), String>;

/// Parses a `listen:` value.
pub(crate) fn parse_listen(text: &str) -> Parsed<ListenAddr> {
    if text.starts_with('/') {
        return parse_unix_listen(text);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "'listen' has an invalid value '{text}': expected \"host:port\" or \"/path [permissions]\""
        ));
    };
    let Some(port) = parse_port(port) else {
        return Err(format!(
            "'listen' has an invalid port in '{text}': expected 1..65535"
        ));
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(format!("'listen' has an empty host in '{text}'"));
    }
    Ok((
        ListenAddr::Tcp {
            host: host.to_string(),
            port,
        },
        None,
    ))
}

fn parse_unix_listen(text: &str) -> Parsed<ListenAddr> {
    let (path, perm_text) = match text.rsplit_once(' ') {
        Some((path, perm)) => (path, Some(perm)),
        None => (text, None),
    };
    if path.len() > UNIX_PATH_MAX {
        return Err(format!(
            "'listen' unix socket path is longer than {UNIX_PATH_MAX} bytes"
        ));
    }
    let mut warning = None;
    let perm = match perm_text {
        None => None,
        Some(p) => {
            let (value, clean) = parse_octal_prefix(p);
            if value > 0o777 {
                return Err(format!(
                    "'listen' has an invalid file permission '{p}' in \"socket_path permissions\": expected octal 0..0777"
                ));
            }
            if !clean {
                warning = Some(if value == 0 {
                    format!("'listen' permission '{p}' is not an octal number; the socket mode is left unchanged")
                } else {
                    format!(
                        "'listen' permission '{p}' is not a plain octal number; using {value:#o}"
                    )
                });
            }
            (value != 0).then_some(value)
        }
    };
    Ok((
        ListenAddr::Unix {
            path: PathBuf::from(path),
            perm,
        },
        warning,
    ))
}

/// `strtol(text, NULL, 8)` as twemproxy uses it: leading blanks, an optional
/// sign, then octal digits up to the first other character. Returns the
/// value (saturated above 0o777 when negative or huge) and whether the
/// whole text was a plain octal number.
fn parse_octal_prefix(text: &str) -> (u32, bool) {
    let t = text.trim_start();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = digits
        .bytes()
        .take_while(|b| (b'0'..=b'7').contains(b))
        .count();
    let mut value: u32 = 0;
    for b in digits.bytes().take(n) {
        value = value.saturating_mul(8).saturating_add(u32::from(b - b'0'));
    }
    if negative && value != 0 {
        value = u32::MAX;
    }
    let clean = n > 0 && n == digits.len() && !negative && t.len() == text.len();
    (value, clean)
}

/// Parses one `servers:` entry, `host:port:weight [name]` or
/// `/path:weight [name]`. Returns the server and an optional warning.
pub(crate) fn parse_server(text: &str, line: usize) -> Parsed<ServerConfig> {
    let format_err = || {
        format!(
            "has an invalid format: expected \"host:port:weight [name]\" or \"/path:weight [name]\", got '{text}'"
        )
    };
    let mut warning = None;
    let (spec, name) = match text.rsplit_once(' ') {
        Some((spec, name)) => (spec, Some(name)),
        None => (text, None),
    };
    let Some((addr_port, weight)) = spec.rsplit_once(':') else {
        return Err(format_err());
    };
    let unix = text.starts_with('/');
    let (host, port_text) = if unix {
        if addr_port.contains(':') {
            return Err(format_err());
        }
        (addr_port, None)
    } else {
        match addr_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => return Err(format_err()),
        }
    };
    let weight = match parse_uint(weight) {
        None => {
            return Err(format!(
                "has an invalid weight '{weight}': expected a number >= 1"
            ))
        }
        Some(0) => return Err("has a zero weight: expected a number >= 1".to_string()),
        Some(w) => w,
    };
    let addr = match port_text {
        None => {
            if host.len() > UNIX_PATH_MAX {
                return Err(format!(
                    "unix socket path is longer than {UNIX_PATH_MAX} bytes"
                ));
            }
            ServerAddr::Unix {
                path: PathBuf::from(host),
            }
        }
        Some(p) => {
            let Some(port) = parse_port(p) else {
                return Err(format!("has an invalid port '{p}': expected 1..65535"));
            };
            if host.is_empty() {
                warning = Some("has an empty host; connections to it will fail".to_string());
            }
            ServerAddr::Tcp {
                host: host.to_string(),
                port,
            }
        }
    };
    let mut server = ServerConfig {
        addr,
        weight,
        name: name.map(str::to_string),
        line,
    };
    if server.name.as_deref() == Some("") {
        warning = Some("has an empty name after the weight".to_string());
    }
    // Keep twemproxy's exact hash name when the port text is not canonical.
    if let (None, ServerAddr::Tcp { port, .. }, Some(p)) = (&server.name, &server.addr, port_text) {
        if *port != KETAMA_DEFAULT_PORT && p != port.to_string() {
            server.name = Some(format!("{host}:{p}"));
        }
    }
    Ok((server, warning))
}

/// True when a TCP listen host is an IP literal or resolves.
pub(crate) fn listen_resolves(addr: &ListenAddr) -> bool {
    use std::net::{IpAddr, ToSocketAddrs};
    match addr {
        ListenAddr::Unix { .. } => true,
        ListenAddr::Tcp { host, .. } if host.parse::<IpAddr>().is_ok() => true,
        ListenAddr::Tcp { host, port } => (host.as_str(), *port)
            .to_socket_addrs()
            .is_ok_and(|mut a| a.next().is_some()),
    }
}

/// A listen address written as the configuration spells it.
pub(crate) fn listen_text(l: &ListenAddr) -> String {
    match l {
        // Written from the right as twemproxy parses it: `::1:22121`.
        ListenAddr::Tcp { host, port } => format!("{host}:{port}"),
        ListenAddr::Unix {
            path,
            perm: Some(p),
        } => format!("{} {p:04o}", path.display()),
        ListenAddr::Unix { path, perm: None } => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(text: &str) -> ServerConfig {
        match parse_server(text, 7) {
            Ok((s, _)) => s,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn listen_forms() {
        let tcp = |h: &str, p| ListenAddr::Tcp {
            host: h.into(),
            port: p,
        };
        assert_eq!(
            parse_listen("127.0.0.1:22121").unwrap().0,
            tcp("127.0.0.1", 22121)
        );
        assert_eq!(parse_listen("localhost:1").unwrap().0, tcp("localhost", 1));
        assert_eq!(parse_listen("::1:22121").unwrap().0, tcp("::1", 22121));
        assert_eq!(parse_listen("[::1]:22121").unwrap().0, tcp("::1", 22121));
        assert_eq!(
            parse_listen("0.0.0.0:65535").unwrap().0,
            tcp("0.0.0.0", 65535)
        );
        let unix = |p: &str, perm| ListenAddr::Unix {
            path: p.into(),
            perm,
        };
        assert_eq!(
            parse_listen("/tmp/a.sock").unwrap().0,
            unix("/tmp/a.sock", None)
        );
        assert_eq!(
            parse_listen("/tmp/a.sock 0666").unwrap().0,
            unix("/tmp/a.sock", Some(0o666))
        );
        assert_eq!(
            parse_listen("/tmp/a.sock 755").unwrap().0,
            unix("/tmp/a.sock", Some(0o755))
        );
        assert_eq!(
            parse_listen("/tmp/a.sock 0").unwrap().0,
            unix("/tmp/a.sock", None)
        );
    }

    #[test]
    fn listen_lenient_permissions_warn() {
        let (addr, warn) = parse_listen("/tmp/a.sock 0668").unwrap();
        assert_eq!(
            addr,
            ListenAddr::Unix {
                path: "/tmp/a.sock".into(),
                perm: Some(0o66)
            }
        );
        assert!(warn.is_some());
        let (addr, warn) = parse_listen("/tmp/a.sock abc").unwrap();
        assert_eq!(
            addr,
            ListenAddr::Unix {
                path: "/tmp/a.sock".into(),
                perm: None
            }
        );
        assert!(warn.is_some());
    }

    #[test]
    fn listen_rejects() {
        for bad in [
            "127.0.0.1",
            "127.0.0.1:",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:-1",
            "127.0.0.1:22121x",
            ":22121",
            "/tmp/a.sock 1000",
            "/tmp/a.sock -1",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
        let long = format!("/{}", "a".repeat(UNIX_PATH_MAX));
        assert!(parse_listen(&long).is_err());
    }

    #[test]
    fn server_forms() {
        let s = server("127.0.0.1:11211:1");
        assert_eq!(
            s.addr,
            ServerAddr::Tcp {
                host: "127.0.0.1".into(),
                port: 11211
            }
        );
        assert_eq!((s.weight, s.name.as_deref(), s.line), (1, None, 7));
        assert_eq!(s.ketama_name(), "127.0.0.1");
        let s = server("127.0.0.1:11212:3");
        assert_eq!(s.ketama_name(), "127.0.0.1:11212");
        assert_eq!(s.stats_name(), "127.0.0.1:11212");
        let s = server("127.0.0.1:6379:1 server1");
        assert_eq!(s.name.as_deref(), Some("server1"));
        assert_eq!(s.ketama_name(), "server1");
        let s = server("::1:6379:2");
        assert_eq!(
            s.addr,
            ServerAddr::Tcp {
                host: "::1".into(),
                port: 6379
            }
        );
        let s = server("/tmp/mc.sock:10 mc");
        assert_eq!(
            s.addr,
            ServerAddr::Unix {
                path: "/tmp/mc.sock".into()
            }
        );
        assert_eq!((s.weight, s.ketama_name()), (10, "mc".to_string()));
        let s = server("/tmp/mc.sock:1");
        assert_eq!(s.ketama_name(), "/tmp/mc.sock:");
        let s = server("cache.example.com:11211:1");
        assert_eq!(s.ketama_name(), "cache.example.com");
    }

    #[test]
    fn server_noncanonical_port_keeps_text() {
        assert_eq!(server("h:022121:1").ketama_name(), "h:022121");
        assert_eq!(server("h:011211:1").ketama_name(), "h");
    }

    #[test]
    fn server_rejects() {
        for bad in [
            "127.0.0.1:11211",
            "127.0.0.1",
            "127.0.0.1:11211:0",
            "127.0.0.1:11211:-1",
            "127.0.0.1:11211:x",
            "127.0.0.1:0:1",
            "127.0.0.1:65536:1",
            "127.0.0.1:abc:1",
            "127.0.0.1:11211:1 two words",
            "/tmp/a:b.sock:1",
            "/tmp/a.sock",
        ] {
            assert!(parse_server(bad, 1).is_err(), "{bad}");
        }
    }

    #[test]
    fn uint_rules() {
        assert_eq!(parse_uint("0"), Some(0));
        assert_eq!(parse_uint("2147483647"), Some(i32::MAX as u32));
        assert_eq!(parse_uint("2147483648"), None);
        // Wraps as a C int does: 2^32 + 1 is 1.
        assert_eq!(parse_uint("4294967297"), Some(1));
        assert!(overflows("4294967297") && !overflows("2147483647"));
        assert_eq!(parse_uint("-1"), None);
        assert_eq!(parse_uint("+1"), None);
        assert_eq!(parse_uint(""), None);
        assert_eq!(parse_uint("1.5"), None);
    }
}
