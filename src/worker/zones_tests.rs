//! A zone pool's decisions without sockets: the pool built from
//! configuration text (two memcached pools, one server each, as zones),
//! asked where a request's key goes zone by zone.

use super::*;
use crate::config::Config;
use crate::proto::{Limits, Parse, Protocol};
use crate::worker::key_groups::Resend;
use std::path::Path;

/// The zone pool over pools `a` (server 0) and `b` (server 1); `extra`
/// adds keys to it.
fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n\
         b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n\
         z:\n  listen: 127.0.0.1:22123\n{extra}"
    );
    let c = Config::from_str(&yaml, Path::new("t.yml")).expect("config parses");
    let z = c.pools.iter().find(|p| p.name == "z").expect("zone pool");
    PoolRt::new(z, &[])
}

fn mc(bytes: &[u8]) -> Request {
    match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{other:?}"),
    }
}

const ZONES: &str = "  zones:\n   - a\n   - b\n";

#[test]
fn a_single_key_request_goes_to_its_owner_in_each_zone_local_first() {
    let mut p = pool(ZONES);
    let now = Instant::now();
    let get = b"get k\r\n";
    assert_eq!(
        p.zone_owners(ZoneStep::Read, &mc(get), get, now),
        Owners::Read(vec![0, 1])
    );
    let set = b"set k 0 0 1\r\nv\r\n";
    assert_eq!(
        p.zone_owners(ZoneStep::AsyncWrite, &mc(set), set, now),
        Owners::ZoneWrite(vec![0, 1])
    );
    assert_eq!(
        p.zone_owners(ZoneStep::SyncWrite, &mc(set), set, now),
        Owners::Write(vec![0, 1])
    );
    // The local zone's server ejected: the other zone alone owns the key.
    p.servers[0].ejected_until = Some(now + std::time::Duration::from_secs(30));
    p.rebuild(now);
    assert_eq!(
        p.zone_owners(ZoneStep::Read, &mc(get), get, now),
        Owners::Read(vec![1])
    );
}

/// A split read of `bytes` with one fragment of every key, from the local
/// zone.
fn read(bytes: &[u8]) -> Multi {
    let req = mc(bytes);
    Multi {
        frags: vec![Fragment {
            keys: (0..req.keys.len()).collect(),
            ..Fragment::default()
        }],
        remaining: 1,
        error: None,
        mode: MultiMode::Split,
        bytes: bytes.to_vec(),
        req,
    }
}

const GET: &[u8] = b"get a b c d\r\n";

#[test]
fn a_fragments_misses_move_to_their_owner_in_the_next_zone() {
    let p = pool(ZONES);
    let mut m = read(GET);
    let reply = b"VALUE a 0 1\r\n1\r\nEND\r\n";
    assert_eq!(
        p.zone_answer(&m, 0, reply),
        Some(ZoneAnswer {
            zone: 0,
            moves: vec![1, 2, 3],
            copies: Vec::new()
        })
    );
    let groups = p.next_zone_groups(&m, &[1, 2, 3], 0);
    assert_eq!(groups.as_slice(), &[(1, 1, vec![1, 2, 3])]);
    assert!(
        p.next_zone_groups(&m, &[1, 2, 3], 1).is_empty(),
        "no zone after the last"
    );
    assert_eq!(m.zone_fragments(0, &groups, false, b"END\r\n"), 1);
    assert_eq!(m.remaining, 2, "counted before it is sent");
    assert_eq!(
        m.frags[0].keys,
        vec![0, 1, 2, 3],
        "its misses leave it later"
    );
    let f = &m.frags[1];
    assert_eq!(
        (f.attempt, f.fallback, f.keys.clone()),
        (1, true, vec![1, 2, 3])
    );
    // With `zone_failover: error` a miss is the answer.
    let p = pool("  zones:\n   - a\n   - b\n  zone_failover: error\n");
    assert_eq!(p.zone_answer(&read(GET), 0, reply), None);
    // Not a read.
    let mut w = read(GET);
    w.mode = MultiMode::Zones;
    assert_eq!(w.zone_retry(0), None);
    assert_eq!(pool(ZONES).zone_answer(&w, 0, reply), None);
}

