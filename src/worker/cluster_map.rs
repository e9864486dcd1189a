//! A Redis Cluster pool's slot map as one worker keeps it: the master of
//! every slot and each master's replicas, when to ask for a new map and
//! whom first, and the requests waiting out a `-TRYAGAIN`. Plain state,
//! no I/O: `cluster.rs` fills it from `CLUSTER SLOTS` replies and sends
//! what it says.

use super::handle::ClientRef;
use crate::proto::redis::cluster::SLOTS;
use crate::proto::Op;
use mio::Token;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// When a request answered with a cluster error goes again
/// (`PoolRt::redo`), or a waited-out one goes now (`Worker::redo`
/// carries either out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redo {
    /// At this time (the retry timer armed for it), routed by the map
    /// then (`PoolRt::retries_due`).
    At(Instant),
    /// Now, to server `to`, after `ASKING` if `asking`.
    Now { to: usize, asking: bool },
}

/// Least time between two `CLUSTER SLOTS` of one pool in one worker.
const REFRESH_INTERVAL: Duration = Duration::from_millis(100);
/// A map older than this is asked for again on the next request (picks up
/// replicas and nodes that joined without any slot moving).
const MAP_MAX_AGE: Duration = Duration::from_secs(10);
/// A slot no map covers.
const NONE: u16 = u16::MAX;
/// Wait before a request answered TRYAGAIN is sent again.
pub(super) const TRYAGAIN_DELAY: Duration = Duration::from_millis(20);

/// The slot map of one cluster pool in one worker.
#[derive(Debug)]
pub struct ClusterRt {
    /// Key slot → index of the master serving it (`NONE`: unknown).
    slots: Vec<u16>,
    /// Server index → its replicas' server indices.
    replicas: Vec<Vec<usize>>,
    /// Configured seed nodes (the first servers of the pool).
    seeds: usize,
    /// A new map is wanted.
    pub refresh_wanted: bool,
    /// A `CLUSTER SLOTS` is in flight.
    pub refreshing: bool,
    /// When the last one was sent.
    last_refresh: Option<Instant>,
    /// The next server to ask (rotates over every known node).
    next_ask: usize,
    /// Maps applied so far.
    pub maps: u64,
    /// Requests waiting out a TRYAGAIN.
    pub(super) retries: Vec<TryAgain>,
}

/// A request answered `-TRYAGAIN`, to be sent again at `at`.
#[derive(Debug)]
pub(super) struct TryAgain {
    pub at: Instant,
    pub token: Token,
    pub id: u64,
    pub seq: u64,
    pub frag: Option<u32>,
    pub op: Op,
}

impl ClusterRt {
    /// An empty map over `seeds` configured servers; a map is wanted at once.
    pub fn new(seeds: usize) -> ClusterRt {
        ClusterRt {
            slots: vec![NONE; SLOTS],
            replicas: Vec::new(),
            seeds: seeds.max(1),
            refresh_wanted: true,
            refreshing: false,
            last_refresh: None,
            next_ask: 0,
            maps: 0,
            retries: Vec::new(),
        }
    }

    /// The master serving `slot`, or a seed while the slot is unknown.
    pub fn master(&self, slot: u16) -> usize {
        match self.slots[usize::from(slot) % SLOTS] {
            NONE => usize::from(slot) % self.seeds,
            s => usize::from(s),
        }
    }

    /// Every master serving a slot, in server order, each once (the seed
    /// nodes while no map is known): the nodes a keyspace-wide command
    /// (DBSIZE, SCAN, KEYS, FLUSHALL, ...) asks.
    pub fn masters(&self) -> Vec<usize> {
        let mut m: Vec<usize> = self
            .slots
            .iter()
            .filter(|&&s| s != NONE)
            .map(|&s| usize::from(s))
            .collect();
        m.sort_unstable();
        m.dedup();
        if m.is_empty() {
            m = (0..self.seeds).collect();
        }
        m
    }

