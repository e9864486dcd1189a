//! Redis transactions as the proxy answers them (WATCH, MULTI, EXEC,
//! DISCARD, UNWATCH on a server connection pinned to the client): which
//! commands it answers itself, with redis-server's replies, and the
//! commands it sends the pinned connection of its own accord.

use super::{reply, Cmd, RedisOp};
use crate::proto::Op;

/// `EXEC` of a transaction a command was refused in while queueing.
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
/// `MULTI`, sent once a transaction begun here has its connection.
pub const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
/// `DISCARD`, sent when a transaction ends in `EXECABORT`: the server
/// forgets the commands queued.
pub const DISCARD: &[u8] = b"*1\r\n$7\r\nDISCARD\r\n";

/// What becomes of a transaction command (`name`, upper case) given the
/// client's transaction state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnAnswer {
    /// Sent to the pinned connection (opened first if need be).
    Forward,
    /// `MULTI`: the transaction begins; sent on when a connection is
    /// pinned, else answered `+OK` here and sent once one is.
    Begin,
    /// Refused with this error; the transaction state stays.
    Refuse(Vec<u8>),
    /// `EXEC` after a refused command: `DISCARD` on the pinned connection,
    /// the transaction ends, the client gets [`EXECABORT`].
    Abort,
    /// Ends a transaction no connection is pinned for yet, answered here
    /// with these bytes.
    End(&'static [u8]),
}

/// The answer to `name` in a transaction: `multi` (inside MULTI),
/// `dirty` (a command was refused while queueing), `pinned` (a server
/// connection is pinned to the client).
pub fn answer(name: &str, multi: bool, dirty: bool, pinned: bool) -> TxnAnswer {
    match name {
        "MULTI" if multi => TxnAnswer::Refuse(reply::err_line("MULTI calls can not be nested")),
        "MULTI" => TxnAnswer::Begin,
        "EXEC" | "DISCARD" if !multi => {
            TxnAnswer::Refuse(reply::err_line(&format!("{name} without MULTI")))
        }
        "WATCH" if multi => TxnAnswer::Refuse(reply::err_line("WATCH inside MULTI is not allowed")),
        "EXEC" if dirty => TxnAnswer::Abort,
        "EXEC" if !pinned => TxnAnswer::End(reply::EMPTY_ARRAY),
        "DISCARD" if !pinned => TxnAnswer::End(reply::OK),
        // Inside MULTI, UNWATCH is queued like any command.
        "UNWATCH" if !pinned && !multi => TxnAnswer::End(reply::OK),
        _ => TxnAnswer::Forward,
    }
}

/// Whether `name` (upper case), sent on the pinned connection, ends the
/// transaction once answered: EXEC, DISCARD, and UNWATCH outside MULTI
/// (inside, it is queued).
pub fn ends(name: &str, multi: bool) -> bool {
    matches!(name, "EXEC" | "DISCARD") || (name == "UNWATCH" && !multi)
}

/// The operation the commands sent of the proxy's own accord ([`MULTI`],
/// [`DISCARD`]) carry: their replies are read as MULTI's.
pub fn internal_op() -> Option<Op> {
    let cmd = Cmd::lookup(b"MULTI")?;
    Some(Op::Redis(RedisOp {
        cmd,
        class: cmd.class(),
    }))
}

/// The refusal of a command whose keys are not all on the transaction's
/// one server.
pub fn keys_elsewhere(name: &str) -> Vec<u8> {
    reply::err_line(&format!(
        "{name} in a transaction: its keys must map to the transaction's one server (use a hash tag, e.g. {{user1}}.a {{user1}}.b)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use TxnAnswer::*;

    fn err(r: TxnAnswer) -> String {
        match r {
            Refuse(e) => String::from_utf8(e).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn answers() {
        assert_eq!(answer("MULTI", false, false, false), Begin);
        assert_eq!(answer("MULTI", false, false, true), Begin);
        assert_eq!(
            err(answer("MULTI", true, false, true)),
            "-ERR MULTI calls can not be nested\r\n"
        );
        assert_eq!(
            err(answer("EXEC", false, false, true)),
            "-ERR EXEC without MULTI\r\n"
        );
        assert_eq!(
            err(answer("DISCARD", false, false, false)),
            "-ERR DISCARD without MULTI\r\n"
        );
        assert_eq!(
            err(answer("WATCH", true, false, true)),
            "-ERR WATCH inside MULTI is not allowed\r\n"
        );
        assert_eq!(answer("WATCH", false, false, false), Forward);
        assert_eq!(answer("EXEC", true, true, true), Abort);
        assert_eq!(answer("EXEC", true, true, false), Abort);
        assert_eq!(answer("EXEC", true, false, false), End(b"*0\r\n"));
        assert_eq!(answer("EXEC", true, false, true), Forward);
        assert_eq!(answer("DISCARD", true, true, false), End(b"+OK\r\n"));
        assert_eq!(answer("DISCARD", true, false, true), Forward);
        assert_eq!(answer("UNWATCH", false, false, false), End(b"+OK\r\n"));
        assert_eq!(answer("UNWATCH", true, false, false), Forward);
        assert_eq!(answer("UNWATCH", false, false, true), Forward);
        assert_eq!(answer("GET", true, false, true), Forward);
    }

    #[test]
    fn what_ends_it() {
        assert!(ends("EXEC", true) && ends("DISCARD", true));
        assert!(ends("UNWATCH", false) && !ends("UNWATCH", true));
        assert!(!ends("WATCH", false) && !ends("MULTI", false) && !ends("GET", true));
        assert!(matches!(internal_op(), Some(Op::Redis(op)) if op.cmd.name() == "MULTI"));
    }

    #[test]
    fn commands_sent() {
        let mut o = Vec::new();
        reply::command(&[b"MULTI"], &mut o);
        assert_eq!(o, MULTI);
        o.clear();
        reply::command(&[b"DISCARD"], &mut o);
        assert_eq!(o, DISCARD);
        assert!(keys_elsewhere("SET").starts_with(b"-ERR SET in a transaction: "));
        assert!(EXECABORT.starts_with(b"-EXECABORT "));
    }
}
