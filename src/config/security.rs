//! A pool's TLS and ACL keys: TLS on its listener (`tls_cert`, `tls_key`,
//! `tls_client_ca`), TLS to its servers (`server_tls`, `server_tls_ca`,
//! `server_tls_name`, `server_tls_cert`, `server_tls_key`), the Redis ACL
//! user walnut logs in to servers as (`redis_auth_user`) and the users
//! clients log in as (`users`).

use super::scalar::{parse_bool, parse_num, scalar_of, Report};
use super::yaml::{RawValue, Scalar};

/// TLS on a pool's listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenTls {
    /// `tls_cert:` certificate chain (PEM).
    pub cert: String,
    /// `tls_key:` private key (PEM).
    pub key: String,
    /// `tls_client_ca:` clients must present a certificate signed by it.
    pub client_ca: Option<String>,
    /// `tls_handshake_timeout:` ms a client may take to finish its
    /// handshake before it is closed (default 10000).
    pub handshake_timeout_ms: u64,
    /// When `cert` expires (epoch seconds), read with the configuration:
    /// `/metrics` shows the days left.
    pub not_after: Option<i64>,
    /// A hash of the certificate, key and CA files' bytes: files renewed
    /// under the same names make a reload a change (new workers load them).
    pub files: u64,
}

/// TLS to a pool's servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// `server_tls_ca:` CA bundle servers are verified with (default: the
    /// system bundle).
    pub ca: Option<String>,
    /// `server_tls_name:` the name every server's certificate must carry
    /// (default: each server's host as written in `servers`).
    pub name: Option<String>,
    /// `server_tls_cert:` client certificate walnut presents.
    pub cert: Option<String>,
    /// `server_tls_key:` its key.
    pub key: Option<String>,
    /// `server_tls_handshake_timeout:` ms a server connection may take to
    /// finish its TLS handshake before it is closed and the requests
    /// queued on it fail (default 10000). A server that accepts and never
    /// answers would otherwise hold them for as long as the pool's
    /// `timeout`, or for ever in a pool without one.
    pub handshake_timeout_ms: u64,
    /// When `cert` expires (epoch seconds).
    pub not_after: Option<i64>,
    /// A hash of the CA, certificate and key files' bytes.
    pub files: u64,
}

/// One `users:` entry: `NAME PASSWORD [readonly] [~PREFIX*]...`, the
/// shape of a Redis ACL rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclUser {
    /// User name given to `AUTH user pass` / `HELLO 3 AUTH user pass`.
    pub name: String,
    /// Password.
    pub password: String,
    /// Only read commands.
    pub readonly: bool,
    /// Key prefixes it may touch; empty = every key.
    pub prefixes: Vec<String>,
}

impl AclUser {
    /// Whether `key` is one this user may touch.
    pub fn may_touch(&self, key: &[u8]) -> bool {
        self.prefixes.is_empty() || self.prefixes.iter().any(|p| key.starts_with(p.as_bytes()))
    }
}

/// A pool's TLS and ACL settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// TLS on the listener.
    pub listen_tls: Option<ListenTls>,
    /// TLS to the servers.
    pub server_tls: Option<ServerTls>,
    /// `redis_auth_user:` ACL user for `AUTH user redis_auth` to servers.
    pub redis_auth_user: Option<String>,
    /// `users:` who clients may log in as.
    pub users: Vec<AclUser>,
}

impl Security {
    /// The pool's TLS sides, built from the files its keys name.
    pub fn tls(&self) -> crate::net::tls::PoolTls {
        let mut t = crate::net::tls::PoolTls::default();
        if let Some(l) = &self.listen_tls {
            t.listen(&l.cert, &l.key, l.client_ca.as_deref());
        }
        if let Some(s) = &self.server_tls {
            let pair = s.cert.as_deref().zip(s.key.as_deref());
            t.servers(s.ca.as_deref(), pair, s.name.as_deref());
        }
        t
    }
}

/// The keys this file reads.
pub const SECURITY_KEYS: [&str; 12] = [
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "tls_handshake_timeout",
    "server_tls",
    "server_tls_ca",
    "server_tls_name",
    "server_tls_cert",
    "server_tls_key",
    "server_tls_handshake_timeout",
    "redis_auth_user",
    "users",
];

