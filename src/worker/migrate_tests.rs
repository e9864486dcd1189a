//! Which keys of a request a migrating pool pulls over first
//! (`PoolRt::moved_pulls`), on a pool built from config text, without
//! sockets.

use super::*;
use crate::config::{Config, PoolConfig};
use crate::proto::{Limits, Parse};
use crate::worker::pull::PullPart;

fn pool(servers: &[u16]) -> PoolConfig {
    pool_of("  redis: true\n", servers)
}

/// A migrating pool of `servers`; `extra` adds keys to it.
fn pool_of(extra: &str, servers: &[u16]) -> PoolConfig {
    let mut text = format!("p:\n  listen: 127.0.0.1:39999\n{extra}  migration: true\n  servers:\n");
    for port in servers {
        text.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
    }
    Config::from_str(&text, std::path::Path::new("t.yml"))
        .expect("config parses")
        .pools
        .remove(0)
}

/// A Redis command of `args`.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

fn pulled(p: &mut PoolRt, args: &[&str]) -> Vec<Vec<u8>> {
    let bytes = command(args);
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(&bytes, &Limits::default()) else {
        panic!("{args:?} parses");
    };
    let now = Instant::now();
    p.moved_pulls(&req, &bytes, now)
        .iter()
        .map(|pull| pull.key().to_vec())
        .collect()
}

#[test]
fn every_moved_key_a_command_names_is_pulled_once() {
    let new = pool(&[30001, 30002, 30003]);
    let mut p = PoolRt::new(&new, &[pool(&[30001, 30002])]);
    let keys: Vec<String> = (0..200).map(|k| format!("key:{k}")).collect();
    let moved = keys
        .iter()
        .find(|k| !pulled(&mut p, &["GET", k]).is_empty())
        .expect("a key that moved");
    let stayed = keys
        .iter()
        .find(|k| pulled(&mut p, &["GET", k]).is_empty())
        .expect("a key that stayed");
    assert_eq!(pulled(&mut p, &["GET", moved]), vec![moved.as_bytes()]);
    // Every key named, each once, whichever key routes the command.
    let mset = ["MSET", stayed, "1", moved, "2", moved, "3"];
    assert_eq!(pulled(&mut p, &mset), vec![moved.as_bytes()]);
    assert_eq!(
        pulled(&mut p, &["RENAME", stayed, moved]),
        vec![moved.as_bytes()]
    );
    assert_eq!(pulled(&mut p, &["SET", stayed, "v"]), Vec::<Vec<u8>>::new());
    assert_eq!(pulled(&mut p, &["PING"]), Vec::<Vec<u8>>::new(), "no key");
    // The same servers and no earlier placement: not migrating.
    let mut calm = PoolRt::new(&new, &[]);
    assert_eq!(pulled(&mut calm, &["GET", moved]), Vec::<Vec<u8>>::new());
}

fn parse(proto: Protocol, bytes: &[u8]) -> Request {
    let Ok(Parse::Done(req)) = proto.parse_request(bytes, &Limits::default()) else {
        panic!("{bytes:?} parses");
    };
    req
}

/// A key of `p` that moved, where it may still be and its owner now, as
/// a read of it (`read`) finds them.
fn moved_key(
    p: &mut PoolRt,
    proto: Protocol,
    read: impl Fn(&str) -> Vec<u8>,
) -> (String, Vec<usize>, usize) {
    let now = Instant::now();
    (0..200)
        .find_map(|k| {
            let key = format!("key:{k}");
            let bytes = read(&key);
            let pulls = p.moved_pulls(&parse(proto, &bytes), &bytes, now);
            let pull = pulls.first()?;
            Some((key, pull.olds().to_vec(), pull.news()[0]))
        })
        .expect("a key that moved")
}

/// The migrator's map, which says it moved `key`.
fn mark_moved(p: &mut PoolRt, key: &str) {
    let m = p.migration.as_mut().expect("migrating");
    let map = crate::migrate::moved::MovedKeys::new().expect("moved keys map");
    m.set_moved_keys(Some(std::sync::Arc::new(map)));
    m.mark_moved(key.as_bytes());
}

