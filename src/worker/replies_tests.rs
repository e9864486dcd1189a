//! A client's replies filled and merged, and what a reply does before
//! it fills its slot, without sockets: slots built by hand, pools from
//! configuration text.

use super::super::conn::{Fragment, Retry};
use super::*;
use crate::proto::{Limits, Parse, Protocol};

fn split(text: &[u8], frags: Vec<Vec<usize>>, mode: MultiMode) -> ReplySlot {
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(text, &Limits::default()) else {
        panic!("parses");
    };
    let n = frags.len();
    ReplySlot {
        multi: Some(Box::new(Multi {
            req,
            bytes: text.to_vec(),
            frags: frags
                .into_iter()
                .map(|keys| Fragment {
                    keys,
                    ..Fragment::default()
                })
                .collect(),
            remaining: n,
            error: None,
            mode,
        })),
        ..ReplySlot::default()
    }
}

fn answer(reply: &[u8], is_error: bool) -> Answer {
    Answer {
        reply: reply.to_vec(),
        is_error,
        unreachable: false,
    }
}

const MGET: &[u8] = b"*4\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";

#[test]
fn a_split_read_is_merged_in_key_order_once_every_fragment_answered() {
    let mut slot = split(MGET, vec![vec![0, 2], vec![1]], MultiMode::Split);
    let r = Protocol::Redis;
    assert!(!slot.fill(Some(1), answer(b"*1\r\n$2\r\nvb\r\n", false), r, None));
    assert!(!slot.ready, "one fragment still to answer");
    assert!(!slot.fill(
        Some(0),
        answer(b"*2\r\n$2\r\nva\r\n$-1\r\n", false),
        r,
        None
    ));
    assert!(slot.ready && slot.multi.is_none());
    assert_eq!(slot.out, b"*3\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n");
}

#[test]
fn a_split_requests_first_error_is_its_reply() {
    let mut slot = split(MGET, vec![vec![0], vec![1], vec![2]], MultiMode::Split);
    let r = Protocol::Redis;
    slot.fill(Some(2), answer(b"-ERR first\r\n", true), r, None);
    slot.fill(Some(0), answer(b"-ERR second\r\n", true), r, None);
    assert!(!slot.ready);
    slot.fill(Some(1), answer(b"*1\r\n$1\r\nx\r\n", false), r, None);
    assert!(slot.ready);
    assert_eq!(slot.out, b"-ERR first\r\n");
}

#[test]
fn a_fragment_replaced_by_retries_and_a_late_zone_answer_are_settled() {
    let mut slot = split(MGET, vec![vec![0], vec![1, 2]], MultiMode::Split);
    slot.fragment_settled();
    assert_eq!(slot.multi.as_ref().map(|m| m.remaining), Some(1));
    // A reply for a slot whose split request was already answered.
    let mut plain = ReplySlot::default();
    assert!(!plain.fill(Some(0), answer(b"+OK\r\n", false), Protocol::Redis, None));
    assert!(!plain.ready);
}

#[test]
fn a_zone_read_answered_by_another_zone_is_a_failover() {
    let yaml = "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n\
                b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n\
                z:\n  listen: 127.0.0.1:22123\n  zones:\n   - a\n   - b\n";
    let c = crate::config::Config::from_str(yaml, std::path::Path::new("t.yml"))
        .expect("config parses");
    let routing = &c.pools[2].routing;
    let Ok(Parse::Done(req)) = Protocol::Memcache.parse_request(b"get k\r\n", &Limits::default())
    else {
        panic!("parses");
    };
    let read = |next: usize| ReplySlot {
        retry: Some(Box::new(Retry {
            req: req.clone(),
            bytes: b"get k\r\n"[..].into(),
            replicas: [0, 1].into_iter().collect(),
            next,
            on_miss: false,
            learns: false,
            pull_on_miss: false,
        })),
        ..ReplySlot::default()
    };
    let hit = b"VALUE k 0 1\r\nv\r\nEND\r\n";
    let mut local = read(1);
    assert!(!local.fill(None, answer(hit, false), Protocol::Memcache, Some(routing)));
    assert!(local.ready && local.retry.is_none() && local.out == hit);
    let mut other = read(2);
    assert!(other.fill(None, answer(hit, false), Protocol::Memcache, Some(routing)));
    // Not a zone pool: never counted as a zone's failover.
    let mut plain = read(2);
    assert!(!plain.fill(None, answer(hit, false), Protocol::Memcache, None));
}