    /// The server a request for `slot` goes to: its master, or with
    /// `replica_read` one of the master's replicas (spread by client id).
    pub fn server_for(&self, slot: u16, replica_read: bool, client_id: u64) -> usize {
        let m = self.master(slot);
        if replica_read {
            if let Some(r) = self.replicas.get(m).filter(|r| !r.is_empty()) {
                return r[(client_id % r.len() as u64) as usize];
            }
        }
        m
    }

    /// A new map: each range of slots with its master and the master's
    /// replicas (server indices); slots no range covers go to the seeds.
    pub fn set_map(&mut self, ranges: Vec<(RangeInclusive<u16>, usize, Vec<usize>)>) {
        let mut slots = vec![NONE; SLOTS];
        let mut replicas: Vec<Vec<usize>> = Vec::new();
        for (range, m, reps) in ranges {
            let Ok(m16) = u16::try_from(m) else {
                continue;
            };
            let (a, b) = (usize::from(*range.start()), usize::from(*range.end()));
            if let Some(s) = slots.get_mut(a..=b) {
                s.fill(m16);
            }
            if replicas.len() <= m {
                replicas.resize(m + 1, Vec::new());
            }
            replicas[m] = reps;
        }
        self.slots = slots;
        self.replicas = replicas;
        self.maps += 1;
    }

    /// Whether to ask for a new map now: one is wanted (or the map is
    /// older than [`MAP_MAX_AGE`]), none is in flight and none was asked
    /// for within [`REFRESH_INTERVAL`]. `Some`: the server to ask first.
    pub fn map_due(&mut self, now: Instant) -> Option<usize> {
        if self
            .last_refresh
            .is_some_and(|t| now.duration_since(t) >= MAP_MAX_AGE)
        {
            self.refresh_wanted = true;
        }
        let recent = self
            .last_refresh
            .is_some_and(|t| now.duration_since(t) < REFRESH_INTERVAL);
        (self.refresh_wanted && !self.refreshing && !recent).then_some(self.next_ask)
    }

    /// A map was asked of `server` (`None`: no server could be asked; it
    /// stays wanted).
    pub fn map_asked(&mut self, server: Option<usize>, now: Instant) {
        if let Some(s) = server {
            self.next_ask = s + 1;
        }
        self.last_refresh = Some(now);
        self.refreshing = server.is_some();
        self.refresh_wanted = server.is_none();
    }

    /// Slot `slot` is served by `server` from now on (a `-MOVED` said so).
    pub fn set(&mut self, slot: u16, server: usize) {
        if let (Some(e), Ok(s)) = (self.slots.get_mut(usize::from(slot)), u16::try_from(server)) {
            *e = s;
        }
    }

    /// A request (or fragment `frag`) of client `client`, reply `seq`,
    /// was answered `-TRYAGAIN` at `now`: it waits [`TRYAGAIN_DELAY`].
    /// Returns when it is due (for the worker's timer).
    pub(super) fn wait_out(
        &mut self,
        client: ClientRef,
        seq: u64,
        frag: Option<u32>,
        op: Op,
        now: Instant,
    ) -> Instant {
        let at = now + TRYAGAIN_DELAY;
        self.retries.push(TryAgain {
            at,
            token: client.token,
            id: client.id,
            seq,
            frag,
            op,
        });
        at
    }

    /// The requests whose TRYAGAIN wait is over at `now`, taken off, in
    /// the order they came; the others keep waiting.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<TryAgain> {
        if !self.retries.iter().any(|r| r.at <= now) {
            return Vec::new();
        }
        let (due, keep) = std::mem::take(&mut self.retries)
            .into_iter()
            .partition(|r| r.at <= now);
        self.retries = keep;
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_slots_go_to_seeds_known_ones_to_their_master() {
        let mut c = ClusterRt::new(3);
        assert_eq!(c.master(0), 0);
        assert_eq!(c.master(4), 1);
        assert_eq!(c.master(16383), 16383 % 3);
        c.set(4, 7);
        assert_eq!(c.master(4), 7);
        assert_eq!(c.server_for(4, true, 1), 7);
        c.replicas = vec![Vec::new(); 8];
        c.replicas[7] = vec![8, 9];
        assert_eq!(c.server_for(4, false, 1), 7);
        assert_eq!(c.server_for(4, true, 1), 9);
        assert_eq!(c.server_for(4, true, 2), 8);
    }

