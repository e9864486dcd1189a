//! Tests of a cluster pool's slot map, redirections and retries, and of
//! what a kept request is sent again as: pools built from configuration
//! text, connection tables of clients on socket pairs.

use super::*;
use mio::Token;

/// A cluster pool of two seeds, built from configuration text.
fn pool() -> PoolRt {
    let yaml = "rc:\n  listen: 127.0.0.1:22999\n  redis: true\n  redis_cluster: true\n  servers:\n    - 127.0.0.1:30001:1\n    - 127.0.0.1:30002:1\n";
    let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
        .expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

#[test]
fn a_slot_map_routes_keys_and_adds_the_nodes_it_names() {
    let mut p = pool();
    assert_eq!(p.servers.len(), 2);
    // Node 30001 serves 0-5460 with replica 30004; the node asked (30002,
    // written with an empty host) serves the rest.
    let reply = b"*2\r\n\
*4\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:30001\r\n$4\r\nid01\r\n\
*3\r\n$9\r\n127.0.0.1\r\n:30004\r\n$4\r\nid04\r\n\
*3\r\n:5461\r\n:16383\r\n*3\r\n$0\r\n\r\n:30002\r\n$4\r\nid02\r\n";
    p.cluster
        .as_mut()
        .unwrap()
        .map_asked(Some(1), Instant::now());
    p.cluster_slots_reply(1, reply);
    let c = p.cluster.as_ref().unwrap();
    assert!(!c.refreshing && !c.refresh_wanted && c.maps == 1);
    assert_eq!(p.servers.len(), 3, "the replica is added as a server");
    let get = internal_op().unwrap();
    let bar = b"bar"; // slot 5061
    let foo = b"foo"; // slot 12182
    assert_eq!(p.cluster_server(bar, get, 0), 0);
    assert_eq!(p.cluster_server(foo, get, 0), 1);
    assert_eq!(c.masters(), vec![0, 1]);
    assert_eq!(
        c.server_for(cluster::key_slot(bar), true, 0),
        2,
        "its replica"
    );
    // A reply that is not a map leaves the map and asks again.
    p.cluster_slots_reply(0, b"-ERR This instance has cluster support disabled\r\n");
    let c = p.cluster.as_ref().unwrap();
    assert!(c.refresh_wanted && c.maps == 1);
    assert_eq!(p.cluster_server(foo, get, 0), 1);
}

/// A parsed request and its bytes.
fn cmd(text: &[u8]) -> (Request, Vec<u8>) {
    match crate::proto::redis::parse_request(text, &crate::proto::Limits::default()) {
        Ok(crate::proto::Parse::Done(r)) => (r, text.to_vec()),
        other => panic!("{other:?}"),
    }
}

/// A reply slot keeping its request for a redirection, none followed.
fn kept(req: Request, bytes: Vec<u8>) -> ReplySlot {
    use super::super::conn::Redirect;
    ReplySlot {
        redirect: Some(Box::new(Redirect {
            req,
            bytes,
            hops: 0,
            tries: 0,
            spool: None,
            feeding: None,
        })),
        ..ReplySlot::default()
    }
}

/// Client 10, on a socket pair.
fn client10() -> super::super::conn::Client {
    let (sock, _) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let stream = crate::net::Stream::Unix(sock);
    super::super::conn::Client::new(stream, 10, 0, session, Instant::now())
}

/// A connection table whose client 10, at `Token(0)`, keeps GET foo in
/// its reply 0 for a redirection; and GET's op.
fn keeping_get_foo() -> (Slab<Conn>, crate::proto::Op) {
    let (req, bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
    let op = req.op;
    let mut c = client10();
    c.push_reply(kept(req, bytes));
    let mut conns = Slab::new();
    conns.insert(Conn::Client(Box::new(c)));
    (conns, op)
}

#[test]
fn a_kept_request_is_sent_again_within_its_budgets() {
    use super::super::conn::{Fragment, Multi, MultiMode};
    let (req, bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
    let mut slot = kept(req, bytes);
    assert_eq!(slot.kept_first_key(None).as_deref(), Some(&b"foo"[..]));
    assert!(slot.kept_first_key(Some(0)).is_none(), "no fragments kept");
    for _ in 0..MAX_HOPS {
        assert!(slot.count_attempt(None, false));
    }
    assert!(!slot.count_attempt(None, false), "redirections spent");
    // TRYAGAIN has its own budget.
    for _ in 0..MAX_TRYAGAIN {
        assert!(slot.count_attempt(None, true));
    }
    assert!(!slot.count_attempt(None, true));

    // A fragment: its own first key and budget.
    let (req, bytes) = cmd(b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n");
    let mut slot = ReplySlot {
        multi: Some(Box::new(Multi {
            req,
            bytes,
            frags: vec![
                Fragment {
                    keys: vec![0],
                    ..Fragment::default()
                },
                Fragment {
                    keys: vec![1],
                    hops: MAX_HOPS,
                    ..Fragment::default()
                },
            ],
            remaining: 2,
            error: None,
            mode: MultiMode::Split,
        })),
        ..ReplySlot::default()
    };
    assert_eq!(slot.kept_first_key(Some(1)).as_deref(), Some(&b"b"[..]));
    let kept = slot.kept(Some(0)).expect("fragment kept");
    assert_eq!(kept.keys, Some(&[0][..]));
    assert!(slot.count_attempt(Some(0), false));
    assert!(!slot.count_attempt(Some(1), false), "that fragment's spent");
    assert!(!slot.count_attempt(Some(2), false), "no such fragment");
    assert!(!slot.count_attempt(None, false), "no whole request kept");
}

#[test]
fn read_commands() {
    use crate::proto::redis::commands::is_read_command;
    assert!(is_read_command("GET") && is_read_command("MGET"));
    assert!(!is_read_command("SET") && !is_read_command("DEL"));
    assert!(!is_read_command("EVAL"));
}

fn redirect(ask: bool, slot: u16, port: u16) -> Redirect {
    Redirect {
        ask,
        slot,
        to: NodeAddr {
            host: "127.0.0.1".into(),
            port,
        },
    }
}

#[test]
fn a_moved_moves_its_slot_and_asks_for_a_map_an_ask_does_not() {
    let mut p = pool();
    let get = internal_op().unwrap();
    let foo = b"foo"; // slot 12182
    let slot = cluster::key_slot(foo);
    p.cluster
        .as_mut()
        .unwrap()
        .map_asked(Some(0), Instant::now());
    p.cluster.as_mut().unwrap().refreshing = false;
    let before = p.cluster_server(foo, get, 0);
    // An ASK to a node not yet known: added, the map unchanged.
    assert_eq!(p.follow_redirect(&redirect(true, slot, 30003), 0), Some(2));
    assert_eq!(p.servers.len(), 3);
    assert_eq!(p.cluster_server(foo, get, 0), before);
    assert!(!p.cluster.as_ref().unwrap().refresh_wanted);
    // A MOVED to a known node: the slot is its at once, a map wanted.
    assert_eq!(p.follow_redirect(&redirect(false, slot, 30003), 1), Some(2));
    assert_eq!(p.servers.len(), 3, "known: not added again");
    assert_eq!(p.cluster_server(foo, get, 0), 2);
    assert!(p.cluster.as_ref().unwrap().refresh_wanted);
    // An empty host is the host of the node that answered.
    let mut r = redirect(false, slot, 30001);
    r.to.host.clear();
    assert_eq!(p.follow_redirect(&r, 1), Some(0));
    assert_eq!(p.cluster_server(foo, get, 0), 0);
}

#[test]
fn no_attempt_is_counted_for_a_client_gone() {
    let mut conns = Slab::new();
    let gone = ClientRef::new(Token(0), 5);
    assert!(!count_attempt(&mut conns, gone, 0, None, false));
    assert!(!count_attempt(&mut conns, gone, 0, Some(1), true));
}

#[test]
fn a_cluster_error_says_whether_and_where_a_request_goes_again() {
    let mut p = pool();
    let wanted = |p: &mut PoolRt| std::mem::take(&mut p.cluster.as_mut().unwrap().refresh_wanted);
    wanted(&mut p);
    assert_eq!(
        p.cluster_answer(b"-ERR no\r\n", 0, true),
        None,
        "another error"
    );
    let tryagain = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
    assert_eq!(p.cluster_answer(tryagain, 0, true), Some(Again::Wait));
    assert_eq!(p.cluster_answer(tryagain, 0, false), None, "not kept");
    assert!(!wanted(&mut p));
    // A CLUSTERDOWN asks for a new map, kept or not.
    let down = b"-CLUSTERDOWN The cluster is down\r\n";
    assert_eq!(p.cluster_answer(down, 0, false), None);
    assert!(wanted(&mut p));
    assert_eq!(p.cluster_answer(down, 0, true), Some(Again::Wait));
    assert!(wanted(&mut p));
    // A redirection of a request not kept changes nothing.
    let moved = b"-MOVED 12182 127.0.0.1:30003\r\n";
    assert_eq!(p.cluster_answer(moved, 0, false), None);
    assert_eq!(p.servers.len(), 2, "the node named not added");
    assert!(!wanted(&mut p));
    let ask = b"-ASK 12182 127.0.0.1:30003\r\n";
    let to_new = Again::Redirect {
        to: 2,
        slot: 12182,
        kind: "ASK",
    };
    assert_eq!(p.cluster_answer(ask, 0, true), Some(to_new));
    assert!(!wanted(&mut p), "an ASK leaves the map");
    let moved = b"-MOVED 12182 127.0.0.1:30002\r\n";
    let to_known = Again::Redirect {
        to: 1,
        slot: 12182,
        kind: "MOVED",
    };
    assert_eq!(p.cluster_answer(moved, 0, true), Some(to_known));
    assert!(wanted(&mut p), "a MOVED asks for a new map");
}

#[test]
fn a_request_goes_again_now_or_later_within_its_budgets() {
    let mut p = pool();
    let (mut conns, op) = keeping_get_foo();
    let now = Instant::now();
    let to = ReplyTo::new(Token(0), 10, Some(0), None);
    let moved = Again::Redirect {
        to: 1,
        slot: 12182,
        kind: "MOVED",
    };
    let now_to_1 = Redo::Now {
        to: 1,
        asking: true,
    };
    assert_eq!(p.redo(&mut conns, to, op, moved, now), Some(now_to_1));
    let later = now + crate::worker::cluster_map::TRYAGAIN_DELAY;
    assert_eq!(
        p.redo(&mut conns, to, op, Again::Wait, now),
        Some(Redo::At(later))
    );
    assert_eq!(p.retries_due(&conns, later).len(), 1, "kept to wait out");
    for _ in 1..MAX_HOPS {
        assert!(p.redo(&mut conns, to, op, moved, now).is_some());
    }
    assert_eq!(p.redo(&mut conns, to, op, moved, now), None, "spent");
    let other = ReplyTo::new(Token(0), 11, Some(0), None);
    assert_eq!(p.redo(&mut conns, other, op, Again::Wait, now), None);
    let unkept = ReplyTo::new(Token(0), 10, None, None);
    assert_eq!(p.redo(&mut conns, unkept, op, Again::Wait, now), None);
}

#[test]
fn a_cluster_error_reply_sends_a_kept_request_again_now_later_or_not() {
    let mut p = pool();
    let (mut conns, op) = keeping_get_foo();
    let now = Instant::now();
    let to = ReplyTo::new(Token(0), 10, Some(0), None);
    let moved = b"-MOVED 12182 127.0.0.1:30002\r\n";
    let again = p.redo_after(&mut conns, to, op, moved, 0, now);
    assert_eq!(
        again,
        Some(Redo::Now {
            to: 1,
            asking: true
        })
    );
    let tryagain = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
    let later = now + crate::worker::cluster_map::TRYAGAIN_DELAY;
    let again = p.redo_after(&mut conns, to, op, tryagain, 0, now);
    assert_eq!(again, Some(Redo::At(later)));
    let other = p.redo_after(&mut conns, to, op, b"-ERR no\r\n", 0, now);
    assert_eq!(other, None, "another error goes to the client");
    let unkept = ReplyTo::new(Token(0), 10, None, None);
    assert_eq!(p.redo_after(&mut conns, unkept, op, moved, 0, now), None);
}

#[test]
fn a_kept_request_goes_again_whole_as_a_fragment_or_from_its_spool() {
    use super::super::conn::{Fragment, Multi, MultiMode};
    use crate::proto::redis::{stream_head, StreamMachine};
    use crate::worker::conn::ReqStream;
    let mut conns = Slab::new();
    let mut c = client10();
    // Reply 0 keeps GET foo, reply 1 an MGET's fragments, reply 2 a
    // streamed SET in its spool.
    let (get, get_bytes) = cmd(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n");
    c.push_reply(kept(get.clone(), get_bytes.clone()));
    let (mget, mget_bytes) = cmd(b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n");
    c.push_reply(ReplySlot {
        multi: Some(Box::new(Multi {
            req: mget.clone(),
            bytes: mget_bytes.clone(),
            frags: vec![Fragment {
                keys: vec![1],
                ..Fragment::default()
            }],
            remaining: 1,
            error: None,
            mode: MultiMode::Split,
        })),
        ..ReplySlot::default()
    });
    let spooled = ReplySlot::streamed(true, &get, b"*3\r\n$3\r\nSET\r\n");
    let at = SpoolReader::new(
        spooled
            .redirect
            .as_ref()
            .and_then(|r| r.spool.as_ref())
            .expect("a spool"),
    );
    c.push_reply(spooled);
    conns.insert(Conn::Client(Box::new(c)));
    let to = |seq, frag| ReplyTo::new(Token(0), 10, Some(seq), frag);
    let whole = Resending::Whole {
        req: get,
        bytes: get_bytes,
        keys: None,
    };
    assert_eq!(resending(&conns, to(0, None)), Some(whole));
    let frag = Resending::Whole {
        req: mget,
        bytes: mget_bytes,
        keys: Some(vec![1]),
    };
    assert_eq!(resending(&conns, to(1, Some(0))), Some(frag));
    assert_eq!(resending(&conns, to(2, None)), Some(Resending::Spooled(at)));
    assert_eq!(resending(&conns, to(1, Some(3))), None, "no such fragment");
    let gone = ReplyTo::new(Token(0), 11, Some(0), None);
    assert_eq!(resending(&conns, gone), None, "another client");
    // Its client still sending it: refused.
    let limits = crate::proto::Limits::default();
    let data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123";
    let head = (1..=data.len())
        .find_map(|n| stream_head(&data[..n], &limits, 8))
        .expect("a streamed head");
    let rs = ReqStream::single(StreamMachine::new(&head, limits, 8), None);
    conns.client_mut(0).expect("client").start_stream(rs);
    assert_eq!(
        resending(&conns, to(2, None)),
        Some(Resending::Refused(ServerFault::RedirectedMidRequest))
    );
}

#[test]
fn a_request_waited_out_goes_where_its_key_is_routed_when_due() {
    let mut p = pool();
    let (conns, op) = keeping_get_foo();
    let now = Instant::now();
    let c = p.cluster.as_mut().unwrap();
    let kept = ClientRef::new(Token(0), 10);
    let _ = c.wait_out(kept, 0, None, op, now);
    let _ = c.wait_out(ClientRef::new(Token(0), 11), 0, None, op, now);
    let _ = c.wait_out(kept, 1, None, op, now);
    assert!(p.retries_due(&conns, now).is_empty(), "not due yet");
    // The map of the moment routes foo's slot (12182) to the second seed.
    p.cluster
        .as_mut()
        .unwrap()
        .set(cluster::key_slot(b"foo"), 1);
    let later = now + std::time::Duration::from_secs(1);
    let again = Resend {
        server: 1,
        to: ReplyTo::new(Token(0), 10, Some(0), None),
        op,
    };
    assert_eq!(
        p.retries_due(&conns, later),
        vec![again],
        "another client's and a reply not kept are dropped"
    );
    assert!(p.retries_due(&conns, later).is_empty(), "taken once");
}

#[test]
fn a_cluster_pool_sends_its_due_retries_then_asks_its_next_node_for_a_map() {
    let mut p = pool();
    let (conns, op) = keeping_get_foo();
    let now = Instant::now();
    // Wanted from the start: asked of the seeds in turn, the first first.
    let steps = p.cluster_upkeep(3, &conns, now);
    let [Upkeep::Ask(a)] = &steps[..] else {
        panic!("one map question: {steps:?}")
    };
    assert_eq!(
        (a.pool, &a.servers[..], a.open),
        (3, &[0, 1][..], Open::Shared)
    );
    assert_eq!(a.bytes, cluster::CLUSTER_SLOTS);
    assert!(matches!(a.waiter, Waiter::SlotMap));
    // Asked of the first seed: nothing more while it is in flight.
    let c = p.cluster.as_mut().unwrap();
    c.map_asked(Some(0), now);
    let _ = c.wait_out(ClientRef::new(Token(0), 10), 0, None, op, now);
    assert!(p.cluster_upkeep(3, &conns, now).is_empty(), "nothing due");
    // A node failed and the wait is over: the retry goes first, then the
    // map is asked of the next seed.
    p.cluster_map_failed();
    let later = now + std::time::Duration::from_secs(1);
    let steps = p.cluster_upkeep(3, &conns, later);
    let [Upkeep::Redo {
        pool: 3,
        to,
        redo: Redo::Now { asking: false, .. },
        ..
    }, Upkeep::Ask(a)] = &steps[..]
    else {
        panic!("a retry, then a map question: {steps:?}")
    };
    assert_eq!(*to, ReplyTo::new(Token(0), 10, Some(0), None));
    assert_eq!(a.servers, vec![1, 0]);
    // A pool that is not a cluster's asks nothing.
    let yaml =
        "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1\n";
    let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml")).expect("parses");
    let mut plain = PoolRt::new(&c.pools[0], &[]);
    assert!(plain.cluster_upkeep(0, &conns, later).is_empty());
}