#[test]
fn a_reply_for_the_first_slot_owed_goes_out_a_later_one_waits() {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let mut c = Client::new(
        crate::net::Stream::Unix(sock),
        1,
        0,
        session,
        std::time::Instant::now(),
    );
    let (first, second) = (c.next_seq(), c.next_seq() + 1);
    c.push_reply(ReplySlot::default());
    c.push_reply(ReplySlot::default());
    let filled = c.fill_reply(
        second,
        None,
        answer(b"+OK\r\n", false),
        Protocol::Redis,
        None,
        false,
    );
    assert_eq!(
        filled,
        Filled {
            head: false,
            failover: false
        },
        "waits for the first"
    );
    assert!(c.slot(second).is_some_and(|s| s.ready));
    let filled = c.fill_reply(
        first,
        None,
        answer(b"$1\r\nv\r\n", false),
        Protocol::Redis,
        None,
        false,
    );
    assert_eq!(
        filled,
        Filled {
            head: true,
            failover: false
        }
    );
    let gone = c.fill_reply(
        second + 1,
        None,
        answer(b"+OK\r\n", false),
        Protocol::Redis,
        None,
        false,
    );
    assert_eq!(gone, Filled::default(), "no such slot");
    // A large reply held in chunks, likewise.
    let third = second + 1;
    c.push_reply(ReplySlot::default());
    assert!(!c.fill_held_reply(third, None, Box::default(), Protocol::Redis));
    assert!(c.slot(third).is_some_and(|s| s.ready && s.held.is_some()));
    c.pop_head();
    c.pop_head();
    assert!(
        c.fill_held_reply(third, None, Box::default(), Protocol::Redis),
        "first now"
    );
    assert!(!c.fill_held_reply(third + 1, None, Box::default(), Protocol::Redis));
}

/// Pool `z` of two memcached pools, `a` and `b`, one server each;
/// `extra` makes it a zone or warm-up pool.
fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n\
         b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n\
         z:\n  listen: 127.0.0.1:22123\n{extra}"
    );
    let c = crate::config::Config::from_str(&yaml, std::path::Path::new("t.yml"))
        .expect("config parses");
    let z = c.pools.iter().find(|p| p.name == "z").expect("pool z");
    PoolRt::new(z, &[])
}

const HIT: &[u8] = b"VALUE k 0 1\r\nv\r\nEND\r\n";
const MISS: &[u8] = b"END\r\n";
const ERR: &[u8] = b"SERVER_ERROR out of memory\r\n";

#[test]
fn an_unreachable_servers_request_goes_on_while_it_has_somewhere_to_go() {
    let p = pool("  servers:\n   - 127.0.0.1:11213:1\n");
    let down = Answer {
        unreachable: true,
        ..answer(b"SERVER_ERROR down\r\n", true)
    };
    assert_eq!(p.send_on(None, &down, true), SendOn::Read);
    assert_eq!(
        p.send_on(None, &down, false),
        SendOn::Fill,
        "no next replica"
    );
    assert_eq!(p.send_on(Some(2), &down, false), SendOn::Fragment(2));
    // Reached: a plain pool's answer fills its slot, even a miss.
    assert_eq!(p.send_on(None, &answer(MISS, false), false), SendOn::Fill);
    assert_eq!(p.send_on(Some(1), &answer(HIT, false), false), SendOn::Fill);
}

