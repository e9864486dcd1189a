//! Answers to the commands that depend on the client connection's state:
//! AUTH, SELECT, HELLO, CLIENT and COMMAND (`Local::RedisSession`).

use super::args::{Arg, Args};
use super::commands::{Cmd, CmdClass, KeySpec};
use super::reply;
use super::resp::parse_int;
use crate::proto::{Op, Request};

/// Reply to a command sent before AUTH when the pool requires a password.
pub const NOAUTH: &[u8] = b"-NOAUTH Authentication required\r\n";

/// Redis version the proxy announces in HELLO.
pub const ANNOUNCED_VERSION: &str = "7.2.0";

/// State of one client connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Session {
    /// Connection id (CLIENT ID, HELLO).
    pub id: u64,
    /// The client asked for RESP3 with `HELLO 3`.
    pub resp3: bool,
    /// AUTH succeeded, or no password is required.
    pub authenticated: bool,
    /// The ACL user logged in as (index into the pool's `users`);
    /// `None`: the default user.
    pub user: Option<u16>,
    /// The names the client gave itself, boxed (most clients give none,
    /// and every connection carries a `Session`): see [`Session::names`].
    names: Option<Box<Names>>,
}

/// The names a client gives itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    /// CLIENT SETNAME / HELLO SETNAME.
    pub name: Option<Vec<u8>>,
    /// CLIENT SETINFO LIB-NAME.
    pub lib_name: Option<Vec<u8>>,
    /// CLIENT SETINFO LIB-VER.
    pub lib_ver: Option<Vec<u8>>,
}

/// A session's names before it gives any.
static NO_NAMES: Names = Names {
    name: None,
    lib_name: None,
    lib_ver: None,
};

impl Session {
    /// The names the client gave itself.
    pub fn names(&self) -> &Names {
        self.names.as_deref().unwrap_or(&NO_NAMES)
    }

    /// [`Session::names`], to change them.
    pub fn names_mut(&mut self) -> &mut Names {
        self.names.get_or_insert_with(Box::default)
    }

    /// Set every name at once (carried over from a predecessor worker).
    pub fn set_names(&mut self, names: Names) {
        self.names = (names != NO_NAMES).then(|| Box::new(names));
    }

    /// A new connection: authenticated unless the pool has a password
    /// or ACL users.
    pub fn new(id: u64, password: Option<&[u8]>, has_users: bool) -> Session {
        Session {
            id,
            authenticated: password.is_none() && !has_users,
            ..Session::default()
        }
    }
}

/// Whether `req` must be refused with [`NOAUTH`] on a connection that has not
/// authenticated (everything but AUTH, HELLO and QUIT).
pub fn needs_auth(req: &Request) -> bool {
    match req.op {
        Op::Redis(op) => !(op.cmd.is("AUTH") || op.cmd.is("HELLO") || op.cmd.is("QUIT")),
        Op::Mc(_) => false,
    }
}

/// Whether `req` (its bytes `bytes`) is refused before it is routed, and
/// with what: [`NOAUTH`] on a connection that has not authenticated, an
/// ACL user's refusal (`users`: the pool's; see [`super::acl::refusal`]).
/// `None`: it goes on. A memcached request is never refused here.
#[inline]
pub fn refusal(
    session: &Session,
    users: &[crate::config::AclUser],
    req: &Request,
    bytes: &[u8],
) -> Option<Vec<u8>> {
    if !session.authenticated && needs_auth(req) {
        return Some(NOAUTH.to_vec());
    }
    // An ACL user (`users`): read-only, or limited to key prefixes.
    let user = &users[session.user? as usize];
    super::acl::refusal(user, req, bytes)
}

/// The arguments of a request as values (quotes and escapes of inline
/// commands interpreted). Used on the rare local path only.
fn values(req_bytes: &[u8]) -> Vec<Vec<u8>> {
    let args = Args::new(req_bytes);
    let all: Vec<Arg> = Args::new(req_bytes).collect();
    all.iter()
        .map(|a| {
            let mut v = Vec::new();
            args.value(a, &mut v);
            v
        })
        .collect()
}

/// Answers AUTH, SELECT, HELLO, CLIENT and COMMAND from `session` and the
/// pool's `password`, appending the reply to `out`.
pub fn answer(req_bytes: &[u8], session: &mut Session, pool: &PoolSide, out: &mut Vec<u8>) {
    let argv = values(req_bytes);
    let Some(name) = argv.first() else {
        return reply::error_reply("empty command", out);
    };
    let name = name.to_ascii_uppercase();
    let rest = &argv[1..];
    match name.as_slice() {
        b"AUTH" => answer_auth(rest, session, pool, out),
        b"SELECT" => answer_select(rest, out),
        b"HELLO" => answer_hello(rest, session, pool, out),
        b"CLIENT" => answer_client(rest, session, out),
        b"COMMAND" => answer_command(rest, session.resp3, out),
        _ => out.extend_from_slice(&reply::unsupported(&String::from_utf8_lossy(&name))),
    }
}

