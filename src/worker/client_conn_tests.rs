//! Tests of `Client`: holding a pipelined batch's output (`hold_output`),
//! what an idle client costs.

use super::*;

/// A client on one end of a socket pair, and the other end (for the
/// tests of `client_conn.rs`'s modules too).
pub(super) fn client_and_peer() -> (Client, mio::net::UnixStream) {
    let (sock, peer) = mio::net::UnixStream::pair().expect("socket pair");
    let c = Client::new(
        Stream::Unix(sock),
        1,
        0,
        Session::new(1, None, false),
        Instant::now(),
    );
    (c, peer)
}

fn client() -> Client {
    client_and_peer().0
}

/// A batch of `n` requests taken in one parse.
fn batch(c: &mut Client, n: usize) {
    let first = c.next_seq();
    for _ in 0..n {
        c.push_reply(ReplySlot::default());
    }
    c.batch_from(first);
}

/// The head reply arrives and is queued.
fn answer_head(c: &mut Client, bytes: &[u8]) {
    c.pop_head();
    c.wbuf.extend(bytes);
}

const BOUND: Duration = Duration::from_millis(1);

#[test]
fn output_waits_for_its_batch_within_the_bound() {
    let mut c = client();
    let t = Instant::now();
    batch(&mut c, 3);
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write, "nothing queued");
    answer_head(&mut c, b"one");
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Begin);
    assert_eq!(c.hold_output(t + BOUND / 2, BOUND, 1024), Hold::Keep);
    answer_head(&mut c, b"two");
    assert_eq!(c.hold_output(t + BOUND / 2, BOUND, 1024), Hold::Keep);
    assert_eq!(c.hold_output(t + BOUND, BOUND, 1024), Hold::Write, "bound");
    answer_head(&mut c, b"three");
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write, "batch answered");
}

#[test]
fn no_wait_for_a_lone_request_or_the_next_batch() {
    let mut c = client();
    let t = Instant::now();
    batch(&mut c, 1);
    answer_head(&mut c, b"lone");
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write);
    // Two batches in flight: the first answered whole, the second not
    // at all; what is queued is all of the first.
    let mut c = client();
    batch(&mut c, 2);
    batch(&mut c, 2);
    answer_head(&mut c, b"1a");
    answer_head(&mut c, b"1b");
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write);
    // A parse that took no request leaves the batch as it was.
    let mut c = client();
    batch(&mut c, 2);
    c.batch_from(c.next_seq());
    answer_head(&mut c, b"a");
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Begin);
}

#[test]
fn no_wait_past_the_size_or_for_what_may_never_come() {
    let t = Instant::now();
    let mut c = client();
    batch(&mut c, 2);
    answer_head(&mut c, &[b'x'; 1024]);
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write, "size");
    let mut c = client();
    batch(&mut c, 2);
    answer_head(&mut c, b"a");
    c.set_eof();
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write, "peer gone");
    let mut c = client();
    batch(&mut c, 2);
    answer_head(&mut c, b"a");
    c.block_on(Vec::new(), ServerRef::new(mio::Token(7), 7));
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write, "blocking");
    let mut c = client();
    batch(&mut c, 2);
    answer_head(&mut c, b"a");
    c.pending.front_mut().expect("slot").ready = true;
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Write, "head ready");
}

#[test]
fn a_written_output_ends_the_hold() {
    let (mut c, mut peer) = client_and_peer();
    let t = Instant::now();
    batch(&mut c, 3);
    answer_head(&mut c, b"a");
    assert_eq!(c.hold_output(t, BOUND, 1024), Hold::Begin);
    assert_eq!(c.write_output().expect("write"), 1);
    let mut got = [0u8; 4];
    assert_eq!(peer.read(&mut got).expect("read"), 1);
    answer_head(&mut c, b"b");
    // Held anew from now, not from the first hold.
    assert_eq!(c.hold_output(t + BOUND * 2, BOUND, 1024), Hold::Begin);
}

/// What an idle client costs the worker: its `Client` (boxed in the
/// worker's slab) and nothing else. Its buffers and reply queue are lent
/// back once empty, and the rarer state is boxed apart (`Rare`), so the
/// struct is the whole budget.
#[test]
fn idle_client_size() {
    use std::mem::size_of;
    eprintln!(
        "Client {} bytes, Session {} bytes",
        size_of::<Client>(),
        size_of::<Session>()
    );
    // mio's socket carries its selector's id in debug builds only (to
    // check a socket is registered with one poll): 8 bytes more there.
    let budget = if cfg!(debug_assertions) { 240 } else { 232 };
    assert!(
        size_of::<Client>() <= budget,
        "Client grew to {} bytes (budget {budget})",
        size_of::<Client>()
    );
    assert!(
        size_of::<Session>() <= 24,
        "Session: {}",
        size_of::<Session>()
    );
    let mut bufs = BufPool::default();
    let (mut c, mut peer) = client_and_peer();
    std::io::Write::write_all(&mut peer, b"GET k\r\n").unwrap();
    c.read_input(&mut bufs, 4096).unwrap();
    assert!(c.input().capacity() > 0 && c.pending.capacity() > 0);
    c.push_reply(ReplySlot::default());
    let mut rbuf = c.take_input();
    rbuf.consume(rbuf.len());
    bufs.give(rbuf);
    c.slot_mut(0).unwrap().ready = true;
    c.slot_mut(0).unwrap().out = b"$-1\r\n".to_vec();
    c.drain_ready(&mut bufs);
    while c.has_output() {
        c.write_output().unwrap();
    }
    c.return_idle_output(&mut bufs);
    assert_eq!(
        (
            c.input().capacity(),
            c.output().capacity(),
            c.pending.capacity()
        ),
        (0, 0, 0),
        "an idle client holds no buffer and no reply queue"
    );
    assert!(c.rare.is_none());
}