#[test]
fn a_zone_read_goes_on_at_a_miss_and_a_warm_hit_is_copied() {
    let zones = pool("  zones:\n   - a\n   - b\n");
    assert_eq!(
        zones.send_on(None, &answer(MISS, false), true),
        SendOn::Read
    );
    assert_eq!(zones.send_on(None, &answer(HIT, false), true), SendOn::Fill);
    assert_eq!(zones.send_on(None, &answer(ERR, true), true), SendOn::Fill);
    // A multi-key read's fragment keeps what it found; not an error.
    let found = answer(HIT, false);
    assert_eq!(
        zones.send_on(Some(1), &found, false),
        SendOn::ZoneFragment(1)
    );
    assert_eq!(
        zones.send_on(Some(1), &answer(ERR, true), false),
        SendOn::Fill
    );
    let warm = pool("  warm_up:\n   - a\n   - b\n");
    assert_eq!(
        warm.send_on(None, &answer(HIT, false), true),
        SendOn::WarmCopy
    );
    assert_eq!(warm.send_on(None, &answer(ERR, true), true), SendOn::Fill);
    assert_eq!(warm.send_on(None, &answer(MISS, false), true), SendOn::Read);
}

#[test]
fn a_read_has_a_next_server_when_unreachable_or_failing_over_on_a_miss() {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let now = std::time::Instant::now();
    let mut c = Client::new(crate::net::Stream::Unix(sock), 1, 0, session, now);
    let Ok(Parse::Done(req)) = Protocol::Memcache.parse_request(b"get k\r\n", &Limits::default())
    else {
        panic!("parses");
    };
    let read = |on_miss: bool| ReplySlot {
        retry: Some(Box::new(Retry {
            req: req.clone(),
            bytes: b"get k\r\n"[..].into(),
            replicas: [0, 1].into_iter().collect(),
            next: 1,
            on_miss,
            learns: false,
            pull_on_miss: false,
        })),
        ..ReplySlot::default()
    };
    let (plain, moved, none) = (c.next_seq(), c.next_seq() + 1, c.next_seq() + 2);
    c.push_reply(read(false));
    c.push_reply(read(true));
    c.push_reply(ReplySlot::default());
    assert_eq!(c.read_retry(plain, None, true, false), (false, true));
    assert_eq!(c.read_retry(plain, None, false, false), (false, false));
    assert_eq!(
        c.read_retry(plain, None, false, true),
        (false, true),
        "zone"
    );
    assert_eq!(c.read_retry(moved, None, false, false), (true, true));
    assert_eq!(c.read_retry(moved, Some(0), false, true), (false, false));
    assert_eq!(
        c.read_retry(none, None, true, true),
        (false, false),
        "no retry"
    );
    assert_eq!(
        c.read_retry(none + 1, None, true, true),
        (false, false),
        "no slot"
    );
}

#[test]
fn a_failed_zone_fragment_for_keys_another_zone_missed_is_a_miss() {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let now = std::time::Instant::now();
    let mut c = Client::new(crate::net::Stream::Unix(sock), 1, 0, session, now);
    let seq = c.next_seq();
    let mut slot = split(MGET, vec![vec![0], vec![1], vec![2]], MultiMode::Split);
    if let Some(m) = slot.multi.as_mut() {
        m.frags[1].fallback = true;
    }
    c.push_reply(slot);
    let err = || answer(b"-ERR down\r\n", true);
    let r = Protocol::Redis;
    fn multi(c: &Client, seq: u64) -> Option<&Multi> {
        c.slot(seq).and_then(|s| s.multi.as_deref())
    }
    // The fragment a zone fell back to: its keys are misses.
    c.fill_reply(seq, Some(1), err(), r, None, true);
    let m = multi(&c, seq).expect("still split");
    assert!(m.frags[1].keys.is_empty() && m.frags[1].reply == r.empty_read());
    assert!(m.error.is_none());
    // Any other failed fragment's error is the reply.
    c.fill_reply(seq, Some(2), err(), r, None, true);
    let error = multi(&c, seq).and_then(|m| m.error.as_deref());
    assert_eq!(error, Some(&b"-ERR down\r\n"[..]));
}
