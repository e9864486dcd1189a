//! `FleetHolds` without sockets: what may be held and until when, what a
//! pass releases or refuses, and how long the loop may wait; and what a
//! request waits for, on a pool built from configuration text.

use super::*;
use crate::worker::pull::{AfterPull, At, Hold};

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

/// Pool `p` over `servers` (`migration` as given), migrating from the
/// first two when it is.
fn fleet_pool(migration: bool) -> PoolRt {
    let cfg = |servers: &[u16]| {
        let mut text = format!(
            "p:\n  listen: 127.0.0.1:39999\n  redis: true\n  migration: {migration}\n  servers:\n"
        );
        for port in servers {
            text.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
        }
        crate::config::Config::from_str(&text, std::path::Path::new("t.yml"))
            .expect("config parses")
            .pools
            .remove(0)
    };
    let olds = if migration {
        vec![cfg(&[30001, 30002])]
    } else {
        Vec::new()
    };
    PoolRt::new(&cfg(&[30001, 30002, 30003]), &olds)
}

/// `GET key`, parsed, and its bytes.
fn get(key: &str) -> (Request, Vec<u8>) {
    let bytes = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).into_bytes();
    match crate::proto::Protocol::Redis.parse_request(&bytes, &crate::proto::Limits::default()) {
        Ok(crate::proto::Parse::Done(r)) => (r, bytes),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_request_waits_for_the_member_in_step_and_a_moved_key_for_the_barrier() {
    let now = Instant::now();
    let mut p = fleet_pool(true);
    let keys: Vec<String> = (0..200).map(|k| format!("key:{k}")).collect();
    let moved = |p: &mut PoolRt, k: &str| {
        let (req, bytes) = get(k);
        !p.moved_pulls(&req, &bytes, now).is_empty()
    };
    let gone = keys
        .iter()
        .find(|k| moved(&mut p, k))
        .expect("a key that moved");
    let stays = keys
        .iter()
        .find(|k| !moved(&mut p, k))
        .expect("a key that stayed");
    let (gone, stays) = (get(gone), get(stays));
    let yes = || true;
    // Not in step: every request waits, moved key or not.
    assert_eq!(
        p.fleet_wait(|| false, &stays.0, &stays.1, now),
        Some(Wait::InStep)
    );
    // In step, the barrier passed: nothing to wait for.
    assert!(!p.fenced());
    assert_eq!(p.fleet_wait(yes, &gone.0, &gone.1, now), None);
    // Before the barrier's go: a moved key waits, one that stayed goes.
    p.fleet_fenced = true;
    assert!(p.fenced());
    assert_eq!(
        p.fleet_wait(yes, &gone.0, &gone.1, now),
        Some(Wait::Barrier)
    );
    assert_eq!(p.fleet_wait(yes, &stays.0, &stays.1, now), None);
    // The migration over: fenced no more.
    p.migration = None;
    assert!(!p.fenced());
    assert_eq!(p.fleet_wait(yes, &gone.0, &gone.1, now), None);
}

#[test]
fn a_pool_without_migration_never_waits_nor_asks_the_page() {
    let mut p = fleet_pool(false);
    let (req, bytes) = get("k");
    let asked = std::cell::Cell::new(false);
    let in_step = || {
        asked.set(true);
        false
    };
    assert_eq!(p.fleet_wait(in_step, &req, &bytes, Instant::now()), None);
    assert!(!asked.get(), "the page is not read for it");
}

#[test]
fn the_gate_holds_a_request_until_its_waits_deadline_or_refuses_it() {
    let t0 = Instant::now();
    let mut p = fleet_pool(true);
    let mut h = FleetHolds::default();
    let (req, bytes) = get("k");
    let bound = || BOUND;
    // Not in step: held, the wait's bound from its first request.
    assert_eq!(
        h.gate((&mut p, 0), || false, bound, &req, &bytes, t0),
        Admit::Hold {
            why: Wait::InStep,
            until: t0 + BOUND
        }
    );
    // In step: it goes.
    assert_eq!(
        h.gate((&mut p, 0), || true, bound, &req, &bytes, t0),
        Admit::Go
    );
    // Past the wait's deadline: refused with the error it waited for.
    assert_eq!(
        h.gate((&mut p, 0), || false, bound, &req, &bytes, t0 + BOUND),
        Admit::Refuse(FLEET_LAPSED)
    );
    // The worker stops: refused at once.
    let mut closed = FleetHolds::default();
    closed.close();
    assert_eq!(
        closed.gate((&mut p, 0), || false, bound, &req, &bytes, t0),
        Admit::Refuse(FLEET_LAPSED)
    );
}

#[test]
fn the_gate_asks_neither_the_page_nor_the_bound_for_a_pool_without_migration() {
    let mut p = fleet_pool(false);
    let mut h = FleetHolds::default();
    let (req, bytes) = get("k");
    let asked = std::cell::Cell::new(false);
    let in_step = || {
        asked.set(true);
        false
    };
    let bound = || {
        asked.set(true);
        BOUND
    };
    let now = Instant::now();
    assert_eq!(
        h.gate((&mut p, 0), in_step, bound, &req, &bytes, now),
        Admit::Go
    );
    assert!(!asked.get());
}

#[test]
fn a_refusal_is_the_pools_error_reply() {
    let p = fleet_pool(true);
    let (req, _) = get("k");
    let out = p.fleet_refusal(&req, FLEET_MOVING);
    assert_eq!(out, format!("-ERR {FLEET_MOVING}\r\n").into_bytes());
}

/// A client (id `id`) holding `GET k` for the fleet, in `conns`.
fn held_client(conns: &mut Slab<Conn>, id: u64) -> Token {
    let (sock, _peer) = mio::net::UnixStream::pair().expect("socket pair");
    let session = crate::proto::redis::local::Session::new(1, None, false);
    let stream = crate::net::Stream::Unix(sock);
    let mut c = super::super::conn::Client::new(stream, id, 0, session, Instant::now());
    let (req, bytes) = get("k");
    c.set_gate(Box::new(Gate::held(&req, &bytes, AfterPull::Route)));
    Token(conns.insert(Conn::Client(Box::new(c))))
}

#[test]
fn an_ended_hold_is_its_clients_step_and_a_stale_client_has_none() {
    let t0 = Instant::now();
    let pools = [fleet_pool(true)];
    let mut conns = Slab::new();
    let (a, b) = (held_client(&mut conns, 10), held_client(&mut conns, 11));
    let mut h = FleetHolds::default();
    assert!(h.ended(None, &pools, &conns, t0).is_empty(), "nothing held");
    let until = h.admit(0, Wait::Barrier, t0, BOUND).expect("held");
    h.hold((a, 10), 0, Wait::Barrier, t0, until);
    h.hold((b, 99), 0, Wait::Barrier, t0, until);
    let until = h.admit(0, Wait::InStep, t0, BOUND).expect("held");
    h.hold((b, 11), 0, Wait::InStep, t0, until);
    // The pool is not fenced: a's barrier passed; b's stale entry (another
    // id) is dropped; b waits for the member in step (no page: not).
    let go = Step::Unheld {
        pool: 0,
        since: t0,
        refused: None,
    };
    assert_eq!(h.ended(None, &pools, &conns, t0 + ms(1)), vec![(a, go)]);
    let refused = Step::Unheld {
        pool: 0,
        since: t0,
        refused: Some(FLEET_LAPSED),
    };
    assert_eq!(
        h.ended(None, &pools, &conns, t0 + BOUND),
        vec![(b, refused)]
    );
    assert!(h.held.is_empty());
}

#[test]
fn the_gates_say_is_carried_out_on_its_client_held_or_refused() {
    let t0 = Instant::now();
    let names = crate::stats::carry::Names {
        pools: vec!["p".into()],
        servers: vec![vec!["a".into()]],
        routes: vec![Vec::new()],
    };
    let region = crate::stats::shm::Region::new(names.layout(), 1).expect("stats region");
    let stats = region.slot(0);
    let pools = [fleet_pool(true)];
    let mut conns = Slab::new();
    let token = held_client(&mut conns, 10);
    fn client(conns: &mut Slab<Conn>, token: Token) -> &mut super::super::conn::Client {
        conns.client_mut(token.0).expect("client")
    }
    client(&mut conns, token).take_gate();
    let (req, bytes) = get("k");
    let at = At::new(&req, &bytes, AfterPull::Route);
    let mut h = FleetHolds::default();
    // Held: its client's gate set (no pulls), the hold noted.
    let hold = Admit::Hold {
        why: Wait::Barrier,
        until: t0 + BOUND,
    };
    let on = (&mut conns, &stats, &pools[..]);
    assert_eq!(h.carry_out((hold, at, token), on, t0), Hold::Held);
    let gate = client(&mut conns, token).take_gate().expect("held");
    assert!(gate.pulls.is_empty() && gate.bytes == bytes);
    assert_eq!(h.held.len(), 1);
    // Refused: its error queued as its reply, nothing held.
    assert!(!client(&mut conns, token).has_pending());
    let on = (&mut conns, &stats, &pools[..]);
    let refuse = Admit::Refuse(FLEET_MOVING);
    assert_eq!(h.carry_out((refuse, at, token), on, t0), Hold::Refused);
    assert!(client(&mut conns, token).has_pending() && client(&mut conns, token).gate().is_none());
    assert_eq!(h.held.len(), 1);
}
