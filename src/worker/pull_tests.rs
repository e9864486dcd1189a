//! A held request's pulls walked through their servers' replies, without
//! sockets: what is sent where (the key read from each old owner in turn,
//! its copy to the new owners, the stale old copies' deletes), when the
//! request may follow its copies, and when it is released.

use super::*;
use crate::config::Config;
use crate::migrate::commands::{del, dump, mc_delete, mc_get, mc_store, pttl, restore};
use crate::proto::{Limits, Parse};
use crate::worker::conn::Client;
use std::path::Path;

const K: &[u8] = b"k";

fn pulls(proto: Protocol, follows: bool, keys: &[(&[u8], &[usize], &[usize])]) -> Pulls {
    let pulls = keys
        .iter()
        .map(|(k, olds, news)| Pull::new(k.to_vec(), olds.to_vec(), news.to_vec()))
        .collect();
    Pulls::new(pulls, proto, follows)
}

fn send(idx: usize, phase: Phase, to: &[usize], cmds: Vec<(PullPart, Vec<u8>)>) -> Step {
    Step::Send(Sends {
        idx,
        phase,
        to: to.to_vec(),
        cmds,
    })
}

/// Redis: pull `idx`'s key read from `old`.
fn read(idx: usize, old: usize, key: &[u8]) -> Step {
    let cmds = vec![(PullPart::Dump, dump(key)), (PullPart::Ttl, pttl(key))];
    send(idx, Phase::Read, &[old], cmds)
}

fn copy(idx: usize, to: &[usize], store: Vec<u8>) -> Step {
    send(idx, Phase::Copy, to, vec![(PullPart::Store, store)])
}

fn delete(idx: usize, to: &[usize], del: Vec<u8>) -> Step {
    send(idx, Phase::Delete, to, vec![(PullPart::Delete, del)])
}

/// The step is `want`, a batch of commands, queued on `ok` of its
/// servers: what follows.
fn sent(p: &mut Pulls, step: Step, want: Step, ok: usize) -> Step {
    assert_eq!(step, want);
    let Step::Send(s) = step else {
        panic!("not a send: {step:?}")
    };
    p.sent(&s, ok)
}

/// The step is `want`, queued on every server it names: what follows.
fn all_sent(p: &mut Pulls, step: Step, want: Step) -> Step {
    let n = match &want {
        Step::Send(s) => s.to.len(),
        _ => 0,
    };
    sent(p, step, want, n)
}

fn r(p: &mut Pulls, idx: usize, part: PullPart, reply: &str) -> Step {
    p.reply(idx, part, Some(reply.as_bytes()))
}

#[test]
fn a_redis_key_found_is_copied_and_done_once_its_old_copy_is_deleted() {
    let mut p = pulls(Protocol::Redis, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    assert_eq!(all_sent(&mut p, s, read(0, 1, K)), Step::Wait);
    assert_eq!(r(&mut p, 0, PullPart::Dump, "$3\r\nabc\r\n"), Step::Wait);
    let s = r(&mut p, 0, PullPart::Ttl, ":1500\r\n");
    // A write does not follow its copies: it waits for the deletes.
    let s = all_sent(&mut p, s, copy(0, &[0], restore(K, 1500, b"abc")));
    assert_eq!(s, Step::Wait);
    let s = r(&mut p, 0, PullPart::Store, "+OK\r\n");
    assert_eq!(all_sent(&mut p, s, delete(0, &[1], del(K))), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Delete, ":1\r\n"),
        Step::Release { sent: false }
    );
    // Anything later about a finished pull changes nothing.
    assert_eq!(r(&mut p, 0, PullPart::Delete, ":1\r\n"), Step::Wait);
    assert_eq!(r(&mut p, 0, PullPart::Store, "+OK\r\n"), Step::Wait);
    assert_eq!(r(&mut p, 3, PullPart::Dump, "$-1\r\n"), Step::Wait);
}

