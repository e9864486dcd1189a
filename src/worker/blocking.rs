//! Redis blocking commands (BLPOP, BLMOVE, BZPOPMIN, XREAD ... BLOCK, ...):
//! each on a server connection of its own, so nothing queued behind it
//! waits and no pool `timeout` cuts it; the connection closes with its
//! reply or its client.

use super::conn::{Conn, ConnTable, Origin, ReplySlot, ServerRef};
use super::pool::PoolRt;
use super::send_plan::{Dedicated, Reply, Sent, Usage};
use crate::proto::Request;
use mio::Token;
use slab::Slab;
use std::time::Instant;

/// How a blocking command (BLPOP, BLMOVE, XREAD ... BLOCK, ...) from `at`
/// (its pool `p`) goes out: whole, on a connection of its
/// own to its key's server (`Worker::send_dedicated` carries it out).
/// Out of line: it is no common request's.
#[cold]
pub(super) fn plan<'a>(
    p: &mut PoolRt,
    at: Origin,
    req: &'a Request,
    bytes: &'a [u8],
    now: Instant,
) -> Dedicated<'a> {
    let key = req.routing_key(bytes);
    Dedicated {
        pool: at.pool,
        server: p.key_server(key.as_ref(), req.op, at.client_id, now),
        op: req.op,
        conn: None,
        usage: Usage::Blocking,
        reply: Reply::New {
            slot: ReplySlot::default(),
            noreply: req.noreply,
        },
        note: None,
        write: Sent::Request(req, bytes),
    }
}

/// Client `ct` blocks on connection `r` too: the connections of its
/// earlier blocking requests that are closed (answered) are forgotten, so
/// that a client blocking again and again holds only those still open.
pub(super) fn block_on(conns: &mut Slab<Conn>, ct: Token, r: ServerRef) {
    let live: Vec<ServerRef> = match conns.get(ct.0) {
        Some(Conn::Client(c)) => c
            .blocked()
            .iter()
            .copied()
            .filter(|&r| conns.server_ref(r).is_some())
            .collect(),
        _ => return,
    };
    if let Some(c) = conns.client_mut(ct.0) {
        c.block_on(live, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Stream;
    use crate::worker::conn::{Client, Server};

    #[test]
    fn a_client_blocking_again_holds_only_its_open_connections() {
        let mut conns = Slab::new();
        let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
        let session = crate::proto::redis::local::Session::new(1, None, false);
        let c = Client::new(Stream::Unix(sock), 10, 0, session, Instant::now());
        let ct = Token(conns.insert(Conn::Client(Box::new(c))));
        let open = |conns: &mut Slab<Conn>, id: u64| {
            let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
            let s = Server::new(Stream::Unix(sock), id, (0, 0, 0), Instant::now(), true);
            ServerRef::new(Token(conns.insert(Conn::Server(Box::new(s)))), id)
        };
        let (a, b) = (open(&mut conns, 1), open(&mut conns, 2));
        block_on(&mut conns, ct, a);
        block_on(&mut conns, ct, b);
        let blocked = |conns: &Slab<Conn>| conns.client(ct.0).map(|c| c.blocked().to_vec());
        assert_eq!(blocked(&conns), Some(vec![a, b]));
        // `a` answered and closed, its slot taken by another connection.
        conns.remove(a.token.0);
        let c = open(&mut conns, 3);
        assert_eq!(c.token, a.token);
        let d = open(&mut conns, 4);
        block_on(&mut conns, ct, d);
        assert_eq!(blocked(&conns), Some(vec![b, d]), "a forgotten, c not its");
        block_on(&mut conns, Token(9), d);
    }
}
