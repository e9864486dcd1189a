//! `FleetHolds` without sockets: what may be held and until when, what a
//! pass releases or refuses, and how long the loop may wait.

use super::*;

const BOUND: Duration = Duration::from_millis(100);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Admit and hold one request of client `t` (id `t`).
fn hold(h: &mut FleetHolds, t: usize, pool: usize, why: Wait, now: Instant) -> Option<Instant> {
    let until = h.admit(pool, why, now, BOUND)?;
    h.hold((Token(t), t as u64), pool, why, now, until);
    Some(until)
}

fn all_live(_: Token, _: u64) -> bool {
    true
}

#[test]
fn the_deadline_is_the_waits_not_the_requests() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    assert_eq!(hold(&mut h, 1, 0, Wait::Barrier, t0), Some(t0 + BOUND));
    // A later request for the same barrier shares the first one's bound.
    assert_eq!(
        hold(&mut h, 2, 0, Wait::Barrier, t0 + ms(60)),
        Some(t0 + BOUND)
    );
    // Another pool's barrier is another wait.
    assert_eq!(
        hold(&mut h, 3, 1, Wait::Barrier, t0 + ms(60)),
        Some(t0 + ms(60) + BOUND)
    );
    // Once the wait's deadline passed, its requests are refused at once.
    assert_eq!(h.admit(0, Wait::Barrier, t0 + BOUND, BOUND), None);
    assert_eq!(h.admit(0, Wait::Barrier, t0 + ms(500), BOUND), None);
    // The membership's wait is its own.
    assert_eq!(
        h.admit(0, Wait::InStep, t0 + ms(500), BOUND),
        Some(t0 + ms(500) + BOUND)
    );
}

#[test]
fn a_zero_bound_refuses_at_once() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    assert_eq!(h.admit(0, Wait::InStep, t0, Duration::ZERO), None);
    assert_eq!(h.admit(0, Wait::Barrier, t0, Duration::ZERO), None);
}

#[test]
fn released_when_the_barrier_passes() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    hold(&mut h, 1, 0, Wait::Barrier, t0);
    hold(&mut h, 2, 1, Wait::Barrier, t0 + ms(1));
    hold(&mut h, 3, 0, Wait::Barrier, t0 + ms(2));
    // Nothing passed: nothing ends.
    assert!(h.due(t0 + ms(10), true, |_| true, all_live).is_empty());
    // Pool 0's barrier passes: its two requests go on, in order.
    let ended = h.due(t0 + ms(20), true, |pool| pool == 1, all_live);
    assert_eq!(
        ended,
        vec![
            Ended {
                token: Token(1),
                pool: 0,
                since: t0,
                refused: None
            },
            Ended {
                token: Token(3),
                pool: 0,
                since: t0 + ms(2),
                refused: None
            },
        ]
    );
    assert_eq!(h.held.len(), 1);
    assert_eq!(h.held[0].token, Token(2));
}

#[test]
fn refused_at_the_deadline() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    hold(&mut h, 1, 0, Wait::Barrier, t0);
    hold(&mut h, 2, 0, Wait::InStep, t0 + ms(50));
    assert!(h
        .due(t0 + BOUND - ms(1), false, |_| true, all_live)
        .is_empty());
    let ended = h.due(t0 + BOUND, false, |_| true, all_live);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].token, Token(1));
    assert_eq!(ended[0].refused, Some(FLEET_MOVING));
    let ended = h.due(t0 + ms(50) + BOUND, false, |_| true, all_live);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].refused, Some(FLEET_LAPSED));
    assert!(h.held.is_empty());
}

#[test]
fn in_step_again_releases_and_ends_the_wait() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    hold(&mut h, 1, 0, Wait::InStep, t0);
    hold(&mut h, 2, 0, Wait::Barrier, t0);
    assert!(!h.idle());
    let ended = h.due(t0 + ms(5), true, |_| true, all_live);
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].token, ended[0].refused), (Token(1), None));
    // The membership's wait is over: a new one has a new deadline.
    assert_eq!(
        h.admit(0, Wait::InStep, t0 + ms(200), BOUND),
        Some(t0 + ms(200) + BOUND)
    );
    // The barrier's request is still held, for its pool's barrier.
    assert_eq!(h.held.len(), 1);
    assert_eq!(h.held[0].why, Wait::Barrier);
}

#[test]
fn idle_once_nothing_is_held_and_the_member_is_in_step() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    assert!(h.idle());
    // Refused at once, but the wait for the member began.
    assert!(h.admit(0, Wait::InStep, t0, Duration::ZERO).is_none());
    assert!(!h.idle());
    assert!(h.due(t0, false, |_| true, all_live).is_empty());
    assert!(!h.idle());
    assert!(h.due(t0, true, |_| true, all_live).is_empty());
    assert!(h.idle());
}

#[test]
fn a_gone_client_is_dropped_silently() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    hold(&mut h, 1, 0, Wait::Barrier, t0);
    hold(&mut h, 2, 0, Wait::Barrier, t0);
    // Client 1's slot now holds another client (another id).
    let live = |t: Token, id: u64| t != Token(1) || id != 1;
    let ended = h.due(t0 + BOUND, false, |_| true, live);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].token, Token(2));
    assert!(h.held.is_empty());
}

#[test]
fn closed_refuses_everything_and_holds_nothing_more() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    hold(&mut h, 1, 0, Wait::Barrier, t0);
    hold(&mut h, 2, 0, Wait::InStep, t0);
    h.close();
    // What passed still goes on; the rest is refused.
    let ended = h.due(t0 + ms(1), false, |_| false, all_live);
    let refused: Vec<_> = ended.iter().map(|e| e.refused).collect();
    assert_eq!(refused, vec![None, Some(FLEET_LAPSED)]);
    assert!(h.held.is_empty());
    assert_eq!(h.admit(0, Wait::Barrier, t0 + ms(2), BOUND), None);
}

#[test]
fn the_loop_waits_for_the_nearest_deadline_and_polls_the_page() {
    let t0 = Instant::now();
    let mut h = FleetHolds::default();
    assert_eq!(h.wait(t0), None);
    hold(&mut h, 1, 0, Wait::Barrier, t0);
    hold(&mut h, 2, 1, Wait::Barrier, t0 + ms(30));
    assert_eq!(h.wait(t0 + ms(40)), Some(ms(60)));
    // Past the deadline: at once.
    assert_eq!(h.wait(t0 + ms(150)), Some(Duration::ZERO));
    hold(&mut h, 3, 0, Wait::InStep, t0 + ms(40));
    assert_eq!(h.wait(t0 + ms(40)), Some(PAGE_POLL));
}
