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
