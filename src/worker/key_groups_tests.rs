//! Where a request's keys go in a pool (`PoolRt`'s placement questions
//! and the plans they lead to), on pools built from configuration text,
//! without sockets.

use super::*;
use crate::config::Config;
use crate::proto::{Limits, Parse, Protocol};
use std::path::Path;

fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "rd:\n  listen: 127.0.0.1:22999\n  redis: true\n{extra}  servers:\n    - 127.0.0.1:6379:1 a\n    - 127.0.0.1:6380:1 b\n    - 127.0.0.1:6381:1 c\n"
    );
    let c = Config::from_str(&yaml, Path::new("t.yml")).expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

fn request(bytes: &[u8]) -> Request {
    match Protocol::Redis.parse_request(bytes, &Limits::default()) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn keys_are_grouped_by_server_in_client_order() {
    let mut p = pool("");
    let now = Instant::now();
    let bytes =
        b"*7\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n";
    let req = request(bytes);
    let groups = p
        .server_groups(&req, bytes, now)
        .expect("every key has a server");
    let mut seen: Vec<usize> = groups.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    seen.sort_unstable();
    assert_eq!(seen, vec![0, 1, 2, 3, 4, 5], "each key once");
    for (s, keys) in &groups {
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "in client order");
        for &k in keys {
            let key = &bytes[req.keys[k].clone()];
            assert_eq!(p.server_for(key, now), Some(*s));
        }
    }
    let servers: Vec<usize> = groups.iter().map(|(s, _)| *s).collect();
    let mut distinct = servers.clone();
    distinct.dedup();
    assert_eq!(servers, distinct, "one group per server");
}

/// A RENAME of two plain keys that `p` places on different servers.
fn rename_apart(p: &mut PoolRt, now: Instant) -> String {
    let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let first = p.server_for(names[0].as_bytes(), now);
    let other = names
        .iter()
        .find(|n| p.server_for(n.as_bytes(), now) != first)
        .expect("two keys on different servers");
    format!(
        "*3\r\n$6\r\nRENAME\r\n${}\r\n{}\r\n${}\r\n{}\r\n",
        names[0].len(),
        names[0],
        other.len(),
        other
    )
}

#[test]
fn keys_apart_when_any_two_servers_differ() {
    let mut p = pool("  hash_tag: \"{}\"\n");
    let now = Instant::now();
    // A hash tag puts both keys of a RENAME on one server.
    let together = b"*3\r\n$6\r\nRENAME\r\n$7\r\n{u}:old\r\n$7\r\n{u}:new\r\n";
    let req = request(together);
    let crate::proto::Op::Redis(op) = req.op else {
        panic!()
    };
    assert!(!p.keys_apart(op.cmd, &req, together, now));
    // Some pair of plain keys lives apart on three servers.
    let apart = rename_apart(&mut p, now);
    let req = request(apart.as_bytes());
    assert!(p.keys_apart(op.cmd, &req, apart.as_bytes(), now));
}

#[test]
fn a_keyless_command_goes_to_the_first_server_not_ejected() {
    let mut p = pool("");
    let now = Instant::now();
    assert_eq!(p.keyless_server(7, now), Some(0));
    p.servers[0].ejected_until = Some(now + std::time::Duration::from_secs(30));
    assert_eq!(p.keyless_server(7, now), Some(1));
    let mut r = pool("  keyless_server: random\n");
    let picks: Vec<usize> = (0..50).filter_map(|c| r.keyless_server(c, now)).collect();
    assert!(picks.len() == 50 && picks.iter().all(|&s| s < 3));
}

fn groups_of(p: &mut PoolRt, bytes: &[u8]) -> (Request, KeyGroups) {
    let req = request(bytes);
    let groups = p
        .server_groups(&req, bytes, Instant::now())
        .expect("servers");
    (req, groups)
}