/// What a session command needs to know of the client's pool.
pub struct PoolSide<'a> {
    /// The pool's password (`redis_auth`), if any.
    pub password: Option<&'a [u8]>,
    /// The pool's ACL users (`users`).
    pub users: &'a [crate::config::AclUser],
    /// Whether the pool's servers speak RESP3: false once a server refused
    /// `HELLO 3` (Redis before 6), and `HELLO 3` then gets `-NOPROTO`.
    pub resp3: bool,
}

/// redis-server's reply to a protocol version it does not speak.
pub const NOPROTO: &[u8] = b"-NOPROTO sorry, this protocol version is not supported.\r\n";

/// Redis 6's reply to a wrong user name or password.
pub const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";

/// Checks credentials: `AUTH pass` and `AUTH default pass` against the
/// pool's password (twemproxy's `redis_auth`), `AUTH user pass` against
/// its `users`. `Ok` holds the user's index (`None`: the default user);
/// `Err` the error reply.
fn check_auth(args: &[Vec<u8>], pool: &PoolSide) -> Result<Option<u16>, Vec<u8>> {
    let (user, given) = match args {
        [pass] => (None, pass),
        [user, pass] if user.as_slice() == b"default" => (None, pass),
        [user, pass] => (Some(user), pass),
        _ => return Err(reply::wrong_args("auth")),
    };
    let Some(user) = user else {
        return match pool.password {
            Some(expected) if given.as_slice() == expected => Ok(None),
            Some(_) => Err(reply::err_line("invalid password")),
            // No default password but users: the default user is off.
            None if !pool.users.is_empty() => Err(WRONGPASS.to_vec()),
            None => Err(reply::err_line("Client sent AUTH, but no password is set")),
        };
    };
    pool.users
        .iter()
        .position(|u| {
            u.name.as_bytes() == user.as_slice() && u.password.as_bytes() == given.as_slice()
        })
        .map(|i| Some(i as u16))
        .ok_or_else(|| WRONGPASS.to_vec())
}

/// `AUTH [user] password` against the pool's password and users.
pub fn answer_auth(args: &[Vec<u8>], session: &mut Session, pool: &PoolSide, out: &mut Vec<u8>) {
    match check_auth(args, pool) {
        Ok(user) => {
            session.authenticated = true;
            session.user = user;
            out.extend_from_slice(b"+OK\r\n");
        }
        Err(e) => {
            if (pool.password.is_some() || !pool.users.is_empty()) && matches!(args.len(), 1 | 2) {
                session.authenticated = false;
                session.user = None;
            }
            out.extend_from_slice(&e);
        }
    }
}

