//! A warm-up copy's steps (`WarmCopy::answer`) on real reply bytes,
//! without sockets.

use super::*;

fn copy(proto: Protocol) -> (WarmCopy, Vec<u8>) {
    WarmCopy::start(0, proto, b"k", (3, 1))
}

#[test]
fn a_redis_value_is_dumped_timed_and_restored_without_replace() {
    let (mut c, first) = copy(Protocol::Redis);
    assert_eq!(first, b"*2\r\n$4\r\nDUMP\r\n$1\r\nk\r\n");
    assert_eq!((c.warm, c.cold), (3, 1));
    assert_eq!(c.answer(Some(b"$3\r\nabc\r\n")), WarmStep::Ask(pttl(b"k")));
    let WarmStep::Store(store) = c.answer(Some(b":5000\r\n")) else {
        panic!("stored");
    };
    assert_eq!(store, restore(b"k", 5000, b"abc"));
    assert!(
        store.starts_with(b"*4\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n"),
        "no REPLACE"
    );
    // No expiry.
    let (mut c, _) = copy(Protocol::Redis);
    assert!(matches!(c.answer(Some(b"$1\r\nx\r\n")), WarmStep::Ask(_)));
    assert_eq!(
        c.answer(Some(b":-1\r\n")),
        WarmStep::Store(restore(b"k", -1, b"x"))
    );
}

#[test]
fn a_redis_miss_a_key_gone_or_an_error_copies_nothing() {
    let (mut c, _) = copy(Protocol::Redis);
    assert_eq!(c.answer(Some(b"$-1\r\n")), WarmStep::Done, "a miss");
    let (mut c, _) = copy(Protocol::Redis);
    assert_eq!(c.answer(Some(b"-ERR no\r\n")), WarmStep::Done);
    let (mut c, _) = copy(Protocol::Redis);
    assert!(matches!(c.answer(Some(b"$1\r\nx\r\n")), WarmStep::Ask(_)));
    assert_eq!(c.answer(Some(b":-2\r\n")), WarmStep::Done, "gone meanwhile");
    let (mut c, _) = copy(Protocol::Redis);
    assert!(matches!(c.answer(Some(b"$1\r\nx\r\n")), WarmStep::Ask(_)));
    assert_eq!(c.answer(Some(b"-ERR x\r\n")), WarmStep::Done, "no TTL");
    let (mut c, _) = copy(Protocol::Redis);
    assert_eq!(c.answer(None), WarmStep::Done, "unreachable");
}

#[test]
fn a_memcached_value_is_read_with_its_flags_and_ttl_and_added() {
    let (mut c, first) = copy(Protocol::Memcache);
    assert_eq!(first, mc_get(b"k"));
    assert!(first.starts_with(b"mg k"));
    let WarmStep::Store(store) = c.answer(Some(b"VA 3 f5 t100\r\nabc\r\n")) else {
        panic!("stored");
    };
    assert_eq!(store, mc_store(b"k", 5, 100, b"abc"));
    assert!(store.starts_with(b"ms k"));
    let (mut c, _) = copy(Protocol::Memcache);
    assert_eq!(c.answer(Some(b"EN\r\n")), WarmStep::Done, "a miss");
    let (mut c, _) = copy(Protocol::Memcache);
    assert_eq!(
        c.answer(Some(b"SERVER_ERROR out of memory\r\n")),
        WarmStep::Done
    );
}

#[test]
fn a_copy_reads_the_warm_owner_then_stores_on_the_cold_one_and_is_over() {
    let mut w = Warms::default();
    let first = w.start(2, Protocol::Redis, b"k", (3, 1));
    assert_eq!((first.pool, first.server), (2, 3));
    assert_eq!(first.bytes, dump(b"k"));
    let idx = first.idx.expect("its reply comes back");
    assert!(matches!(first.waiter(), Waiter::Warm { idx: i } if i as usize == idx));
    let ttl = w.reply(idx, Some(b"$3\r\nabc\r\n")).expect("the TTL");
    assert_eq!((ttl.server, ttl.idx, ttl.bytes), (3, Some(idx), pttl(b"k")));
    let store = w.reply(idx, Some(b":5000\r\n")).expect("stored");
    assert_eq!((store.pool, store.server, store.idx), (2, 1, None));
    assert_eq!(store.bytes, restore(b"k", 5000, b"abc"));
    assert!(
        matches!(store.waiter(), Waiter::Internal),
        "its reply dropped"
    );
    assert_eq!(w.reply(idx, Some(b":5000\r\n")), None, "the copy is over");
}

#[test]
fn a_copy_with_nothing_to_copy_or_a_read_not_queued_is_over() {
    let mut w = Warms::default();
    let first = w.start(0, Protocol::Memcache, b"k", (3, 1));
    let idx = first.idx.unwrap();
    assert_eq!(w.reply(idx, Some(b"EN\r\n")), None, "a miss");
    assert_eq!(w.reply(idx, Some(b"VA 1 f0 t-1\r\nx\r\n")), None, "over");
    let first = w.start(0, Protocol::Memcache, b"k", (3, 1));
    w.unsent(&first);
    let idx = first.idx.unwrap();
    assert_eq!(w.reply(idx, Some(b"VA 1 f0 t-1\r\nx\r\n")), None, "over");
    // Another copy's slot is left alone.
    let other = w.start(0, Protocol::Memcache, b"j", (3, 1));
    let store = w.reply(other.idx.unwrap(), Some(b"VA 1 f0 t-1\r\nx\r\n"));
    assert_eq!(store.map(|s| s.bytes), Some(mc_store(b"j", 0, -1, b"x")));
}