#[test]
fn a_split_request_is_refused_sent_whole_or_split() {
    let mut p = pool("  hash_tag: \"{}\"\n");
    // MSETNX runs on one server: its keys together go whole ...
    let (req, g) = groups_of(
        &mut p,
        b"*5\r\n$6\r\nMSETNX\r\n$4\r\n{u}a\r\n$1\r\n1\r\n$4\r\n{u}b\r\n$1\r\n2\r\n",
    );
    assert_eq!(g.len(), 1);
    assert_eq!(p.split(&req, g.len()), Split::Whole);
    // ... apart they are refused as a cluster node would.
    let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let bulk = |n: &str| format!("${}\r\n{}\r\n", n.len(), n);
    let mut mget = format!("*{}\r\n$4\r\nMGET\r\n", names.len() + 1);
    let mut msetnx = format!("*{}\r\n$6\r\nMSETNX\r\n", 2 * names.len() + 1);
    for n in &names {
        mget += &bulk(n);
        msetnx += &(bulk(n) + &bulk("1"));
    }
    let (req, g) = groups_of(&mut p, mget.as_bytes());
    assert!(g.len() > 1, "twenty keys on three servers");
    assert_eq!(p.split(&req, g.len()), Split::Fragments);
    let (req, g) = groups_of(&mut p, msetnx.as_bytes());
    let Split::Refused(out) = p.split(&req, g.len()) else {
        panic!("MSETNX over several servers goes");
    };
    assert!(out.starts_with(b"-") && out.ends_with(b"\r\n"), "{out:?}");
    assert!(String::from_utf8_lossy(&out).contains("MSETNX"), "{out:?}");
    // An MGET of keys on one server is sent as one GET would be.
    let (req, g) = groups_of(&mut p, b"*3\r\n$4\r\nMGET\r\n$4\r\n{u}a\r\n$4\r\n{u}b\r\n");
    assert_eq!(p.split(&req, g.len()), Split::Whole);
}

/// A replicated memcached pool: two servers, each key on both.
fn replicated() -> PoolRt {
    let yaml = "m:\n  listen: 127.0.0.1:22121\n  replicas: 2\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n";
    let c = Config::from_str(yaml, Path::new("t.yml")).expect("config parses");
    PoolRt::new(&c.pools[0], &[])
}

#[test]
fn a_replicated_split_read_falls_over_to_the_next_replica_once() {
    let mut p = replicated();
    let now = Instant::now();
    let bytes = b"get a b c\r\n";
    let req = match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{other:?}"),
    };
    let groups = p.server_groups(&req, bytes, now).expect("servers");
    // Split even when every key's owner is one server: per key it
    // falls over.
    assert_eq!(p.split(&req, 1), Split::Fragments);
    let mut m = Multi {
        req,
        bytes: bytes.to_vec(),
        frags: groups
            .iter()
            .map(|(_, keys)| crate::worker::conn::Fragment {
                keys: keys.clone(),
                ..Default::default()
            })
            .collect(),
        remaining: groups.len(),
        error: None,
        mode: MultiMode::Split,
    };
    let (attempt, next) = p.next_replicas(&m, 0).expect("a second replica");
    assert_eq!(attempt, 1);
    let mut replicas = Vec::new();
    for (server, keys) in &next {
        for &k in keys {
            p.placement
                .replicas_for(&bytes[m.req.keys[k].clone()], 2, &mut replicas);
            assert_eq!(replicas[1], *server, "the key's second replica");
            assert_ne!(replicas[0], *server);
        }
    }
    let moved: Vec<usize> = next.iter().flat_map(|(_, k)| k.clone()).collect();
    assert_eq!(moved, groups[0].1, "the failed fragment's keys, in order");
    let (n, remaining) = (m.frags.len(), m.remaining);
    let base = m.refragment(0, next.iter().map(|(_, k)| k), attempt);
    assert_eq!(base, n);
    assert!(m.frags[0].keys.is_empty(), "the failed one answers nothing");
    assert_eq!(m.remaining, remaining + next.len());
    assert!(m.frags[base..].iter().all(|f| f.attempt == 1));
    // The second replica was the last: its failure is the answer.
    assert_eq!(p.next_replicas(&m, base), None);
    assert_eq!(p.next_replicas(&m, 99), None, "no such fragment");
    // A pool of one copy per key never falls over.
    let redis = pool("");
    let mget = b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n";
    let one = Multi {
        req: request(mget),
        bytes: mget.to_vec(),
        frags: vec![crate::worker::conn::Fragment {
            keys: vec![0, 1],
            ..Default::default()
        }],
        remaining: 1,
        error: None,
        mode: MultiMode::Split,
    };
    assert_eq!(redis.next_replicas(&one, 0), None);
}