#[test]
fn a_redis_read_of_a_moved_key_is_asked_where_the_key_is_and_a_write_pulls_it() {
    let mut p = PoolRt::new(&pool(&[30001, 30002, 30003]), &[pool(&[30001, 30002])]);
    let (key, olds, new) = moved_key(&mut p, Protocol::Redis, |k| command(&["GET", k]));
    let moved = MovedKey {
        key: key.as_bytes(),
        olds: &olds,
        new,
    };
    let get = parse(Protocol::Redis, &command(&["GET", &key]));
    let read = p.moved_read(&get, moved).expect("read where it is");
    let m = p.migration.as_ref().expect("migrating");
    assert_eq!(read.servers, m.read_order(olds[0]).servers(&olds, new));
    assert!(read.learns && !read.pull_on_miss);
    assert!(read.plan.shadow.is_none() && !read.plan.count_routes);
    // A write, or a read of more than one value: pulled.
    let set = parse(Protocol::Redis, &command(&["SET", &key, "v"]));
    assert_eq!(p.moved_read(&set, moved), None);
    let mget = parse(Protocol::Redis, &command(&["MGET", &key, "other"]));
    assert_eq!(p.moved_read(&mget, moved), None);
    // The migrator says it moved: its new owner asked first, nothing to
    // learn.
    mark_moved(&mut p, &key);
    let read = p.moved_read(&get, moved).expect("read where it is");
    assert_eq!(read.servers, ReadOrder::new_first_order(&olds, new));
    assert_eq!(read.servers[0], new);
    assert!(!read.learns);
}

#[test]
fn a_memcached_read_of_a_moved_key_goes_to_its_new_owner_once_the_migrator_says_so() {
    let mut p = PoolRt::new(
        &pool_of("", &[30001, 30002, 30003]),
        &[pool_of("", &[30001, 30002])],
    );
    let get = |k: &str| format!("get {k}\r\n").into_bytes();
    let (key, olds, new) = moved_key(&mut p, Protocol::Memcache, get);
    let moved = MovedKey {
        key: key.as_bytes(),
        olds: &olds,
        new,
    };
    let read = parse(Protocol::Memcache, &get(&key));
    assert_eq!(p.moved_read(&read, moved), None, "not known moved: pulled");
    mark_moved(&mut p, &key);
    let r = p.moved_read(&read, moved).expect("read on the new owner");
    assert_eq!(r.servers.as_slice(), &[new]);
    assert!(r.pull_on_miss && !r.learns, "a miss there pulls it");
    // Its miss pulls the key once, the new owner asked again after.
    let bytes = get(&key);
    let mut retry = Retry {
        req: parse(Protocol::Memcache, &bytes),
        bytes: ReadBytes::from_slice(&bytes),
        replicas: r.servers,
        next: 1,
        on_miss: true,
        learns: r.learns,
        pull_on_miss: r.pull_on_miss,
    };
    assert!(retry.pull_after_miss());
    assert_eq!(retry.take_next(), Some(new), "asked again once pulled");
    assert!(!retry.pull_after_miss(), "a second miss is the answer");
    assert_eq!(retry.take_next(), None);
}

#[test]
fn a_migrating_pools_request_goes_is_read_where_its_key_is_or_pulls_it() {
    let now = Instant::now();
    let mut p = PoolRt::new(&pool(&[30001, 30002, 30003]), &[pool(&[30001, 30002])]);
    let (key, olds, new) = moved_key(&mut p, Protocol::Redis, |k| command(&["GET", k]));
    let get = command(&["GET", &key]);
    let req = parse(Protocol::Redis, &get);
    // A read to route: asked where the key may be, the old owners first.
    let Moving::Read(read) = p.moving(&req, &get, true, now) else {
        panic!("read where it is");
    };
    let m = p.migration.as_ref().expect("migrating");
    assert_eq!(read.servers, m.read_order(olds[0]).servers(&olds, new));
    let slot = read.slot(&req, &get);
    let retry = slot.retry.expect("goes on after a miss");
    assert!(retry.on_miss && retry.learns && retry.next == 1);
    // The same read held by a transaction: pulled.
    let Moving::Pull(pulls) = p.moving(&req, &get, false, now) else {
        panic!("pulled");
    };
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        (pulls[0].key(), pulls[0].news()),
        (key.as_bytes(), &[new][..])
    );
    // A write of it: pulled.
    let set = command(&["SET", &key, "v"]);
    let req = parse(Protocol::Redis, &set);
    assert!(matches!(p.moving(&req, &set, true, now), Moving::Pull(p) if p.len() == 1));
    // A key that stayed goes, with its server.
    let stays = (0..200)
        .map(|k| format!("key:{k}"))
        .find(|k| {
            let b = command(&["GET", k]);
            p.moved_pulls(&parse(Protocol::Redis, &b), &b, now)
                .is_empty()
        })
        .expect("a key that stayed");
    let get = command(&["GET", &stays]);
    let server = p.server_for(stays.as_bytes(), now).expect("a server");
    assert!(matches!(
        p.moving(&parse(Protocol::Redis, &get), &get, true, now),
        Moving::Go { owner: Some(s) } if s as usize == server
    ));
}

/// A client on one end of a socket pair.
fn client() -> Client {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    Client::new(
        crate::net::Stream::Unix(sock),
        1,
        0,
        session,
        Instant::now(),
    )
}

