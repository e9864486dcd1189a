//! What a request lost with its server connection leads to
//! ([`Inflight::lost`]), on real protocol bytes, without sockets; what the
//! connection table answers of its clients ([`ConnTable::push_slot`],
//! [`ConnTable::resp3`]); a cluster request kept in its slot
//! ([`ReplySlot::redirected`]).

use super::*;
use crate::proto::{Limits, Parse, Protocol};
use crate::stats::slowlog::KeyPrefix;
use crate::worker::fault::ServerFault;
use crate::worker::pull::PullPart;

/// `bytes` (one request in `proto`) in flight for `waiter`.
fn inflight(proto: Protocol, bytes: &[u8], waiter: Waiter) -> Inflight {
    let Ok(Parse::Done(r)) = proto.parse_request(bytes, &Limits::default()) else {
        panic!("request parses");
    };
    let now = Instant::now();
    Inflight {
        waiter,
        op: r.op,
        len: bytes.len(),
        sent_at: now,
        timed_from: now,
        key: KeyPrefix::new(b"k"),
    }
}

fn client(seq: u64, frag: Option<u32>) -> Waiter {
    Waiter::Client {
        token: Token(7),
        id: 42,
        seq,
        frag,
    }
}

#[test]
fn a_waiting_client_gets_the_connection_error_in_its_protocol() {
    let f = inflight(Protocol::Memcache, b"get k\r\n", client(3, None));
    assert_eq!(
        f.lost(&ServerFault::Closed, Protocol::Memcache),
        Lost::Fail {
            to: ReplyTo::new(Token(7), 42, Some(3), None),
            reply: b"SERVER_ERROR Connection reset by peer\r\n".to_vec(),
        }
    );
    // A fragment of a split request keeps its fragment index.
    let f = inflight(
        Protocol::Redis,
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
        client(5, Some(1)),
    );
    assert_eq!(
        f.lost(&ServerFault::TimedOut, Protocol::Redis),
        Lost::Fail {
            to: ReplyTo::new(Token(7), 42, Some(5), Some(1)),
            reply: b"-ERR Connection timed out\r\n".to_vec(),
        }
    );
}

#[test]
fn the_proxys_own_requests_lead_to_their_own_steps() {
    let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    let lost = |w| inflight(Protocol::Redis, get, w).lost(&ServerFault::Closed, Protocol::Redis);
    assert_eq!(lost(Waiter::Internal), Lost::Nothing);
    assert_eq!(lost(Waiter::SlotMap), Lost::SlotMap);
    assert_eq!(lost(Waiter::Warm { idx: 4 }), Lost::Warm { idx: 4 });
    let pull = Waiter::Pull {
        token: Token(9),
        id: 11,
        idx: 2,
        part: PullPart::Dump,
    };
    assert_eq!(
        lost(pull),
        Lost::Pull {
            token: Token(9),
            id: 11,
            idx: 2,
            part: PullPart::Dump,
        }
    );
}

/// A table holding one client, at the returned token.
fn one_client() -> (slab::Slab<Conn>, Token) {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let c = Client::new(
        crate::net::Stream::Unix(sock),
        42,
        0,
        session,
        Instant::now(),
    );
    let mut conns = slab::Slab::new();
    let ct = Token(conns.insert(Conn::Client(Box::new(c))));
    (conns, ct)
}

#[test]
fn reply_slots_are_numbered_in_request_order_and_none_for_noreply() {
    let (mut conns, ct) = one_client();
    assert_eq!(conns.push_slot(ct, false, ReplySlot::default()), Some(0));
    assert_eq!(conns.push_slot(ct, true, ReplySlot::default()), None);
    assert_eq!(conns.push_slot(ct, false, ReplySlot::default()), Some(1));
    let c = conns.client_mut(ct.0).expect("client");
    assert_eq!(c.next_seq(), 2, "a noreply request keeps no slot");
    assert_eq!(
        conns.push_slot(Token(9), false, ReplySlot::default()),
        None,
        "gone"
    );
}

#[test]
fn a_client_speaks_resp3_once_its_session_says_so_and_a_gone_one_resp2() {
    let (mut conns, ct) = one_client();
    assert!(!conns.resp3(ct));
    let c = conns.client_mut(ct.0).expect("client");
    c.session_mut().resp3 = true;
    assert!(conns.resp3(ct));
    assert!(!conns.resp3(Token(9)), "gone");
}

#[test]
fn a_cluster_request_is_kept_in_its_slot_with_no_redirection_followed_yet() {
    let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(get, &Limits::default()) else {
        panic!("request parses");
    };
    let slot = ReplySlot::redirected(&req, get);
    let r = slot.redirect.expect("kept");
    assert_eq!(r.bytes, get);
    assert_eq!((r.hops, r.tries), (0, 0));
    assert!(r.spool.is_none() && r.feeding.is_none());
    assert!(!slot.ready && slot.multi.is_none() && slot.retry.is_none());
}