#[test]
fn a_read_follows_its_copies_and_is_not_sent_again() {
    let mut p = pulls(Protocol::Redis, true, &[(K, &[1], &[0])]);
    let s = p.start(0);
    assert_eq!(all_sent(&mut p, s, read(0, 1, K)), Step::Wait);
    assert_eq!(r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n"), Step::Wait);
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    let s = all_sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v")));
    assert_eq!(s, Step::Behind);
    let s = r(&mut p, 0, PullPart::Store, "+OK\r\n");
    assert_eq!(all_sent(&mut p, s, delete(0, &[1], del(K))), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Delete, ":1\r\n"),
        Step::Release { sent: true }
    );
}

#[test]
fn a_key_absent_on_its_first_old_owner_is_read_from_the_next_and_deleted_from_both() {
    let mut p = pulls(Protocol::Redis, false, &[(K, &[2, 1], &[0])]);
    let s = p.start(0);
    assert_eq!(all_sent(&mut p, s, read(0, 2, K)), Step::Wait);
    assert_eq!(r(&mut p, 0, PullPart::Dump, "$-1\r\n"), Step::Wait);
    let s = r(&mut p, 0, PullPart::Ttl, ":-2\r\n");
    assert_eq!(all_sent(&mut p, s, read(0, 1, K)), Step::Wait);
    assert_eq!(r(&mut p, 0, PullPart::Dump, "$2\r\nxy\r\n"), Step::Wait);
    let s = r(&mut p, 0, PullPart::Ttl, ":0\r\n");
    let s = all_sent(&mut p, s, copy(0, &[0], restore(K, 0, b"xy")));
    assert_eq!(s, Step::Wait);
    let s = r(&mut p, 0, PullPart::Store, "+OK\r\n");
    // Every stale old owner's copy goes, and each delete is waited for.
    assert_eq!(all_sent(&mut p, s, delete(0, &[2, 1], del(K))), Step::Wait);
    assert_eq!(r(&mut p, 0, PullPart::Delete, ":0\r\n"), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Delete, ":1\r\n"),
        Step::Release { sent: false }
    );
}

#[test]
fn a_key_gone_between_its_dump_and_its_ttl_is_asked_of_the_next_old_owner() {
    let mut p = pulls(Protocol::Redis, false, &[(K, &[2, 1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 2, K));
    assert_eq!(r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n"), Step::Wait);
    let s = r(&mut p, 0, PullPart::Ttl, ":-2\r\n");
    all_sent(&mut p, s, read(0, 1, K));
    // The first owner's payload is not copied from the second's reply.
    assert_eq!(r(&mut p, 0, PullPart::Dump, "$-1\r\n"), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Ttl, ":-2\r\n"),
        Step::Release { sent: false }
    );
}

#[test]
fn a_copy_refused_as_busy_still_lets_the_old_copy_go() {
    let mut p = pulls(Protocol::Redis, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 1, K));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    all_sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v")));
    let s = r(
        &mut p,
        0,
        PullPart::Store,
        "-BUSYKEY Target key name already exists.\r\n",
    );
    assert_eq!(s, delete(0, &[1], del(K)));
}

#[test]
fn a_failed_copy_keeps_the_old_copy() {
    let mut p = pulls(Protocol::Redis, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 1, K));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    all_sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v")));
    let s = r(
        &mut p,
        0,
        PullPart::Store,
        "-ERR DUMP payload version or checksum are wrong\r\n",
    );
    assert_eq!(s, Step::Release { sent: false });
}