#[test]
fn a_failed_local_fragment_moves_whole_and_a_warm_hit_is_copied_to_the_cold_pool() {
    let p = pool("  warm_up:\n   - a\n   - b\n");
    let mut m = read(GET);
    let (keys, zone) = m.zone_retry(0).expect("a zone pool's read");
    assert_eq!((keys.as_slice(), zone), (&[0, 1, 2, 3][..], 0));
    let groups = p.next_zone_groups(&m, &keys, zone);
    assert_eq!(m.zone_fragments(0, &groups, true, b"END\r\n"), 1);
    assert!(m.frags[0].keys.is_empty() && m.frags[0].reply == b"END\r\n");
    assert!(
        !m.frags[1].fallback,
        "the local zone's keys: a failure is the answer"
    );
    assert_eq!(m.remaining, 2);
    // The warm pool found `b`: copied from its warm owner to its cold one.
    let answer = p
        .zone_answer(&m, 1, b"VALUE b 0 1\r\n2\r\nEND\r\n")
        .expect("a warm-up read");
    assert_eq!(answer.zone, 1);
    assert_eq!(answer.copies, vec![(b"b".to_vec(), 1, 0)]);
    // A local fragment's hits are not copied anywhere.
    let m = read(GET);
    let local = p.zone_answer(&m, 0, b"VALUE b 0 1\r\n2\r\nEND\r\n");
    assert!(local.is_some_and(|a| a.copies.is_empty() && a.moves == vec![0, 2, 3]));
}

#[test]
fn a_write_is_copied_to_its_keys_owners_in_the_other_zones() {
    let mut p = pool("  warm_up:\n   - a\n   - b\n");
    let delete = b"delete k\r\n";
    let copy = p.zone_copy(4, &mc(delete), delete);
    assert_eq!((copy.pool, copy.servers()), (4, vec![Some(1)]));
    assert_eq!(copy.write, Write::Request, "one key: the request whole");
    assert_eq!(copy.op, mc(delete).op);
    assert!(matches!(copy.waiter, Waiter::Internal), "its reply dropped");
    assert!(copy.bounded, "dropped and counted when its queue is full");
    // The warm pool's server ejected: no copy.
    let now = Instant::now();
    p.servers[1].ejected_until = Some(now + std::time::Duration::from_secs(30));
    p.rebuild(now);
    assert!(p.zone_copy(4, &mc(delete), delete).to.is_empty());
}

#[test]
fn an_async_write_is_a_fragment_per_zone_the_remote_ones_bounded_as_copies() {
    let mut p = pool(ZONES);
    let now = Instant::now();
    let set = b"set k 0 0 1\r\nv\r\n";
    let w = p.zone_write(&mc(set), vec![0, 1]).expect("owners");
    assert_eq!((w.servers(), w.frag), (vec![0, 1], Some(0)));
    assert_eq!(&w.bounded[..], &[false, true], "the local zone waited for");
    let m = w.slot.and_then(|s| s.multi).expect("a fragment per zone");
    assert_eq!(m.mode, MultiMode::Zones);
    let zones: Vec<u8> = m.frags.iter().map(|f| f.attempt).collect();
    assert_eq!(zones, vec![0, 1]);
    // Only the remote zone left: its one fragment is still bounded.
    let w = p.zone_write(&mc(set), vec![1]).expect("an owner");
    assert_eq!(&w.bounded[..], &[true]);
    assert!(p.zone_write(&mc(set), vec![]).is_none());
    let o = p.zone_owners(ZoneStep::AsyncWrite, &mc(set), set, now);
    let plan = p.owners_plan(o, &mc(set), set, 1).expect("sent");
    assert_eq!(plan.bounded.len(), 2);
}

#[test]
fn missed_keys_go_to_the_next_zone_as_new_fragments_of_the_read() {
    let p = pool(ZONES);
    let mut m = read(GET);
    let next = p.zone_next(&mut m, 0, &[1, 3], 0, false).expect("zone b");
    assert!(next.slot.is_none(), "the read's slot is there already");
    assert_eq!((next.frag, &next.write), (Some(1), &Write::Fragment));
    assert_eq!(next.to.as_slice(), &[(1, vec![1, 3])]);
    assert_eq!((m.frags.len(), m.remaining), (2, 2), "counted before sent");
    assert!(m.frags[1].fallback, "a miss's read: its failure is a miss");
    // No zone after the last.
    assert!(p.zone_next(&mut m, 1, &[1, 3], 1, false).is_none());
}

