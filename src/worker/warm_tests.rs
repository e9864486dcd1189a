//! A warm-up copy's steps (`WarmCopy::answer`) on real reply bytes,
//! without sockets.

use super::*;
use crate::worker::send_plan::Write;

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

/// A copy's plan: (pool, server, copy index its reply goes back to,
/// bytes), checked to be one unbounded request of the proxy's own.
fn sent(plan: CopyPlan) -> (usize, usize, Option<usize>, Vec<u8>) {
    assert!(
        !plan.bounded,
        "a warm-up copy is not dropped for a full queue"
    );
    let [server] = plan.servers()[..] else {
        panic!("one server: {plan:?}");
    };
    let Write::Bytes(bytes) = plan.write else {
        panic!("the proxy's own bytes: {plan:?}");
    };
    let idx = match plan.waiter {
        Waiter::Warm { idx } => Some(idx as usize),
        Waiter::Internal => None,
        other => panic!("{other:?}"),
    };
    (
        plan.pool,
        server.expect("a server"),
        idx,
        bytes.into_owned(),
    )
}

#[test]
fn a_copy_reads_the_warm_owner_then_stores_on_the_cold_one_and_is_over() {
    let mut w = Warms::default();
    let first = w.start(2, Protocol::Redis, b"k", (3, 1)).expect("sent");
    assert_eq!(
        first.op,
        Protocol::Redis.own_request_op(&dump(b"k")).unwrap()
    );
    let (pool, server, idx, bytes) = sent(first);
    assert_eq!((pool, server, bytes), (2, 3, dump(b"k")));
    let idx = idx.expect("its reply comes back");
    let ttl = w.reply(idx, Some(b"$3\r\nabc\r\n")).expect("the TTL");
    assert_eq!(sent(ttl), (2, 3, Some(idx), pttl(b"k")));
    let store = w.reply(idx, Some(b":5000\r\n")).expect("stored");
    assert_eq!(
        sent(store),
        (2, 1, None, restore(b"k", 5000, b"abc")),
        "its reply dropped"
    );
    assert!(
        w.reply(idx, Some(b":5000\r\n")).is_none(),
        "the copy is over"
    );
}

#[test]
fn a_copy_with_nothing_to_copy_or_a_read_not_queued_is_over() {
    let mut w = Warms::default();
    let first = w.start(0, Protocol::Memcache, b"k", (3, 1)).unwrap();
    let idx = sent(first).2.unwrap();
    assert!(w.reply(idx, Some(b"EN\r\n")).is_none(), "a miss");
    assert!(
        w.reply(idx, Some(b"VA 1 f0 t-1\r\nx\r\n")).is_none(),
        "over"
    );
    let first = w.start(0, Protocol::Memcache, b"k", (3, 1)).unwrap();
    let idx = sent(first).2.unwrap();
    w.unsent(idx);
    assert!(
        w.reply(idx, Some(b"VA 1 f0 t-1\r\nx\r\n")).is_none(),
        "over"
    );
    // Another copy's slot is left alone.
    let other = w.start(0, Protocol::Memcache, b"j", (3, 1)).unwrap();
    let store = w.reply(sent(other).2.unwrap(), Some(b"VA 1 f0 t-1\r\nx\r\n"));
    assert_eq!(store.map(|s| sent(s).3), Some(mc_store(b"j", 0, -1, b"x")));
}