/// Validate the TLS and ACL keys of one pool. `get` finds a key's value;
/// `redis`: whether the pool speaks Redis; `has_auth`: `redis_auth` set.
pub(crate) fn validate_security<'a>(
    r: &mut Report,
    get: impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
    redis: Option<bool>,
    has_auth: bool,
) -> Option<Security> {
    let before = r.errors.len();
    let scalar = |k: &str| scalar_of(&get, k);
    let text = |k: &str| scalar(k).map(|s| s.text.clone());
    let listen_tls = listen_tls(r, &get);
    let server_tls = server_tls(r, &get);
    let redis_auth_user = text("redis_auth_user");
    if let Some(v) = scalar("redis_auth_user") {
        if redis == Some(false) {
            r.error(
                v.line,
                "'redis_auth_user' is only valid for a redis pool (add 'redis: true')",
            );
        } else if !has_auth {
            r.error(
                v.line,
                "'redis_auth_user' needs 'redis_auth' (the user's password)",
            );
        }
    }

    let users = users(r, &get, redis);
    if r.errors.len() > before {
        return None;
    }
    Some(Security {
        listen_tls,
        server_tls,
        redis_auth_user,
        users,
    })
}

/// `tls_cert`, `tls_key`, `tls_client_ca`, `tls_handshake_timeout`: TLS on
/// the listener, its files checked.
fn listen_tls<'a>(
    r: &mut Report,
    get: &impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
) -> Option<ListenTls> {
    let scalar = |k: &str| scalar_of(get, k);
    let text = |k: &str| scalar(k).map(|s| s.text.clone());
    let handshake_timeout_ms = scalar("tls_handshake_timeout")
        .map_or(Some(10_000), |v| parse_num(r, "tls_handshake_timeout", v))
        .map(|n| u64::from(n.max(1)));
    let listen_tls = match (scalar("tls_cert"), scalar("tls_key")) {
        (Some(cert), Some(key)) => Some(ListenTls {
            cert: cert.text.clone(),
            key: key.text.clone(),
            client_ca: text("tls_client_ca"),
            handshake_timeout_ms: handshake_timeout_ms.unwrap_or(10_000),
            not_after: crate::net::tls::not_after(&cert.text),
            files: files_hash(&[
                Some(&cert.text),
                Some(&key.text),
                text("tls_client_ca").as_ref(),
            ]),
        }),
        (Some(v), None) => {
            r.error(v.line, "'tls_cert' needs 'tls_key' too");
            None
        }
        (None, Some(v)) => {
            r.error(v.line, "'tls_key' needs 'tls_cert' too");
            None
        }
        (None, None) => {
            for k in ["tls_client_ca", "tls_handshake_timeout"] {
                if let Some(v) = scalar(k) {
                    r.error(v.line, format!("'{k}' needs 'tls_cert' and 'tls_key'"));
                }
            }
            None
        }
    };
    if let Some(t) = &listen_tls {
        let line = scalar("tls_cert").map_or(0, |s| s.line);
        if let Err(e) = crate::net::tls::server_config(&t.cert, &t.key, t.client_ca.as_deref()) {
            r.error(line, format!("TLS listener: {e}"));
        }
    }

    listen_tls
}

/// `server_tls` and its files: TLS to the servers, checked.
fn server_tls<'a>(
    r: &mut Report,
    get: &impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
) -> Option<ServerTls> {
    let scalar = |k: &str| scalar_of(get, k);
    let text = |k: &str| scalar(k).map(|s| s.text.clone());
    let on = scalar("server_tls").map_or(Some(false), |v| parse_bool(r, "server_tls", v));
    let handshake_timeout_ms = scalar("server_tls_handshake_timeout")
        .map_or(Some(10_000), |v| {
            parse_num(r, "server_tls_handshake_timeout", v)
        })
        .map_or(10_000, |n| u64::from(n.max(1)));
    let server_tls = if on == Some(true) {
        let tls = ServerTls {
            ca: text("server_tls_ca"),
            name: text("server_tls_name"),
            cert: text("server_tls_cert"),
            key: text("server_tls_key"),
            handshake_timeout_ms,
            not_after: scalar("server_tls_cert").and_then(|c| crate::net::tls::not_after(&c.text)),
            files: files_hash(&[
                text("server_tls_ca").as_ref(),
                text("server_tls_cert").as_ref(),
                text("server_tls_key").as_ref(),
            ]),
        };
        let line = scalar("server_tls").map_or(0, |s| s.line);
        let pair = match (&tls.cert, &tls.key) {
            (Some(c), Some(k)) => Some((c.as_str(), k.as_str())),
            (None, None) => None,
            _ => {
                r.error(line, "'server_tls_cert' and 'server_tls_key' go together");
                None
            }
        };
        if let Err(e) = crate::net::tls::client_config(tls.ca.as_deref(), pair) {
            r.error(line, format!("TLS to servers: {e}"));
        }
        if let Some(name) = &tls.name {
            if let Err(e) = crate::net::tls::server_name(name) {
                r.error(scalar("server_tls_name").map_or(line, |s| s.line), e);
            }
        }
        Some(tls)
    } else {
        for k in [
            "server_tls_ca",
            "server_tls_name",
            "server_tls_cert",
            "server_tls_key",
            "server_tls_handshake_timeout",
        ] {
            if let Some(v) = scalar(k) {
                r.error(v.line, format!("'{k}' needs 'server_tls: true'"));
            }
        }
        None
    };

    server_tls
}