/// `SELECT n`: behind the proxy every client sees database 0 (the pool's
/// `redis_db` on the servers).
pub fn answer_select(args: &[Vec<u8>], out: &mut Vec<u8>) {
    match args {
        [db] => match parse_int(db) {
            Some(0) => out.extend_from_slice(b"+OK\r\n"),
            Some(_) => reply::error_reply(
                "DB index is out of range (the proxy serves database 0 only)",
                out,
            ),
            None => reply::error_reply("value is not an integer or out of range", out),
        },
        _ => out.extend_from_slice(&reply::wrong_args("select")),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches RESP2/RESP3
/// and replies with the server description map.
pub fn answer_hello(args: &[Vec<u8>], session: &mut Session, pool: &PoolSide, out: &mut Vec<u8>) {
    let mut resp3 = session.resp3;
    if let Some(v) = args.first() {
        match parse_int(v) {
            Some(2) => resp3 = false,
            Some(3) if pool.resp3 => resp3 = true,
            Some(_) => return out.extend_from_slice(NOPROTO),
            None => {
                return reply::error_reply(
                    "Protocol version is not an integer or out of range",
                    out,
                )
            }
        }
    }
    let mut auth = None;
    let mut setname = None;
    let mut i = 1;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        let left = args.len() - i - 1;
        if opt == b"AUTH" && left >= 2 {
            auth = Some(&args[i + 1..i + 3]);
            i += 3;
        } else if opt == b"SETNAME" && left >= 1 {
            setname = Some(&args[i + 1]);
            i += 2;
        } else {
            return reply::error_reply(
                &format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                ),
                out,
            );
        }
    }
    if let Some(creds) = auth {
        match check_auth(creds, pool) {
            Ok(user) => {
                session.authenticated = true;
                session.user = user;
            }
            Err(e) => return out.extend_from_slice(&e),
        }
    }
    if !session.authenticated {
        return out.extend_from_slice(b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n");
    }
    if let Some(name) = setname {
        if let Err(e) = check_name(name) {
            return out.extend_from_slice(&e);
        }
        session.names_mut().name = (!name.is_empty()).then(|| name.clone());
    }
    session.resp3 = resp3;
    reply::map(7, resp3, out);
    reply::bulk(b"server", out);
    reply::bulk(b"redis", out);
    reply::bulk(b"version", out);
    reply::bulk(ANNOUNCED_VERSION.as_bytes(), out);
    reply::bulk(b"proto", out);
    reply::integer(if resp3 { 3 } else { 2 }, out);
    reply::bulk(b"id", out);
    reply::integer(i64::try_from(session.id).unwrap_or(i64::MAX), out);
    reply::bulk(b"mode", out);
    reply::bulk(b"standalone", out);
    reply::bulk(b"role", out);
    reply::bulk(b"master", out);
    reply::bulk(b"modules", out);
    reply::array(0, out);
}

fn check_name(name: &[u8]) -> Result<(), Vec<u8>> {
    if name.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
        Ok(())
    } else {
        Err(reply::err_line(
            "Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

/// CLIENT SETINFO, SETNAME, GETNAME, ID, INFO; other subcommands are refused.
pub fn answer_client(args: &[Vec<u8>], session: &mut Session, out: &mut Vec<u8>) {
    let Some(sub) = args.first() else {
        return out.extend_from_slice(&reply::wrong_args("client"));
    };
    let sub = sub.to_ascii_uppercase();
    match (sub.as_slice(), &args[1..]) {
        (b"SETINFO", [attr, value]) => {
            let attr = attr.to_ascii_uppercase();
            let slot = match attr.as_slice() {
                b"LIB-NAME" => &mut session.names_mut().lib_name,
                b"LIB-VER" => &mut session.names_mut().lib_ver,
                _ => {
                    return reply::error_reply(
                        &format!("Unrecognized option '{}'", String::from_utf8_lossy(&attr)),
                        out,
                    )
                }
            };
            *slot = Some(value.clone());
            out.extend_from_slice(b"+OK\r\n");
        }
        (b"SETNAME", [name]) => match check_name(name) {
            Ok(()) => {
                session.names_mut().name = (!name.is_empty()).then(|| name.clone());
                out.extend_from_slice(b"+OK\r\n");
            }
            Err(e) => out.extend_from_slice(&e),
        },
        (b"GETNAME", []) => match &session.names().name {
            Some(n) => reply::bulk(n, out),
            None => reply::null(session.resp3, out),
        },
        (b"ID", []) => reply::integer(i64::try_from(session.id).unwrap_or(i64::MAX), out),
        (b"INFO", []) => {
            let line = format!(
                "id={} name={} resp={} lib-name={} lib-ver={}\n",
                session.id,
                String::from_utf8_lossy(session.names().name.as_deref().unwrap_or_default()),
                if session.resp3 { 3 } else { 2 },
                String::from_utf8_lossy(session.names().lib_name.as_deref().unwrap_or_default()),
                String::from_utf8_lossy(session.names().lib_ver.as_deref().unwrap_or_default()),
            );
            reply::bulk(line.as_bytes(), out);
        }
        (b"SETINFO" | b"SETNAME" | b"GETNAME" | b"ID" | b"INFO", _) => {
            let full = format!("client|{}", String::from_utf8_lossy(&sub));
            out.extend_from_slice(&reply::wrong_args(&full));
        }
        _ => out.extend_from_slice(&reply::unsupported(&format!(
            "CLIENT {}",
            String::from_utf8_lossy(&sub)
        ))),
    }
}

/// Commands the proxy forwards or answers (COMMAND COUNT / LIST / INFO).
fn served() -> impl Iterator<Item = Cmd> {
    Cmd::all().filter(|c| c.class() != CmdClass::Unsupported)
}

/// One COMMAND INFO entry: name, arity (negative: at least), flags, first
/// key, last key, step, ACL categories, tips, key specs, subcommands.
fn command_entry(cmd: Cmd, out: &mut Vec<u8>) {
    let (arity, first, last, step) = match cmd.keys() {
        KeySpec::None => (-1, 0, 0, 0),
        KeySpec::At(n) => (-(i64::from(n) + 1), i64::from(n), i64::from(n), 1),
        KeySpec::All => (-2, 1, -1, 1),
        KeySpec::Pairs => (-3, 1, -1, 2),
        KeySpec::Eval => (-3, 0, 0, 0),
        KeySpec::Streams => (-4, 0, 0, 0),
        // As redis-server's COMMAND INFO gives them.
        KeySpec::AllButLast => (-3, 1, -2, 1),
        KeySpec::FirstTwo => (6, 1, 2, 1),
        KeySpec::NumKeysAt2 => (-5, 0, 0, 0),
    };
    reply::array(10, out);
    reply::bulk(cmd.name().to_ascii_lowercase().as_bytes(), out);
    reply::integer(arity, out);
    reply::array(0, out);
    reply::integer(first, out);
    reply::integer(last, out);
    reply::integer(step, out);
    for _ in 0..4 {
        reply::array(0, out);
    }
}

/// COMMAND, COMMAND COUNT / LIST / INFO / DOCS: minimal answers that let
/// redis-cli and client libraries start. DOCS is an empty map.
pub fn answer_command(args: &[Vec<u8>], resp3: bool, out: &mut Vec<u8>) {
    let Some(sub) = args.first() else {
        reply::array(served().count(), out);
        served().for_each(|c| command_entry(c, out));
        return;
    };
    match sub.to_ascii_uppercase().as_slice() {
        b"COUNT" => reply::integer(i64::try_from(served().count()).unwrap_or(0), out),
        b"LIST" => {
            reply::array(served().count(), out);
            served().for_each(|c| reply::bulk(c.name().to_ascii_lowercase().as_bytes(), out));
        }
        b"INFO" => {
            let names = &args[1..];
            if names.is_empty() {
                return answer_command(&[], resp3, out);
            }
            reply::array(names.len(), out);
            for n in names {
                match Cmd::lookup(n).filter(|c| c.class() != CmdClass::Unsupported) {
                    Some(c) => command_entry(c, out),
                    None => reply::null(resp3, out),
                }
            }
        }
        b"DOCS" => reply::map(0, resp3, out),
        other => out.extend_from_slice(&reply::unsupported(&format!(
            "COMMAND {}",
            String::from_utf8_lossy(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(req: &[u8], s: &mut Session, pw: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        let pool = PoolSide {
            password: pw,
            users: &[],
            resp3: true,
        };
        answer(req, s, &pool, &mut out);
        out
    }

    #[test]
    fn redis_py_handshake() {
        let mut s = Session::new(7, None, false);
        let r = run(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", &mut s, None);
        assert!(r.starts_with(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"));
        assert!(s.resp3);
        assert!(
            matches!(crate::proto::redis::parse_response(&r), Ok(crate::proto::Parse::Done(x)) if x.len == r.len())
        );
        assert_eq!(
            run(b"CLIENT SETINFO LIB-NAME redis-py\r\n", &mut s, None),
            b"+OK\r\n"
        );
        assert_eq!(
            run(b"CLIENT SETINFO LIB-VER 8.0.0\r\n", &mut s, None),
            b"+OK\r\n"
        );
        assert_eq!(s.names().lib_name.as_deref(), Some(&b"redis-py"[..]));
        assert_eq!(run(b"CLIENT GETNAME\r\n", &mut s, None), b"_\r\n");
        assert_eq!(run(b"CLIENT ID\r\n", &mut s, None), b":7\r\n");
        assert_eq!(run(b"HELLO 4\r\n", &mut s, None), NOPROTO);
        let old = PoolSide {
            password: None,
            users: &[],
            resp3: false,
        };
        let mut out = Vec::new();
        answer(b"HELLO 3\r\n", &mut s, &old, &mut out);
        assert_eq!(out, NOPROTO);
        assert!(s.resp3, "a refused HELLO leaves the protocol as it was");
        let r = run(b"HELLO 2\r\n", &mut s, None);
        assert!(r.starts_with(b"*14\r\n"));
    }

    #[test]
    fn auth_and_select() {
        let pw = Some(&b"secret"[..]);
        let mut s = Session::new(1, pw, false);
        assert!(!s.authenticated);
        assert!(run(b"HELLO 3\r\n", &mut s, pw).starts_with(b"-NOAUTH"));
        assert_eq!(
            run(b"AUTH nope\r\n", &mut s, pw),
            b"-ERR invalid password\r\n"
        );
        assert_eq!(run(b"AUTH secret\r\n", &mut s, pw), b"+OK\r\n");
        assert!(s.authenticated);
        let mut t = Session::new(2, None, false);
        assert_eq!(
            run(b"AUTH x\r\n", &mut t, None),
            b"-ERR Client sent AUTH, but no password is set\r\n"
        );
        let mut h = Session::new(3, pw, false);
        assert!(run(b"HELLO 3 AUTH default secret SETNAME app\r\n", &mut h, pw).starts_with(b"%7"));
        assert!(h.authenticated && h.names().name.is_some());
        assert_eq!(run(b"SELECT 0\r\n", &mut s, pw), b"+OK\r\n");
        assert!(run(b"SELECT 3\r\n", &mut s, pw).starts_with(b"-ERR DB index"));
    }

    #[test]
    fn refused_before_routing() {
        let parse = |b: &[u8]| match crate::proto::redis::parse_request(b, &Default::default()) {
            Ok(crate::proto::Parse::Done(r)) => r,
            other => panic!("{other:?}"),
        };
        let users = [crate::config::AclUser {
            name: "app".into(),
            password: "apppw".into(),
            readonly: true,
            prefixes: Vec::new(),
        }];
        let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        let auth = b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n";
        let mut s = Session::new(1, Some(b"pw"), true);
        assert_eq!(
            refusal(&s, &users, &parse(get), get).as_deref(),
            Some(NOAUTH)
        );
        assert_eq!(refusal(&s, &users, &parse(auth), auth), None);
        s.authenticated = true;
        assert_eq!(refusal(&s, &users, &parse(set), set), None);
        s.user = Some(0);
        assert_eq!(refusal(&s, &users, &parse(get), get), None);
        let no = refusal(&s, &users, &parse(set), set).unwrap();
        assert!(no.starts_with(b"-NOPERM "), "{no:?}");
        // memcached requests are never refused here.
        let mc = crate::proto::Protocol::Memcache;
        let Ok(crate::proto::Parse::Done(g)) = mc.parse_request(b"get k\r\n", &Default::default())
        else {
            panic!()
        };
        assert_eq!(
            refusal(&Session::new(2, Some(b"pw"), false), &[], &g, b"get k\r\n"),
            None
        );
    }

    #[test]
    fn acl_users_log_in() {
        let users = [crate::config::AclUser {
            name: "app".into(),
            password: "apppw".into(),
            readonly: true,
            prefixes: Vec::new(),
        }];
        let pool = PoolSide {
            password: Some(b"secret"),
            users: &users,
            resp3: true,
        };
        let auth = |req: &[u8], s: &mut Session| {
            let mut out = Vec::new();
            answer(req, s, &pool, &mut out);
            out
        };
        let mut s = Session::new(1, pool.password, true);
        assert_eq!(auth(b"AUTH app wrong\r\n", &mut s), WRONGPASS);
        assert_eq!(auth(b"AUTH nobody apppw\r\n", &mut s), WRONGPASS);
        assert!(!s.authenticated);
        assert_eq!(auth(b"AUTH app apppw\r\n", &mut s), b"+OK\r\n");
        assert_eq!((s.authenticated, s.user), (true, Some(0)));
        // Back to the default user.
        assert_eq!(auth(b"AUTH secret\r\n", &mut s), b"+OK\r\n");
        assert_eq!(s.user, None);
        let mut h = Session::new(2, pool.password, true);
        assert!(auth(b"HELLO 3 AUTH app apppw\r\n", &mut h).starts_with(b"%7"));
        assert_eq!(h.user, Some(0));
        // Users but no default password: the default user is off.
        let closed = PoolSide {
            password: None,
            users: &users,
            resp3: true,
        };
        let mut d = Session::new(3, None, true);
        assert!(!d.authenticated);
        let mut out = Vec::new();
        answer(b"AUTH anything\r\n", &mut d, &closed, &mut out);
        assert_eq!(out, WRONGPASS);
    }

    #[test]
    fn command_replies_parse() {
        let mut s = Session::new(1, None, false);
        for req in [
            &b"COMMAND\r\n"[..],
            b"COMMAND DOCS\r\n",
            b"COMMAND COUNT\r\n",
            b"COMMAND INFO get nosuch\r\n",
            b"COMMAND LIST\r\n",
        ] {
            let r = run(req, &mut s, None);
            match crate::proto::redis::parse_response(&r) {
                Ok(crate::proto::Parse::Done(x)) => assert_eq!(x.len, r.len()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(run(b"COMMAND DOCS\r\n", &mut s, None), b"*0\r\n");
    }
}