#[test]
fn a_lost_server_at_each_step_moves_the_pull_on() {
    // The old owner lost under its DUMP and PTTL: the next one is asked,
    // and with none left the key is given up.
    let mut p = pulls(Protocol::Redis, false, &[(K, &[2, 1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 2, K));
    assert_eq!(p.reply(0, PullPart::Dump, None), Step::Wait);
    let s = p.reply(0, PullPart::Ttl, None);
    all_sent(&mut p, s, read(0, 1, K));
    p.reply(0, PullPart::Dump, None);
    assert_eq!(
        p.reply(0, PullPart::Ttl, None),
        Step::Release { sent: false }
    );

    // The old owner cannot be reached at all: given up at once.
    let mut p = pulls(Protocol::Redis, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    assert_eq!(
        sent(&mut p, s, read(0, 1, K), 0),
        Step::Release { sent: false }
    );

    // The new owner lost under the copy, or not reachable: the old copy
    // is kept.
    let mut p = pulls(Protocol::Redis, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 1, K));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    assert_eq!(
        all_sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v"))),
        Step::Wait
    );
    assert_eq!(
        p.reply(0, PullPart::Store, None),
        Step::Release { sent: false }
    );
    let mut p = pulls(Protocol::Redis, true, &[(K, &[1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 1, K));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    assert_eq!(
        sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v")), 0),
        Step::Release { sent: false }
    );

    // An old owner lost under its delete loses its copy; one that cannot
    // be reached for the delete is not waited for.
    let mut p = pulls(Protocol::Redis, false, &[(K, &[2, 1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 2, K));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    all_sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v")));
    let s = r(&mut p, 0, PullPart::Store, "+OK\r\n");
    assert_eq!(sent(&mut p, s, delete(0, &[2, 1], del(K)), 1), Step::Wait);
    assert_eq!(
        p.reply(0, PullPart::Delete, None),
        Step::Release { sent: false }
    );
    let mut p = pulls(Protocol::Redis, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 1, K));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    all_sent(&mut p, s, copy(0, &[0], restore(K, -1, b"v")));
    let s = r(&mut p, 0, PullPart::Store, "+OK\r\n");
    assert_eq!(
        sent(&mut p, s, delete(0, &[1], del(K)), 0),
        Step::Release { sent: false }
    );
}

#[test]
fn memcached_mg_hit_and_miss_ms_stored_and_not_stored() {
    let get = |idx, old| send(idx, Phase::Read, &[old], vec![(PullPart::Get, mc_get(K))]);
    // A miss on every old owner: nothing to copy.
    let mut p = pulls(Protocol::Memcache, false, &[(K, &[2, 1], &[0])]);
    let s = p.start(0);
    assert_eq!(all_sent(&mut p, s, get(0, 2)), Step::Wait);
    let s = r(&mut p, 0, PullPart::Get, "EN\r\n");
    assert_eq!(all_sent(&mut p, s, get(0, 1)), Step::Wait);
    assert_eq!(
        p.reply(0, PullPart::Get, None),
        Step::Release { sent: false }
    );

    // A hit: copied with its flags and TTL, stored (HD) or not because a
    // newer value is there (NS); either way the old copy goes.
    for (stored, reply) in [(true, "HD\r\n"), (false, "NS\r\n")] {
        let mut p = pulls(Protocol::Memcache, true, &[(K, &[1], &[0])]);
        let s = p.start(0);
        all_sent(&mut p, s, get(0, 1));
        let s = r(&mut p, 0, PullPart::Get, "VA 2 f7 t-1\r\nhi\r\n");
        let s = all_sent(&mut p, s, copy(0, &[0], mc_store(K, 7, -1, b"hi")));
        assert_eq!(s, Step::Behind);
        let s = r(&mut p, 0, PullPart::Store, reply);
        assert_eq!(
            all_sent(&mut p, s, delete(0, &[1], mc_delete(K))),
            Step::Wait,
            "stored: {stored}"
        );
        assert_eq!(
            r(&mut p, 0, PullPart::Delete, "HD\r\n"),
            Step::Release { sent: true }
        );
    }

    // Not stored for another reason: the old copy stays.
    let mut p = pulls(Protocol::Memcache, false, &[(K, &[1], &[0])]);
    let s = p.start(0);
    all_sent(&mut p, s, get(0, 1));
    let s = r(&mut p, 0, PullPart::Get, "VA 1 f0 t30\r\nx\r\n");
    all_sent(&mut p, s, copy(0, &[0], mc_store(K, 0, 30, b"x")));
    assert_eq!(
        r(&mut p, 0, PullPart::Store, "SERVER_ERROR out of memory\r\n"),
        Step::Release { sent: false }
    );
}

#[test]
fn a_request_follows_once_every_key_is_copied_or_done_and_goes_once_all_are_done() {
    let mut p = pulls(
        Protocol::Redis,
        true,
        &[(b"a", &[1], &[0]), (b"b", &[1], &[0])],
    );
    let s = p.start(0);
    all_sent(&mut p, s, read(0, 1, b"a"));
    let s = p.start(1);
    all_sent(&mut p, s, read(1, 1, b"b"));
    r(&mut p, 0, PullPart::Dump, "$1\r\nv\r\n");
    let s = r(&mut p, 0, PullPart::Ttl, ":-1\r\n");
    // b not copied yet: the request waits.
    assert_eq!(
        all_sent(&mut p, s, copy(0, &[0], restore(b"a", -1, b"v"))),
        Step::Wait
    );
    r(&mut p, 1, PullPart::Dump, "$-1\r\n");
    // b is on no old owner: done, and the request follows a's copy.
    assert_eq!(r(&mut p, 1, PullPart::Ttl, ":-2\r\n"), Step::Behind);
    let s = r(&mut p, 0, PullPart::Store, "+OK\r\n");
    assert_eq!(all_sent(&mut p, s, delete(0, &[1], del(b"a"))), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Delete, ":1\r\n"),
        Step::Release { sent: true }
    );
}

#[test]
fn a_write_of_two_keys_waits_for_both_keys_deletes() {
    let mut p = pulls(
        Protocol::Redis,
        false,
        &[(b"a", &[1], &[0]), (b"b", &[1], &[0])],
    );
    for (idx, key) in [(0, &b"a"[..]), (1, b"b")] {
        let s = p.start(idx);
        all_sent(&mut p, s, read(idx, 1, key));
        r(&mut p, idx, PullPart::Dump, "$1\r\nv\r\n");
        let s = r(&mut p, idx, PullPart::Ttl, ":-1\r\n");
        all_sent(&mut p, s, copy(idx, &[0], restore(key, -1, b"v")));
        let s = r(&mut p, idx, PullPart::Store, "+OK\r\n");
        all_sent(&mut p, s, delete(idx, &[1], del(key)));
    }
    assert_eq!(r(&mut p, 1, PullPart::Delete, ":1\r\n"), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Delete, ":1\r\n"),
        Step::Release { sent: false }
    );
}

#[test]
fn a_replicated_key_is_copied_where_it_is_missing_and_deleted_where_it_is_stale() {
    // Old owners 1 and 2 (newest placement's first), new owners 1 and 0:
    // found on 1, copied to 0 only; only 2's copy is stale.
    let mut p = pulls(Protocol::Memcache, false, &[(K, &[1, 2], &[1, 0])]);
    let s = p.start(0);
    let get = send(0, Phase::Read, &[1], vec![(PullPart::Get, mc_get(K))]);
    all_sent(&mut p, s, get);
    let s = r(&mut p, 0, PullPart::Get, "VA 1 f0 t-1\r\nx\r\n");
    all_sent(&mut p, s, copy(0, &[0], mc_store(K, 0, -1, b"x")));
    let s = r(&mut p, 0, PullPart::Store, "HD\r\n");
    assert_eq!(
        all_sent(&mut p, s, delete(0, &[2], mc_delete(K))),
        Step::Wait
    );

    // Two new owners to copy to: done once both answered, and a copy one
    // of them could not take keeps the old copies.
    let mut p = pulls(Protocol::Memcache, false, &[(K, &[2], &[0, 1])]);
    let s = p.start(0);
    all_sent(
        &mut p,
        s,
        send(0, Phase::Read, &[2], vec![(PullPart::Get, mc_get(K))]),
    );
    let s = r(&mut p, 0, PullPart::Get, "VA 1 f0 t-1\r\nx\r\n");
    all_sent(&mut p, s, copy(0, &[0, 1], mc_store(K, 0, -1, b"x")));
    assert_eq!(r(&mut p, 0, PullPart::Store, "HD\r\n"), Step::Wait);
    assert_eq!(
        r(&mut p, 0, PullPart::Store, "SERVER_ERROR busy\r\n"),
        Step::Release { sent: false }
    );
    // Sent to one of the two only: that one's answer finishes it, old
    // copy kept.
    let mut p = pulls(Protocol::Memcache, false, &[(K, &[2], &[0, 1])]);
    let s = p.start(0);
    all_sent(
        &mut p,
        s,
        send(0, Phase::Read, &[2], vec![(PullPart::Get, mc_get(K))]),
    );
    let s = r(&mut p, 0, PullPart::Get, "VA 1 f0 t-1\r\nx\r\n");
    assert_eq!(
        sent(&mut p, s, copy(0, &[0, 1], mc_store(K, 0, -1, b"x")), 1),
        Step::Wait
    );
    assert_eq!(
        r(&mut p, 0, PullPart::Store, "HD\r\n"),
        Step::Release { sent: false }
    );
}

fn route(yaml: &str) -> PoolRoute {
    let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
    PoolRoute::build(&c.pools[0], None, true)
}

fn parsed(proto: Protocol, bytes: &[u8]) -> Request {
    match proto.parse_request(bytes, &Limits::default()) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{bytes:?}: {other:?}"),
    }
}

#[test]
fn only_a_plain_read_on_the_usual_connection_follows_its_copies() {
    let rd = route("rd:\n  listen: 127.0.0.1:22998\n  redis: true\n  servers:\n    - 127.0.0.1:6379:1 a\n    - 127.0.0.1:6380:1 b\n");
    let redis = |b: &str| parsed(Protocol::Redis, b.as_bytes());
    let follows = |req: &Request, then| follows_copies(req, then, Protocol::Redis, &rd);
    let get = redis("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    assert!(follows(&get, AfterPull::Route));
    assert!(!follows(&get, AfterPull::Txn), "a transaction's command");
    let set = redis("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    assert!(!follows(&set, AfterPull::Route), "a write");
    let mget = redis("*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n");
    assert!(!follows(&mget, AfterPull::Route), "split over servers");

    let mc = route("mc:\n  listen: 127.0.0.1:22997\n  servers:\n    - 127.0.0.1:11211:1 a\n    - 127.0.0.1:11212:1 b\n");
    let text = parsed(Protocol::Memcache, b"get k\r\n");
    assert!(follows_copies(
        &text,
        AfterPull::Route,
        Protocol::Memcache,
        &mc
    ));
    // A read that missed on the new owner, asked there again into its
    // slot once pulled: behind its copy as well.
    assert!(follows_copies(
        &text,
        AfterPull::Read { seq: 7 },
        Protocol::Memcache,
        &mc
    ));
    // A binary GET of "k": its own connection class.
    let mut bin = vec![0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    bin.extend_from_slice(&[0; 12]);
    bin.push(b'k');
    let bin = parsed(Protocol::Memcache, &bin);
    assert!(!follows_copies(
        &bin,
        AfterPull::Route,
        Protocol::Memcache,
        &mc
    ));
}

/// A client on one end of a socket pair.
fn client() -> Client {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let now = std::time::Instant::now();
    Client::new(crate::net::Stream::Unix(sock), 1, 0, session, now)
}

#[test]
fn a_pull_reply_moves_on_the_held_request_of_the_client_that_asked_only() {
    let mut c = client();
    let id = c.id();
    let missing = Some(&b"$-1\r\n"[..]);
    assert_eq!(c.pull_reply(id, 0, PullPart::Dump, missing), Step::Wait);
    let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec();
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(&bytes, &Limits::default()) else {
        panic!("GET parses");
    };
    let p = pulls(Protocol::Redis, false, &[(K, &[1, 2], &[0])]);
    let gate = super::super::conn_state::Gate::pulling(&req, &bytes, p, AfterPull::Route);
    c.set_gate(Box::new(gate));
    // Not on its first old owner: the next is asked, for this client
    // only (a stale id is some closed client's).
    assert_eq!(c.pull_reply(id, 0, PullPart::Dump, missing), Step::Wait);
    let gone = Some(&b":-2\r\n"[..]);
    assert_eq!(c.pull_reply(id + 1, 0, PullPart::Ttl, gone), Step::Wait);
    assert_eq!(c.pull_reply(id, 0, PullPart::Ttl, gone), read(0, 2, K));
}

#[test]
fn pulls_start_one_after_the_other_each_once() {
    let k2: &[u8] = b"k2";
    let mut p = pulls(Protocol::Redis, false, &[(K, &[0], &[1]), (k2, &[2], &[1])]);
    assert_eq!(p.start_next(), Some(read(0, 0, K)));
    assert_eq!(p.start_next(), Some(read(1, 2, k2)));
    assert_eq!(p.start_next(), None, "every pull started");
    assert_eq!(Pulls::default().start_next(), None, "a gate with no pulls");
}
