//! Per-user permissions of a pool's ACL users (`users:` entries): a
//! read-only user runs only read commands, a prefix-limited user touches
//! only keys under its prefixes. Refusals carry redis-server's `-NOPERM`
//! texts (those of Redis 7.0, Debian 12's).

use super::commands::CmdClass;
use crate::config::AclUser;
use crate::proto::{Op, Request};

/// Commands a read-only user may run beyond the read commands of
/// [`super::commands::is_read_command`]: the keyspace walks, the
/// transaction verbs and pub/sub.
const ALSO_READ: &[&str] = &[
    "SCAN",
    "DBSIZE",
    "KEYS",
    "RANDOMKEY",
    "INFO",
    "TIME",
    "XREAD",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "EVAL_RO",
    "EVALSHA_RO",
    "SORT_RO",
    "GEORADIUS_RO",
    "GEORADIUSBYMEMBER_RO",
    "BITFIELD_RO",
    "OBJECT",
    "MEMORY",
    "LCS",
    "SINTER",
    "SUNION",
    "SDIFF",
    "ZUNION",
    "ZINTER",
    "ZDIFF",
    "ZINTERCARD",
    "PFCOUNT",
];

/// Commands with keys besides the one walnut routes by (and SORT, whose
/// BY and GET patterns read other keys): a prefix-limited user may not
/// run them, since only the routing key is checked.
const MORE_KEYS: &[&str] = &[
    "RENAME",
    "RENAMENX",
    "COPY",
    "SMOVE",
    "LMOVE",
    "RPOPLPUSH",
    "SINTERSTORE",
    "SUNIONSTORE",
    "SDIFFSTORE",
    "ZUNIONSTORE",
    "ZINTERSTORE",
    "ZDIFFSTORE",
    "ZRANGESTORE",
    "BITOP",
    "PFMERGE",
    "GEOSEARCHSTORE",
    "GEORADIUS",
    "GEORADIUSBYMEMBER",
    "SORT",
    "SORT_RO",
    "SINTER",
    "SUNION",
    "SDIFF",
    "ZUNION",
    "ZINTER",
    "ZDIFF",
    "SINTERCARD",
    "ZINTERCARD",
    "LCS",
    "PFCOUNT",
    "LMPOP",
    "ZMPOP",
    "XREAD",
    "XREADGROUP",
    "OBJECT",
    "MEMORY",
];

/// Scripts and functions: the keys a script reaches are known only to the
/// server as it runs, and the server does not know walnut's users, so a
/// prefix-limited user may not run them (redis-server checks each key a
/// script touches; walnut cannot).
const SCRIPTS: &[&str] = &[
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "FCALL",
    "FCALL_RO",
];

fn is_read(name: &str) -> bool {
    super::commands::is_read_command(name) || ALSO_READ.contains(&name)
}

/// redis-server's refusal of a command to a user without it.
fn no_command(name: &str) -> Vec<u8> {
    format!(
        "-NOPERM this user has no permissions to run the '{}' command\r\n",
        name.to_ascii_lowercase()
    )
    .into_bytes()
}

/// redis-server's refusal of a key outside the user's patterns.
pub const NO_KEY: &[u8] =
    b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

/// The refusal of `req` (its bytes `bytes`) for `user`, or `None` when
/// the user may make it.
pub fn refusal(user: &AclUser, req: &Request, bytes: &[u8]) -> Option<Vec<u8>> {
    let Op::Redis(op) = req.op else {
        return None;
    };
    if op.class == CmdClass::Local {
        return None;
    }
    let name = op.cmd.name();
    if user.readonly && !is_read(name) {
        return Some(no_command(name));
    }
    if user.prefixes.is_empty() {
        return None;
    }
    let walks_keyspace = matches!(
        op.class,
        CmdClass::Broadcast | CmdClass::Scan | CmdClass::Keyless
    ) && !matches!(name, "TIME" | "INFO");
    if walks_keyspace {
        return Some(no_command(name));
    }
    if SCRIPTS.contains(&name) {
        return Some(no_command(name));
    }
    if MORE_KEYS.contains(&name) {
        // Keys walnut does not route by cannot be checked: refused as a
        // key outside the user's patterns would be.
        return Some(NO_KEY.to_vec());
    }
    if req.keys.iter().any(|k| !user.may_touch(&bytes[k.clone()])) {
        return Some(NO_KEY.to_vec());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Limits, Parse, Protocol};

    fn user(readonly: bool, prefixes: &[&str]) -> AclUser {
        AclUser {
            name: "app".into(),
            password: "pw".into(),
            readonly,
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn check(u: &AclUser, cmd: &[u8]) -> Option<String> {
        let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(cmd, &Limits::default()) else {
            panic!("{cmd:?} did not parse");
        };
        refusal(u, &req, cmd).map(|r| String::from_utf8(r).unwrap())
    }

    #[test]
    fn read_only_users_read() {
        let u = user(true, &[]);
        assert_eq!(check(&u, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), None);
        assert_eq!(
            check(&u, b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n"),
            None
        );
        assert_eq!(check(&u, b"*1\r\n$4\r\nPING\r\n"), None);
        assert_eq!(
            check(&u, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n").unwrap(),
            "-NOPERM this user has no permissions to run the 'set' command\r\n"
        );
        assert!(check(&u, b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n").is_some());
    }

    #[test]
    fn prefix_users_stay_under_their_prefixes() {
        let u = user(false, &["app:", "shared:"]);
        let no_key = String::from_utf8_lossy(NO_KEY);
        assert_eq!(
            check(&u, b"*3\r\n$3\r\nSET\r\n$5\r\napp:1\r\n$1\r\nv\r\n"),
            None
        );
        assert_eq!(
            check(&u, b"*3\r\n$4\r\nMGET\r\n$5\r\napp:1\r\n$5\r\nother\r\n").unwrap(),
            no_key
        );
        assert_eq!(
            check(&u, b"*3\r\n$6\r\nRENAME\r\n$5\r\napp:1\r\n$5\r\napp:2\r\n").unwrap(),
            no_key
        );
        assert!(check(&u, b"*2\r\n$4\r\nSCAN\r\n$1\r\n0\r\n").is_some());
        assert_eq!(check(&u, b"*1\r\n$4\r\nTIME\r\n"), None);
        // A script may reach any key, declared or not.
        assert_eq!(
            check(
                &u,
                b"*5\r\n$4\r\nEVAL\r\n$1\r\nx\r\n$1\r\n2\r\n$5\r\napp:1\r\n$5\r\nother\r\n"
            )
            .unwrap(),
            "-NOPERM this user has no permissions to run the 'eval' command\r\n"
        );
        assert!(check(
            &u,
            b"*4\r\n$5\r\nFCALL\r\n$1\r\nf\r\n$1\r\n1\r\n$5\r\napp:1\r\n"
        )
        .is_some());
        // A user without prefixes may.
        let all = user(false, &[]);
        assert_eq!(
            check(
                &all,
                b"*4\r\n$4\r\nEVAL\r\n$1\r\nx\r\n$1\r\n1\r\n$1\r\nk\r\n"
            ),
            None
        );
    }
}