#[test]
fn a_failed_read_tries_each_replica_once_in_order() {
    let mut r = crate::worker::conn::Retry {
        req: request(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"),
        bytes: b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"[..].into(),
        replicas: [4, 2, 7].into_iter().collect(),
        next: 1,
        on_miss: false,
        learns: false,
        pull_on_miss: false,
    };
    assert_eq!(r.take_next(), Some(2));
    assert_eq!(r.take_next(), Some(7));
    assert_eq!(r.take_next(), None);
    assert_eq!(r.take_next(), None);
}

#[test]
fn a_request_for_one_server_goes_to_its_key_or_is_refused() {
    let mut p = pool("  hash_tag: \"{}\"\n");
    let now = Instant::now();
    let get = b"*2\r\n$3\r\nGET\r\n$6\r\n{u}abc\r\n";
    let owner = p.server_for(b"u", now).expect("a server");
    assert_eq!(
        p.place(&request(get), get, false, 1, now),
        Placed::Server(owner)
    );
    let time = b"*1\r\n$4\r\nTIME\r\n";
    assert_eq!(
        p.place(&request(time), time, true, 1, now),
        Placed::Server(0)
    );
    // RENAME's keys on two servers: refused, naming the command.
    let rename = rename_apart(&mut p, now);
    let Placed::Apart(out) = p.place(
        &request(rename.as_bytes()),
        rename.as_bytes(),
        false,
        1,
        now,
    ) else {
        panic!("refused");
    };
    assert!(out.starts_with(b"-") && String::from_utf8_lossy(&out).contains("RENAME"));
    // Every server ejected: nowhere to go.
    for s in &mut p.servers {
        s.ejected_until = Some(now + std::time::Duration::from_secs(30));
    }
    assert_eq!(
        p.place(&request(time), time, true, 1, now),
        Placed::NoServer
    );
}

fn mc(bytes: &[u8]) -> Request {
    match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_replicated_read_tries_each_replica_in_turn_and_a_write_goes_to_all() {
    let mut p = replicated();
    let now = Instant::now();
    let mut ring = Vec::new();
    p.placement.replicas_for(b"k", 2, &mut ring);
    assert_eq!(ring.len(), 2);
    let get = b"get k\r\n";
    assert_eq!(p.replicas(&mc(get), get, now), Owners::Read(ring.clone()));
    let set = b"set k 0 0 1\r\nv\r\n";
    assert_eq!(p.replicas(&mc(set), set, now), Owners::Write(ring.clone()));
    let delete = b"delete k\r\n";
    assert_eq!(p.replicas(&mc(delete), delete, now), Owners::Write(ring));
}

#[test]
fn a_sentinel_read_goes_to_a_replica_that_is_up_with_its_master_kept() {
    let mut p = pool("  sentinels:\n    - 127.0.0.1:26379\n  read_from: prefer-replica\n");
    let now = Instant::now();
    let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    let master = p.server_for(b"k", now).expect("a master");
    assert_eq!(
        p.replica_read(&request(get), get, 1, now),
        None,
        "no replica known"
    );
    // Another server stands for the master's replica.
    let replica = (master + 1) % 3;
    p.replicas_of[master] = vec![replica];
    assert_eq!(
        p.replica_read(&request(get), get, 1, now),
        Some(Owners::Read(vec![replica, master]))
    );
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
    assert_eq!(p.replica_read(&request(set), set, 1, now), None, "a write");
    let time = b"*1\r\n$4\r\nTIME\r\n";
    assert_eq!(p.replica_read(&request(time), time, 1, now), None, "no key");
    // The replica resting after a failure: the master serves it.
    p.servers[replica].retry_at = Some(now + std::time::Duration::from_secs(5));
    assert_eq!(p.replica_read(&request(get), get, 1, now), None);
}

#[test]
fn a_replicated_read_keeps_the_others_to_fall_over_to_and_a_write_is_a_fragment_each() {
    let p = replicated();
    let get = b"get k\r\n";
    let r = p
        .replicated_read(&mc(get), get, vec![1, 0], 7)
        .expect("a server");
    assert_eq!(
        (r.servers(), r.frag, &r.write),
        (vec![1], None, &Write::Request)
    );
    let slot = r.slot.expect("a slot");
    let retry = slot.retry.expect("kept to fall over");
    assert_eq!((&retry.replicas[..], retry.next), (&[1, 0][..], 1));
    assert!(slot.multi.is_none());
    assert!(
        p.replicated_read(&mc(get), get, vec![], 7).is_none(),
        "none"
    );
    let set = b"set k 0 0 1\r\nv\r\n";
    let w = p.replicated_write(&mc(set), vec![0, 1]).expect("servers");
    assert_eq!((w.servers(), w.frag), (vec![0, 1], Some(0)));
    assert!(w.bounded.is_empty(), "every write waited for");
    let slot = w.slot.expect("a slot");
    let m = slot.multi.expect("one fragment per server");
    assert_eq!(
        (m.frags.len(), m.remaining, m.mode),
        (2, 2, MultiMode::Replicate)
    );
    assert!(slot.retry.is_none());
    assert!(p.replicated_write(&mc(set), vec![]).is_none(), "none");
    assert_eq!(
        p.owners_plan(Owners::Write(vec![]), &mc(set), set, 7)
            .unwrap_err(),
        NotSent::NoServer
    );
}

#[test]
fn a_random_replicated_read_starts_anywhere_but_keeps_every_replica_once() {
    let mut p = replicated();
    p.cfg.replica_read_random = true;
    let get = b"get k\r\n";
    for id in 0..8 {
        let r = p.replicated_read(&mc(get), get, vec![0, 1, 2], id).unwrap();
        let retry = r.slot.as_ref().unwrap().retry.as_ref().unwrap();
        assert_eq!(
            r.servers(),
            vec![retry.replicas[0]],
            "the first of the order"
        );
        let mut all = retry.replicas.to_vec();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2]);
    }
}