#[test]
fn a_failed_local_fragment_is_sent_again_to_the_next_zone_counted_as_fragments() {
    let p = pool(ZONES);
    let mut slot = ReplySlot {
        multi: Some(Box::new(read(GET))),
        ..ReplySlot::default()
    };
    let again = p.send_again(&mut slot, Some(0)).expect("zone b");
    assert_eq!(again.plan.to.as_slice(), &[(1, vec![0, 1, 2, 3])]);
    assert_eq!(
        (again.plan.frag, &again.plan.write),
        (Some(1), &Write::Fragment)
    );
    assert_eq!((again.req, &again.bytes[..]), (mc(GET), GET));
    assert_eq!(again.fragments, 1, "a zone pool's new fragments counted");
    // No zone after the last.
    assert!(p.send_again(&mut slot, Some(1)).is_none());
}

#[test]
fn a_fragments_misses_leave_it_and_its_reply_for_new_fragments_of_the_next_zone() {
    let p = pool(ZONES);
    let mut m = read(GET);
    let mut reply = b"VALUE a 0 1\r\n1\r\nEND\r\n".to_vec();
    let (copies, again) = p.zone_moves(&mut m, 0, &mut reply);
    assert!(copies.is_empty(), "not a warm-up pool");
    let again = again.expect("zone b owns the misses");
    assert_eq!(again.plan.to.as_slice(), &[(1, vec![1, 2, 3])]);
    assert_eq!(
        (again.plan.frag, &again.plan.write),
        (Some(1), &Write::Fragment)
    );
    assert_eq!((again.req, &again.bytes[..]), (mc(GET), GET));
    assert_eq!(again.fragments, 1, "counted as fragments");
    assert_eq!(m.frags[0].keys, vec![0], "the misses are the new one's");
    assert_eq!(m.remaining, 2, "counted before it is sent");
    assert_eq!(
        reply,
        p.proto.drop_misses(b"VALUE a 0 1\r\n1\r\nEND\r\n".to_vec())
    );
    // The next zone's fragment misses too: no zone is left, so its misses
    // stay its own, and so does its reply.
    let mut last = b"END\r\n".to_vec();
    let (copies, again) = p.zone_moves(&mut m, 1, &mut last);
    assert!(copies.is_empty() && again.is_none());
    assert_eq!(
        (m.frags[1].keys.clone(), &last[..]),
        (vec![1, 2, 3], &b"END\r\n"[..])
    );
}

#[test]
fn a_warm_fragments_hits_are_copies_to_start_and_its_misses_stay() {
    let p = pool("  warm_up:\n   - a\n   - b\n");
    let mut m = read(GET);
    let groups = p.next_zone_groups(&m, &[0, 1, 2, 3], 0);
    m.zone_fragments(0, &groups, true, b"END\r\n");
    let mut reply = b"VALUE b 0 1\r\n2\r\nEND\r\n".to_vec();
    let (copies, again) = p.zone_moves(&mut m, 1, &mut reply);
    assert_eq!(copies, vec![(b"b".to_vec(), 1, 0)]);
    assert!(again.is_none(), "no zone after the warm pool");
    assert_eq!(m.frags[1].keys, vec![0, 1, 2, 3], "nothing moved");
    assert_eq!(reply, b"VALUE b 0 1\r\n2\r\nEND\r\n", "kept as it came");
}

#[test]
fn what_goes_on_after_a_reply_is_planned_by_why() {
    let p = pool(ZONES);
    let mut slot = ReplySlot {
        multi: Some(Box::new(read(GET))),
        ..ReplySlot::default()
    };
    let mut reply = b"VALUE c 0 1\r\n3\r\nEND\r\n".to_vec();
    let why = Resend::Missed {
        fi: 0,
        reply: &mut reply,
    };
    let (copies, again) = p.resend(&mut slot, why);
    assert!(copies.is_empty());
    let again = again.expect("the misses move");
    assert_eq!(again.plan.to.as_slice(), &[(1, vec![0, 1, 3])]);
    // A failed fragment of zone b has no zone left.
    let (copies, again) = p.resend(&mut slot, Resend::Failed(Some(1)));
    assert!(copies.is_empty() && again.is_none());
    // Not a warm-up read: nothing to copy.
    let (copies, again) = p.resend(&mut slot, Resend::WarmHit);
    assert!(copies.is_empty() && again.is_none());
    // A slot with no split read: no misses to move.
    let mut whole = ReplySlot::default();
    let why = Resend::Missed {
        fi: 0,
        reply: &mut reply,
    };
    assert!(p.resend(&mut whole, why).1.is_none());
}
