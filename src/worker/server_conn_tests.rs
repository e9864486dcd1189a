//! Tests of `Server` without a server: what its timeout timer says when
//! it fires (`timer_fired`).

use super::*;
use crate::proto::redis::{Cmd, RedisOp};
use std::time::Duration;

/// A server connection on one end of a socket pair, and the other end.
fn server(now: Instant) -> (Server, mio::net::UnixStream) {
    let (sock, peer) = mio::net::UnixStream::pair().expect("socket pair");
    (
        Server::new(Stream::Unix(sock), 7, (0, 0, 0), now, false),
        peer,
    )
}

fn ping() -> Op {
    let cmd = Cmd::lookup(b"PING").expect("PING");
    Op::Redis(RedisOp {
        cmd,
        class: cmd.class(),
    })
}

/// A request queued at `at`.
fn queue(s: &mut Server, at: Instant) {
    s.queue(
        Some(Waiter::Internal),
        ping(),
        |o| o.extend_from_slice(b"*1\r\n$4\r\nPING\r\n"),
        at,
        Default::default(),
    );
}

const T: Duration = Duration::from_millis(100);

#[test]
fn the_oldest_request_times_out_at_its_deadline() {
    let t = Instant::now();
    let (mut s, _peer) = server(t);
    assert_eq!(
        s.timer_fired(Some(T), t),
        TimerStep::Idle,
        "nothing in flight"
    );
    assert!(!s.timer_armed());
    queue(&mut s, t);
    queue(&mut s, t + T / 2);
    assert_eq!(s.timer_fired(Some(T), t + T / 4), TimerStep::Arm(t + T));
    assert!(s.timer_armed());
    assert_eq!(s.timer_fired(Some(T), t + T), TimerStep::TimedOut);
    assert!(!s.timer_armed());
    // A streamed request before them queued whole: counted from then.
    s.restart_timeouts(t + T);
    assert_eq!(s.timer_fired(Some(T), t + T), TimerStep::Arm(t + 2 * T));
}

#[test]
fn nothing_is_timed_without_a_timeout_or_for_a_blocking_command() {
    let t = Instant::now();
    let (mut s, _peer) = server(t);
    queue(&mut s, t);
    assert_eq!(s.timer_fired(None, t + 10 * T), TimerStep::Idle);
    s.set_blocking();
    assert_eq!(s.timer_fired(Some(T), t + 10 * T), TimerStep::Idle);
    assert!(!s.timer_armed());
}

#[test]
fn a_large_value_moving_is_never_cut() {
    let t = Instant::now();
    let (mut s, _peer) = server(t);
    queue(&mut s, t);
    s.set_stream(Some(SrvStream {
        client: Token(3),
        client_id: 30,
    }));
    let late = t + 10 * T;
    assert_eq!(s.timer_fired(Some(T), late), TimerStep::Arm(late + T));
    assert!(s.timer_armed());
    // Once queued whole, its timeout counts from then.
    s.end_stream(late);
    assert_eq!(s.timer_fired(Some(T), late), TimerStep::Arm(late + T));
    assert_eq!(s.timer_fired(Some(T), late + T), TimerStep::TimedOut);
}

#[test]
fn a_retired_connection_closes_now_only_when_it_owes_nothing() {
    let t = Instant::now();
    let (mut s, _peer) = server(t);
    assert!(!s.is_dedicated());
    assert!(s.retire_when_answered(), "nothing owed: closed now");
    let (mut s, _peer) = server(t);
    queue(&mut s, t);
    assert!(!s.retire_when_answered(), "a request owed: once answered");
    assert!(s.is_dedicated(), "and it takes no new request");
    let _ = s.pop_answered();
    assert!(s.is_done());
}

#[test]
fn a_writable_event_finishes_a_connect_once() {
    let (mut s, _peer) = server(Instant::now());
    assert!(s.is_connecting());
    assert_eq!(s.writable(), Writable::Connected { pool: 0, server: 0 });
    assert!(!s.is_connecting());
    assert_eq!(s.writable(), Writable::Ready, "connected already");
}