    #[test]
    fn a_map_sets_masters_and_replicas_by_range() {
        let mut c = ClusterRt::new(2);
        c.set_map(vec![(0..=99, 3, vec![4]), (100..=16383, 5, vec![])]);
        assert_eq!((c.master(0), c.master(99), c.master(100)), (3, 3, 5));
        assert_eq!(c.server_for(50, true, 0), 4);
        assert_eq!(c.server_for(500, true, 0), 5, "no replica: the master");
        assert_eq!(c.masters(), vec![3, 5]);
        assert_eq!(c.maps, 1);
        // A later map replaces it whole: slots it leaves out go to the seeds.
        c.set_map(vec![(0..=99, 5, vec![])]);
        assert_eq!((c.master(0), c.master(100)), (5, 0));
    }

    #[test]
    fn a_new_map_is_asked_for_once_at_a_time_and_not_too_often() {
        let mut c = ClusterRt::new(2);
        let t0 = Instant::now();
        assert_eq!(c.map_due(t0), Some(0), "wanted from the start");
        c.map_asked(Some(0), t0);
        assert_eq!(c.map_due(t0 + MAP_MAX_AGE / 2), None, "one in flight");
        c.refreshing = false; // answered
        assert_eq!(c.map_due(t0 + REFRESH_INTERVAL), None, "not wanted");
        c.refresh_wanted = true; // a MOVED, a node failed
        assert_eq!(c.map_due(t0 + REFRESH_INTERVAL / 2), None, "too soon");
        assert_eq!(
            c.map_due(t0 + REFRESH_INTERVAL),
            Some(1),
            "the next server first"
        );
        c.map_asked(None, t0 + REFRESH_INTERVAL);
        assert!(
            c.refresh_wanted && !c.refreshing,
            "nobody could be asked: still wanted"
        );
        c.map_asked(Some(1), t0 + REFRESH_INTERVAL * 2);
        c.refreshing = false;
        assert_eq!(
            c.map_due(t0 + REFRESH_INTERVAL * 2 + MAP_MAX_AGE),
            Some(2),
            "an old map"
        );
    }

    #[test]
    fn a_tryagain_waits_its_delay_and_leaves_in_order() {
        let mut c = ClusterRt::new(1);
        let t0 = Instant::now();
        let op = crate::proto::redis::cluster::internal_op().expect("an op");
        let at = c.wait_out(ClientRef::new(Token(3), 30), 7, None, op, t0);
        assert_eq!(at, t0 + TRYAGAIN_DELAY);
        let later = t0 + TRYAGAIN_DELAY / 2;
        c.wait_out(ClientRef::new(Token(4), 40), 8, Some(2), op, later);
        c.wait_out(ClientRef::new(Token(5), 50), 9, None, op, t0);
        assert!(c.take_due(t0).is_empty(), "nothing due yet");
        let due = c.take_due(at);
        let who: Vec<(Token, u64, u64, Option<u32>)> =
            due.iter().map(|r| (r.token, r.id, r.seq, r.frag)).collect();
        assert_eq!(who, vec![(Token(3), 30, 7, None), (Token(5), 50, 9, None)]);
        assert_eq!(c.retries.len(), 1, "the later one keeps waiting");
        assert!(c.take_due(at).is_empty(), "taken once");
        let due = c.take_due(later + TRYAGAIN_DELAY);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].token, due[0].frag), (Token(4), Some(2)));
        assert!(c.retries.is_empty());
    }
}
