//! The commands that move one key between servers, written the same way
//! by the migrator (`client.rs`), a worker pulling a key on demand
//! (`worker/migrate.rs`) and a pool warming from another
//! (`worker/warm.rs`). Redis: `DUMP` + `PTTL` read the key, `RESTORE`
//! without `REPLACE` writes it, `DEL` removes it; or the old owner sends
//! it itself, `MIGRATE` without `REPLACE`. memcached (meta commands):
//! `mg k v f t` reads it, `ms ... ME` (add) writes it, `md` removes it.

use crate::proto::redis::reply;

/// A RESP command of the given arguments.
pub fn resp_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    reply::command(args, &mut out);
    out
}

/// Where a Redis `MIGRATE` sends keys: the new owner as its old owner
/// reaches it (the address walnut has for it), with the pool's database
/// and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub db: u32,
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Target {
    /// New server `addr` of `pool` as a `MIGRATE` names it, when the old
    /// owners can send to it themselves: a Redis pool without TLS to its
    /// servers (`MIGRATE` would connect in plain text), reached over TCP.
    pub fn of(
        pool: &crate::config::PoolConfig,
        addr: &crate::config::ServerAddr,
    ) -> Option<Target> {
        if !pool.redis || pool.security.server_tls.is_some() {
            return None;
        }
        match addr {
            crate::config::ServerAddr::Tcp { host, port } => Some(Target {
                host: host.clone(),
                port: *port,
                db: pool.redis_db,
                user: pool.security.redis_auth_user.clone(),
                password: pool.redis_auth.clone(),
            }),
            crate::config::ServerAddr::Unix { .. } => None,
        }
    }
}

/// `MIGRATE host port "" db timeout [AUTH pw | AUTH2 user pw] KEYS k...`
/// without `REPLACE` (a key the new owner has is left where it is, and
/// the server answers `BUSYKEY`); `timeout_ms` bounds each of the old
/// owner's waits on the new one.
pub fn migrate(to: &Target, timeout_ms: u64, keys: &[&[u8]]) -> Vec<u8> {
    let port = to.port.to_string();
    let db = to.db.to_string();
    let timeout = timeout_ms.to_string();
    let mut args: Vec<&[u8]> = vec![
        b"MIGRATE",
        to.host.as_bytes(),
        port.as_bytes(),
        b"",
        db.as_bytes(),
        timeout.as_bytes(),
    ];
    match (&to.user, &to.password) {
        (Some(u), Some(p)) => args.extend([&b"AUTH2"[..], u.as_bytes(), p.as_bytes()]),
        (None, Some(p)) => args.extend([&b"AUTH"[..], p.as_bytes()]),
        _ => {}
    }
    args.push(b"KEYS");
    args.extend(keys);
    resp_command(&args)
}

/// `DUMP key`: the key's value, serialized.
pub fn dump(key: &[u8]) -> Vec<u8> {
    resp_command(&[b"DUMP", key])
}

/// `PTTL key`: its time to live in ms (-1: none, -2: no key).
pub fn pttl(key: &[u8]) -> Vec<u8> {
    resp_command(&[b"PTTL", key])
}

/// `DEL key`.
pub fn del(key: &[u8]) -> Vec<u8> {
    resp_command(&[b"DEL", key])
}

/// The `RESTORE` that recreates `key` from its `DUMP` payload and `PTTL`.
pub fn restore(key: &[u8], pttl: i64, payload: &[u8]) -> Vec<u8> {
    let ttl = restore_ttl(pttl);
    resp_command(&[b"RESTORE", key, ttl.as_bytes(), payload])
}

/// The TTL argument of the `RESTORE` that recreates a key whose `PTTL`
/// was `pttl`: 0 (no expiry) for -1, and at least 1 ms for a key that
/// has a TTL — `PTTL` answers 0 for a key in its last millisecond, which
/// `RESTORE` would read as "never expires".
fn restore_ttl(pttl: i64) -> String {
    match pttl {
        ..0 => "0".to_string(),
        0 => "1".to_string(),
        n => n.to_string(),
    }
}

/// A memcached key on a meta command line: as it is, or base64 with ` b`.
pub fn meta_key(key: &[u8]) -> (Vec<u8>, &'static str) {
    let plain = !key.is_empty() && key.len() <= 250 && key.iter().all(|&b| b > b' ' && b != 0x7f);
    if plain {
        (key.to_vec(), "")
    } else {
        use base64::Engine;
        (
            base64::engine::general_purpose::STANDARD
                .encode(key)
                .into_bytes(),
            " b",
        )
    }
}

/// `mg <key> v f t`: the value with its flags and TTL.
pub fn mc_get(key: &[u8]) -> Vec<u8> {
    meta_line("mg", key, " v f t")
}

