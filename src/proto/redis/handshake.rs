//! The commands that open a server connection of a Redis pool, sent
//! before any client request uses it: AUTH, SELECT, READONLY (a cluster
//! pool reading from replicas) and, for a RESP3 connection, `HELLO 3`.

use super::reply::command;
use super::{Cmd, RedisOp};
use crate::proto::Op;

/// What a pool asks of its server connections.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerSetup<'a> {
    /// `redis_auth`.
    pub password: Option<&'a str>,
    /// `redis_auth_user` (a Redis 6 ACL user), with the password.
    pub user: Option<&'a str>,
    /// `redis_db`: 0 needs no SELECT.
    pub db: u32,
    /// `cluster_read_replicas`: a replica serves its master's slots.
    pub read_replicas: bool,
    /// The connection speaks RESP3.
    pub resp3: bool,
}

fn op(name: &[u8]) -> Option<Op> {
    Cmd::lookup(name).map(|cmd| {
        Op::Redis(RedisOp {
            cmd,
            class: cmd.class(),
        })
    })
}

/// The commands, in order, each with the operation its reply is read as.
pub fn handshake(s: &ServerSetup) -> Vec<(Op, Vec<u8>)> {
    let mut steps = Vec::new();
    let mut push = |name: &[u8], args: &[&[u8]]| {
        if let Some(op) = op(name) {
            let mut out = Vec::new();
            command(args, &mut out);
            steps.push((op, out));
        }
    };
    if let Some(pw) = s.password {
        match s.user {
            Some(u) => push(b"AUTH", &[b"AUTH", u.as_bytes(), pw.as_bytes()]),
            None => push(b"AUTH", &[b"AUTH", pw.as_bytes()]),
        }
    }
    if s.db != 0 {
        push(b"SELECT", &[b"SELECT", s.db.to_string().as_bytes()]);
    }
    if s.read_replicas {
        // Answered `+OK`, read as a PING's reply.
        push(b"PING", &[b"READONLY"]);
    }
    if s.resp3 {
        push(b"HELLO", &[b"HELLO", b"3"]);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &ServerSetup) -> Vec<Vec<u8>> {
        handshake(s).into_iter().map(|(_, b)| b).collect()
    }

    #[test]
    fn commands_in_order() {
        assert!(handshake(&ServerSetup::default()).is_empty());
        let all = ServerSetup {
            password: Some("pw"),
            user: Some("app"),
            db: 2,
            read_replicas: true,
            resp3: true,
        };
        assert_eq!(
            bytes(&all),
            [
                &b"*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$2\r\npw\r\n"[..],
                b"*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n",
                b"*1\r\n$8\r\nREADONLY\r\n",
                b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n",
            ]
        );
        let ops: Vec<Op> = handshake(&all).into_iter().map(|(o, _)| o).collect();
        assert_eq!(
            ops,
            [op(b"AUTH"), op(b"SELECT"), op(b"PING"), op(b"HELLO")].map(Option::unwrap)
        );
        let pw = ServerSetup {
            password: Some("pw"),
            ..ServerSetup::default()
        };
        assert_eq!(bytes(&pw), [b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"]);
        // A user without a password sends nothing.
        let user = ServerSetup {
            user: Some("app"),
            ..ServerSetup::default()
        };
        assert!(handshake(&user).is_empty());
    }
}