#[test]
fn a_split_is_a_fragment_per_group_merged_in_one_slot() {
    let mut p = pool("");
    let names: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let mut mget = format!("*{}\r\n$4\r\nMGET\r\n", names.len() + 1);
    for n in &names {
        mget += &format!("${}\r\n{n}\r\n", n.len());
    }
    let (req, groups) = groups_of(&mut p, mget.as_bytes());
    assert!(groups.len() > 1);
    let plan = PoolRt::split_plan(&req, mget.as_bytes(), groups.clone());
    assert_eq!((plan.frag, &plan.write), (Some(0), &Write::Fragment));
    assert_eq!(plan.to, groups, "each server with its keys");
    let m = plan.slot.and_then(|s| s.multi).expect("merged");
    assert_eq!((m.mode, m.remaining), (MultiMode::Split, groups.len()));
    let frag_keys: Vec<&Vec<usize>> = m.frags.iter().map(|f| &f.keys).collect();
    let group_keys: Vec<&Vec<usize>> = groups.iter().map(|(_, k)| k).collect();
    assert_eq!(frag_keys, group_keys);
}

/// The slot of `bytes` (a multi-key read) split over `p`'s servers.
fn split_slot(p: &mut PoolRt, bytes: &[u8]) -> ReplySlot {
    let req = mc(bytes);
    let groups = p
        .server_groups(&req, bytes, Instant::now())
        .expect("servers");
    PoolRt::split_plan(&req, bytes, groups)
        .slot
        .expect("a slot")
}

#[test]
fn a_failed_fragments_keys_go_to_their_next_replicas_as_new_fragments_of_its_slot() {
    let mut p = replicated();
    let mut m = split_slot(&mut p, b"get a b c\r\n").multi.expect("split");
    let n = m.frags.len();
    let again = p.replica_retry(&mut m, 0).expect("a second replica");
    assert!(again.slot.is_none(), "the request's slot is there already");
    assert_eq!(
        (again.frag, &again.write),
        (Some(n as u32), &Write::Fragment)
    );
    assert_eq!(m.frags.len(), n + again.to.len(), "counted before sent");
    assert!(m.frags[0].keys.is_empty(), "the failed one answers nothing");
    // The second replica was the last.
    assert!(p.replica_retry(&mut m, n).is_none());
}

#[test]
fn a_failed_read_is_sent_again_whole_to_its_next_server_its_bytes_kept() {
    let p = replicated();
    let bytes = b"get a\r\n";
    let mut slot = ReplySlot {
        retry: Some(Box::new(crate::worker::conn::Retry {
            req: mc(bytes),
            bytes: bytes[..].into(),
            replicas: [1, 0].into_iter().collect(),
            next: 1,
            on_miss: false,
            learns: false,
            pull_on_miss: false,
        })),
        ..ReplySlot::default()
    };
    let again = p.send_again(&mut slot, None).expect("a next replica");
    assert_eq!(again.plan.servers(), vec![0]);
    assert!(
        again.plan.slot.is_none(),
        "the request's slot is there already"
    );
    assert_eq!(
        (again.plan.frag, &again.plan.write),
        (None, &Write::Request)
    );
    assert_eq!((again.req, &again.bytes[..]), (mc(bytes), &bytes[..]));
    assert_eq!(again.fragments, 0);
    let kept = slot.retry.as_ref().map(|r| r.bytes.to_vec());
    assert_eq!(kept.as_deref(), Some(&bytes[..]), "the slot keeps them");
    assert!(p.send_again(&mut slot, None).is_none(), "none left");
    assert!(
        p.send_again(&mut slot, Some(0)).is_none(),
        "not a split read"
    );
}

#[test]
fn a_failed_fragment_is_sent_again_as_new_fragments_of_its_slot() {
    let mut p = replicated();
    let bytes = b"get a b c\r\n";
    let req = mc(bytes);
    let mut slot = split_slot(&mut p, bytes);
    let n = slot.multi.as_ref().map_or(0, |m| m.frags.len());
    let again = p.send_again(&mut slot, Some(0)).expect("a second replica");
    assert_eq!(
        (again.plan.frag, &again.plan.write),
        (Some(n as u32), &Write::Fragment)
    );
    assert_eq!((again.req, &again.bytes[..]), (req, &bytes[..]));
    assert_eq!(
        again.fragments, 0,
        "counted as fragments in zone pools only"
    );
    assert!(p.send_again(&mut slot, None).is_none(), "not a whole read");
}