#[test]
fn rare_state_boxed_only_while_in_use() {
    let mut c = client();
    assert!(c.rare.is_none() && c.blocked().is_empty() && !c.is_stateful());
    c.set_txn(Some(Box::default()));
    assert!(c.is_stateful() && c.rare.is_some());
    let t = c.take_txn();
    assert!(t.is_some() && c.rare.is_none(), "emptied: the box goes");
    c.set_subs(Some(Box::default()));
    c.set_txn(None);
    assert!(
        c.subs().is_some(),
        "ending no transaction keeps the subscriptions"
    );
    c.set_subs(None);
    assert!(c.rare.is_none());
    let r = ServerRef::new(mio::Token(3), 9);
    c.wait_on_reply(r);
    assert_eq!(c.rstream_from(), Some(r));
    assert_eq!(c.drained_below(0), Some((r, false)));
    assert_eq!(c.drained_below(1), Some((r, true)));
    assert!(c.rstream_from().is_none() && c.rare.is_none());
    c.block_on(Vec::new(), r);
    assert_eq!(c.blocked(), &[r]);
    assert_eq!(c.take_blocked(), vec![r]);
    assert!(c.rare.is_none());
}

#[test]
fn a_local_reply_goes_straight_out_unless_replies_are_owed() {
    use std::borrow::Cow;
    let mut bufs = BufPool::default();
    let mut c = client();
    // Nothing owed: a fixed reply is written into the output as it is.
    assert_eq!(
        c.push_local(Cow::Borrowed(b"+PONG\r\n"), &mut bufs),
        Some(7)
    );
    assert_eq!(c.output().bytes(), b"+PONG\r\n");
    assert!(!c.has_pending());
    // A reply owed before it: it waits its turn, ready.
    c.push_reply(ReplySlot::default());
    assert_eq!(
        c.push_local(Cow::Borrowed(b"VERSION 1.6.21\r\n"), &mut bufs),
        None
    );
    // A composed reply always takes a slot.
    let mut c2 = client();
    assert_eq!(
        c2.push_local(Cow::Owned(b"+OK\r\n".to_vec()), &mut bufs),
        None
    );
    for (c, want) in [(&c, &b"VERSION 1.6.21\r\n"[..]), (&c2, &b"+OK\r\n"[..])] {
        let last = c.slots().last().unwrap();
        assert!(last.ready && !last.close_after);
        assert_eq!(last.out, want);
    }
    assert_eq!(c.output().bytes(), b"+PONG\r\n");
    assert!(c2.output().bytes().is_empty());
}

#[test]
fn a_ready_reply_may_close_the_client_after_it() {
    let mut c = client();
    c.push_ready(b"-ERR bad\r\n".to_vec(), false);
    assert!(!c.closing);
    c.push_ready(b"-ERR max number of clients reached\r\n".to_vec(), true);
    assert!(c.closing);
    let outs: Vec<_> = c
        .slots()
        .map(|s| (s.ready, s.close_after, s.out.clone()))
        .collect();
    assert_eq!(
        outs,
        vec![
            (true, false, b"-ERR bad\r\n".to_vec()),
            (
                true,
                true,
                b"-ERR max number of clients reached\r\n".to_vec()
            ),
        ]
    );
}

#[test]
fn a_closing_client_gives_up_the_connections_it_holds_alone() {
    let mut c = client();
    assert!(c.take_own_conns().is_empty());
    let r = |t: usize| ServerRef::new(mio::Token(t), t as u64 + 100);
    let mut txn = Txn::default();
    let _ = txn.pinned(r(1), 0, "WATCH");
    c.set_txn(Some(Box::new(txn)));
    let mut subs = Subs::default();
    subs.opened(0, r(2));
    subs.opened(1, r(3));
    c.set_subs(Some(Box::new(subs)));
    c.block_on(vec![r(4)], r(5));
    assert_eq!(c.take_own_conns(), vec![r(1), r(2), r(3), r(4), r(5)]);
    assert!(c.txn().is_none() && c.subs().is_none() && c.blocked().is_empty());
    assert!(c.take_own_conns().is_empty(), "once");
}

#[test]
fn a_lost_transaction_connection_ends_the_transaction_and_the_client() {
    let mut c = client();
    let r = |t: usize| ServerRef::new(mio::Token(t), t as u64 + 100);
    assert!(!c.txn_lost(r(1)), "no transaction");
    let mut txn = Txn::default();
    let _ = txn.pinned(r(1), 0, "WATCH");
    c.set_txn(Some(Box::new(txn)));
    assert!(!c.txn_lost(r(2)), "another connection");
    assert!(
        !c.txn_lost(ServerRef::new(mio::Token(1), 7)),
        "its slot, reused"
    );
    assert!(c.txn().is_some() && !c.closing);
    assert!(c.txn_lost(r(1)));
    assert!(c.txn().is_none(), "ended");
    assert!(c.closing, "closed once its replies are written");
}