#[test]
fn a_memcached_read_that_missed_on_the_new_owner_gives_its_request_to_pull_once() {
    let bytes = b"get k\r\n".to_vec();
    let read = Retry {
        req: parse(Protocol::Memcache, &bytes),
        bytes: ReadBytes::from_slice(&bytes),
        replicas: std::iter::once(2).collect(),
        next: 1,
        on_miss: true,
        learns: false,
        pull_on_miss: true,
    };
    let mut c = client();
    let seq = c.next_seq();
    c.push_reply(ReplySlot {
        retry: Some(Box::new(read)),
        ..ReplySlot::default()
    });
    assert_eq!(c.pull_after_miss(seq + 1), None, "no such slot");
    let Some(Step::Missed {
        req,
        bytes: held,
        seq: s,
    }) = c.pull_after_miss(seq)
    else {
        panic!("pulled");
    };
    assert_eq!((held.as_slice(), s), (&bytes[..], seq));
    assert_eq!(req.routing_key(&held).as_ref(), b"k");
    assert_eq!(c.pull_after_miss(seq), None, "a second miss is the answer");
    // A plain slot is no such read.
    let plain = c.next_seq();
    c.push_reply(ReplySlot::default());
    assert_eq!(c.pull_after_miss(plain), None);
}

#[test]
fn a_request_at_the_gates_goes_is_read_where_its_key_is_or_pulls_it() {
    let now = Instant::now();
    let mut p = PoolRt::new(&pool(&[30001, 30002, 30003]), &[pool(&[30001, 30002])]);
    let mut holds = FleetHolds::default();
    let (key, _, _) = moved_key(&mut p, Protocol::Redis, |k| command(&["GET", k]));
    // The migrator's map, empty: the pull marks the key in it.
    let map = crate::migrate::moved::MovedKeys::new().expect("moved keys map");
    let m = p.migration.as_mut().expect("migrating");
    m.set_moved_keys(Some(std::sync::Arc::new(map)));
    let get = command(&["GET", &key]);
    let req = parse(Protocol::Redis, &get);
    // No fleet: the migration's say alone. A read to route is read where
    // its key is (from its old owner first: the map does not know it
    // moved); held by a transaction, or asked again after a miss, it
    // pulls the key.
    let mut gated = |then| p.gated(0, (&mut holds, None), At::new(&req, &get, then), now);
    assert!(matches!(gated(AfterPull::Route), Gated::Read(_)));
    assert!(matches!(gated(AfterPull::Txn), Gated::Pull(p) if p.len() == 1));
    let again = AfterPull::Read { seq: 3 };
    let Gated::Pull(pulls) = gated(again) else {
        panic!("pulled");
    };
    // Held while pulled, the key marked on its new owner.
    let m = p.migration.as_ref().expect("migrating");
    assert!(!m.known_moved(key.as_bytes()));
    let gate = p.pulling(At::new(&req, &get, again), pulls);
    assert_eq!((gate.then, &gate.bytes), (again, &get));
    assert!(!gate.pulls.is_empty());
    let m = p.migration.as_ref().expect("migrating");
    assert!(m.known_moved(key.as_bytes()));
    // A pool not migrating lets it go.
    let mut calm = PoolRt::new(&pool(&[30001, 30002, 30003]), &[]);
    let at = At::new(&req, &get, AfterPull::Route);
    assert!(matches!(
        calm.gated(0, (&mut holds, None), at, now),
        Gated::Go { owner: None }
    ));
}

#[test]
fn a_pulls_commands_go_to_each_server_on_the_clients_slot_their_replies_to_the_pull() {
    let sends = Sends {
        idx: 2,
        phase: crate::worker::pull::Phase::Read,
        to: vec![4, 5],
        cmds: vec![
            (PullPart::Dump, b"*2\r\n$4\r\nDUMP\r\n$1\r\nk\r\n".to_vec()),
            (PullPart::Ttl, b"*2\r\n$4\r\nPTTL\r\n$1\r\nk\r\n".to_vec()),
        ],
    };
    let client = (mio::Token(7), 9);
    for (i, server) in [4, 5].into_iter().enumerate() {
        let copies: Vec<CopyPlan> = sends
            .copies(i, (Protocol::Redis, 1), client)
            .map(|c| c.expect("a request the protocol reads back"))
            .collect();
        assert_eq!(copies.len(), 2);
        for (c, part) in copies.iter().zip([PullPart::Dump, PullPart::Ttl]) {
            assert_eq!((c.pool, c.servers()), (1, vec![Some(server)]));
            assert_eq!(c.client, Some(client));
            assert!(matches!(
                c.waiter,
                Waiter::Pull { token, id: 9, idx: 2, part: p } if token == client.0 && p == part
            ));
        }
    }
}