/// `users:` lines (ACL users clients log in as).
fn users<'a>(
    r: &mut Report,
    get: &impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
    redis: Option<bool>,
) -> Vec<AclUser> {
    let mut users: Vec<AclUser> = Vec::new();
    if let Some((key, value)) = get("users") {
        if redis == Some(false) {
            r.error(
                key.line,
                "'users' is only valid for a redis pool (add 'redis: true')",
            );
        }
        let items: &[Scalar] = match value {
            RawValue::Seq(items) => items,
            RawValue::Scalar(_) => &[],
        };
        for item in items {
            match parse_user(&item.text) {
                Ok(u) if users.iter().any(|o| o.name == u.name) => {
                    r.error(item.line, format!("user '{}' is listed twice", u.name))
                }
                Ok(u) => users.push(u),
                Err(e) => r.error(item.line, e),
            }
        }
    }

    users
}

/// A hash of the bytes of the files named (unreadable ones hash as empty).
fn files_hash(paths: &[Option<&String>]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in paths.iter().flatten() {
        std::fs::read(p).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

/// `NAME PASSWORD [readonly] [~PREFIX*]...`
fn parse_user(text: &str) -> Result<AclUser, String> {
    const SHAPE: &str = "expected \"NAME PASSWORD [readonly] [~PREFIX*]...\"";
    let mut words = text.split_whitespace();
    let (Some(name), Some(password)) = (words.next(), words.next()) else {
        return Err(format!("user '{text}': {SHAPE}"));
    };
    let mut user = AclUser {
        name: name.to_string(),
        password: password.to_string(),
        readonly: false,
        prefixes: Vec::new(),
    };
    let mut all_keys = false;
    for w in words {
        if w == "readonly" {
            user.readonly = true;
        } else if let Some(pattern) = w.strip_prefix('~') {
            let Some(prefix) = pattern.strip_suffix('*') else {
                return Err(format!(
                    "user '{name}': key pattern '{w}' must end with '*' (a prefix)"
                ));
            };
            if prefix.contains(['*', '?', '[', ']']) {
                return Err(format!(
                    "user '{name}': key pattern '{w}': only a prefix followed by one '*' is supported"
                ));
            }
            if prefix.is_empty() {
                all_keys = true;
            }
            user.prefixes.push(prefix.to_string());
        } else {
            return Err(format!("user '{name}': unknown rule '{w}': {SHAPE}"));
        }
    }
    if all_keys {
        user.prefixes.clear();
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_rules() {
        let u = parse_user("app s3cret readonly ~app:* ~shared:*").unwrap();
        assert_eq!(u.name, "app");
        assert_eq!(u.password, "s3cret");
        assert!(u.readonly);
        assert!(u.may_touch(b"app:1") && u.may_touch(b"shared:x"));
        assert!(!u.may_touch(b"other"));
        let all = parse_user("admin pw ~*").unwrap();
        assert!(all.may_touch(b"anything") && !all.readonly);
        assert!(parse_user("lonely").is_err());
        assert!(parse_user("a b ~x")
            .unwrap_err()
            .contains("must end with '*'"));
        assert!(parse_user("a b ~x*y*")
            .unwrap_err()
            .contains("only a prefix"));
        assert!(parse_user("a b +@all")
            .unwrap_err()
            .contains("unknown rule"));
    }
}