/// `md <key>`.
pub fn mc_delete(key: &[u8]) -> Vec<u8> {
    meta_line("md", key, "")
}

/// `<cmd> <key>[ b]<rest>\r\n`.
fn meta_line(cmd: &str, key: &[u8], rest: &str) -> Vec<u8> {
    let (k, b) = meta_key(key);
    let mut line = Vec::with_capacity(cmd.len() + k.len() + b.len() + rest.len() + 3);
    line.extend_from_slice(cmd.as_bytes());
    line.push(b' ');
    line.extend_from_slice(&k);
    line.extend_from_slice(b.as_bytes());
    line.extend_from_slice(rest.as_bytes());
    line.extend_from_slice(b"\r\n");
    line
}

/// The `ms ... ME` (add: a value written meanwhile wins) that recreates an
/// item that `mg ... v f t` read with `flags` and `ttl` seconds (-1: none).
pub fn mc_store(key: &[u8], flags: impl std::fmt::Display, ttl: i64, value: &[u8]) -> Vec<u8> {
    let (k, b) = meta_key(key);
    let mut store = Vec::with_capacity(k.len() + value.len() + 48);
    store.extend_from_slice(b"ms ");
    store.extend_from_slice(&k);
    store.extend_from_slice(
        format!(" {}{b} F{flags} T{} ME\r\n", value.len(), mc_store_ttl(ttl)).as_bytes(),
    );
    store.extend_from_slice(value);
    store.extend_from_slice(b"\r\n");
    store
}

/// The `T` flag of a memcached `ms` that copies a key whose `mg ... t`
/// said `ttl` seconds: -1 (no expiry) is `T0`, and a key in its last
/// second is given one more (`T0` would make it immortal).
fn mc_store_ttl(ttl: i64) -> i64 {
    match ttl {
        ..0 => 0,
        0 => 1,
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mc_store_ttl_keeps_a_key_in_its_last_second_mortal() {
        assert_eq!(mc_store_ttl(-1), 0);
        assert_eq!(mc_store_ttl(0), 1);
        assert_eq!(mc_store_ttl(300), 300);
    }

    #[test]
    fn restore_ttl_keeps_a_key_in_its_last_millisecond_mortal() {
        assert_eq!(restore_ttl(-1), "0");
        assert_eq!(restore_ttl(0), "1");
        assert_eq!(restore_ttl(1500), "1500");
    }

    #[test]
    fn reads_and_deletes() {
        assert_eq!(dump(b"k"), b"*2\r\n$4\r\nDUMP\r\n$1\r\nk\r\n");
        assert_eq!(pttl(b"k"), b"*2\r\n$4\r\nPTTL\r\n$1\r\nk\r\n");
        assert_eq!(del(b"k"), b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n");
    }

    #[test]
    fn keys_that_cannot_go_on_a_line_are_encoded() {
        assert_eq!(meta_key(b"user:1"), (b"user:1".to_vec(), ""));
        assert_eq!(meta_key(b"a b"), (b"YSBi".to_vec(), " b"));
        assert_eq!(meta_key(b"\x00").1, " b");
    }

    #[test]
    fn commands_as_the_servers_read_them() {
        assert_eq!(
            resp_command(&[b"DEL", b"k"]),
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n"
        );
        assert_eq!(
            restore(b"k", 0, b"P"),
            b"*4\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$1\r\n1\r\n$1\r\nP\r\n"
        );
        let to = Target {
            host: "127.0.0.1".into(),
            port: 6380,
            db: 2,
            user: None,
            password: Some("pw".into()),
        };
        assert_eq!(
            migrate(&to, 500, &[b"a", b"b"]),
            resp_command(&[
                b"MIGRATE",
                b"127.0.0.1",
                b"6380",
                b"",
                b"2",
                b"500",
                b"AUTH",
                b"pw",
                b"KEYS",
                b"a",
                b"b"
            ])
        );
        let to = Target {
            user: Some("mover".into()),
            password: Some("pw".into()),
            ..to
        };
        assert!(migrate(&to, 500, &[b"a"])
            .ends_with(b"$5\r\nAUTH2\r\n$5\r\nmover\r\n$2\r\npw\r\n$4\r\nKEYS\r\n$1\r\na\r\n"));
        assert_eq!(mc_get(b"k"), b"mg k v f t\r\n");
        assert_eq!(mc_get(b"a b"), b"mg YSBi b v f t\r\n");
        assert_eq!(mc_delete(b"k"), b"md k\r\n");
        assert_eq!(mc_delete(b"a b"), b"md YSBi b\r\n");
        assert_eq!(mc_store(b"k", 7, -1, b"hi"), b"ms k 2 F7 T0 ME\r\nhi\r\n");
        assert_eq!(
            mc_store(b"a b", "0", 30, b""),
            b"ms YSBi 0 b F0 T30 ME\r\n\r\n"
        );
    }
}
