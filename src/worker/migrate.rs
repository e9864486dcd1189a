//! Serving a pool whose servers changed under a reload (`migration: on`)
//! while its keys move (the background migrator, `src/migrate/`, moves
//! them all; this is what a worker does for the keys clients ask for
//! meanwhile).
//!
//! A request whose key's owner changed — the previous configuration's
//! placement puts it on another server than the new one — is held back
//! (its client is not parsed further, so its requests keep their order)
//! while the key is pulled over: read from the old owner with its TTL
//! (Redis `DUMP` + `PTTL`, memcached `mg <key> v f t`), written to the new
//! owner only if absent there (`RESTORE` without `REPLACE`, `ms ... ME`:
//! a newer value written since wins), and deleted from the old owner, so
//! no older value can come back later. Then the request goes to the new
//! owner as usual (a write only once the old copies' deletes are
//! answered): reads find the value, writes and deletes act on it,
//! whatever its type. Keys that did not move, and everything once the
//! migration is done, take the ordinary path untouched.
//!
//! A Redis `GET` of a moved key is not pulled but read where the key is
//! (`PoolRt::moving`, a `Moving::Read`): the migrator moves it, and the
//! read costs a `GET` or two rather than a pull's five commands on two
//! servers. A memcached `get` of a key the migrator says it moved is read
//! on the new owner, and pulled only if it misses there (`pull_missed`).
//!
//! A pull's steps (what each reply leads to) are decided by `Pulls`
//! (`pull.rs`), without sockets; the worker here queues the commands it
//! asks for and lets the request go when it says so (`run_held`).
//!
//! A pull does not ask an old owner to send the key itself (`MIGRATE`):
//! `MIGRATE` blocks its source until the target answers, and pulls in
//! opposite directions between two servers (a weight change moves keys
//! both ways) would block both until its timeout. The migrator, one old
//! server at a time, uses it.
//!
//! An old owner that cannot be reached loses its keys (as in twemproxy);
//! the request then goes on to the new owner.

use super::conn::{Client, ConnTable, ReadBytes, ReplySlot, ReplyTo, Retry, Servers, Waiter};
use super::conn_state::Gate;
use super::fleet_hold::FleetStep;
use super::key_groups::Resend;
use super::migration_rt::ReadOrder;
use super::pool::PoolRt;
use super::pull::{follows_copies, AfterPull, Hold, Pull, Pulls, Step};
use super::send_plan::CopyPlan;
use super::Worker;
use crate::proto::{Op, Protocol, Request, Route};
use crate::stats::WorkerField;
use mio::Token;
use std::time::Instant;

/// Where a request of a migrating pool stands, as far as one placement
/// of its key can tell.
enum Placed {
    /// It names one key only, which every earlier placement put where it
    /// is now (most requests), on `server`.
    Stays { server: usize },
    /// It names one key only, on one owner now (`new`), which an earlier
    /// placement put elsewhere.
    Moved { new: usize },
    /// Anything else (several keys, replicas, no owner): its keys are
    /// looked at one by one (`moved_pulls`).
    Other,
}

/// One moved key of a request: where it may still be (`olds`, newest
/// placement first) and its one owner now.
#[derive(Debug, Clone, Copy)]
struct MovedKey<'a> {
    key: &'a [u8],
    olds: &'a [usize],
    new: usize,
}

/// A read of a moved key asked where the key is (`PoolRt::moved_read`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MovedRead {
    /// The servers asked in turn, the next one after a miss.
    servers: Servers,
    /// The migrator's map did not know where the key is: the server that
    /// has it tells later reads of its old owner's keys where to ask first
    /// (`Retry::learns`).
    learns: bool,
    /// memcached: a miss on the new owner pulls the key (`pull_missed`).
    pull_on_miss: bool,
    /// The request's plan: what rides along with it (its prefix route
    /// counted, its shadow copy).
    plan: crate::route::Plan,
}

/// What a request of a migrating pool comes to (`PoolRt::moving`).
#[derive(Debug)]
pub(super) enum Moving {
    /// It goes its usual way (see [`Hold::Go`]).
    Go { owner: Option<u32> },
    /// A read of a moved key, asked where the key is.
    Read(MovedRead),
    /// Its moved keys, each pulled over before it goes.
    Pull(Vec<Pull>),
}

impl MovedRead {
    /// The slot its client keeps for the read of `req` (`bytes`): a
    /// `Retry` that asks the next server after a miss.
    fn slot(self, req: &Request, bytes: &[u8]) -> ReplySlot {
        ReplySlot {
            retry: Some(Box::new(Retry {
                req: req.clone(),
                bytes: ReadBytes::from_slice(bytes),
                replicas: self.servers,
                next: 1,
                on_miss: true,
                learns: self.learns,
                pull_on_miss: self.pull_on_miss,
            })),
            ..ReplySlot::default()
        }
    }
}

impl PoolRt {
    /// What a request of a migrating pool comes to: a request whose keys
    /// did not move goes (with its one key's server, when placing it found
    /// it); a read of one moved key (`reads`: one to route, not one a
    /// transaction or a read after a miss holds) is asked where the key is
    /// when `moved_read` says so; any other with moved keys pulls them.
    pub(super) fn moving(
        &mut self,
        req: &Request,
        bytes: &[u8],
        reads: bool,
        now: Instant,
    ) -> Moving {
        let pulls = match self.placed(req, bytes, now) {
            Placed::Stays { server } => {
                let owner = u32::try_from(server).ok();
                return Moving::Go { owner };
            }
            // Its one key, placed on every ring already, with where it may
            // still be (what `moved_pulls` would find, without placing it
            // again): a read asks there, anything else pulls it.
            Placed::Moved { new } => {
                let key = req.routing_key(bytes);
                let Some(m) = self.migration.as_mut() else {
                    return Moving::Go { owner: None };
                };
                let olds = m.take_found();
                let moved = MovedKey {
                    key: &key,
                    olds: &olds,
                    new,
                };
                let read = reads.then(|| self.moved_read(req, moved)).flatten();
                let pull = read
                    .is_none()
                    .then(|| Pull::new(key.into_owned(), olds.clone(), vec![new]));
                if let Some(m) = self.migration.as_mut() {
                    m.give_back_found(olds);
                }
                match (read, pull) {
                    (Some(read), _) => return Moving::Read(read),
                    (None, pull) => pull.into_iter().collect(),
                }
            }
            Placed::Other => {
                let pulls = self.moved_pulls(req, bytes, now);
                if let ([pull], true) = (&pulls[..], reads) {
                    if let [new] = pull.news()[..] {
                        let moved = MovedKey {
                            key: pull.key(),
                            olds: pull.olds(),
                            new,
                        };
                        if let Some(read) = self.moved_read(req, moved) {
                            return Moving::Read(read);
                        }
                    }
                }
                pulls
            }
        };
        if pulls.is_empty() {
            return Moving::Go { owner: None };
        }
        Moving::Pull(pulls)
    }

    /// Where a request stands (see [`Placed`]): told apart from the rest
    /// without allocating, its key placed once on each ring.
    fn placed(&mut self, req: &Request, bytes: &[u8], now: Instant) -> Placed {
        let one = match req.op {
            Op::Redis(op) => req.keys.len() == 1 && !crate::proto::redis::names_more_keys(op.cmd),
            Op::Mc(_) => true,
        };
        if req.route != Route::Single || !one || self.cfg.replicas > 1 {
            return Placed::Other;
        }
        let key = req.routing_key(bytes);
        let (Some(new), hash) = self.server_and_hash(&key, now) else {
            return Placed::Other;
        };
        match self
            .migration
            .as_mut()
            .map(|m| m.moved_single(&key, hash, new))
        {
            Some(true) => Placed::Moved { new },
            Some(false) => Placed::Stays { server: new },
            None => Placed::Other,
        }
    }

    /// Whether a read of moved key `moved` is asked where the key is
    /// rather than pulled (see `Worker::hold_for_moved_keys`), and of which
    /// servers in turn. `None`: it is pulled (not a single read of one
    /// value on a plain connection, a route that places it otherwise, or
    /// memcached with a key the migrator's map does not know moved).
    fn moved_read(&self, req: &Request, moved: MovedKey) -> Option<MovedRead> {
        let MovedKey { key, olds, new } = moved;
        // memcached reads the key on its new owner only (below): a `gets`
        // too, its cas unique the new owner's.
        let memcache = self.proto == Protocol::Memcache;
        let reads = if memcache {
            req.reads_one_value_of_its_owner()
        } else {
            req.reads_one_value()
        };
        if req.route != Route::Single || !reads || self.proto.conn_class(req.op) != 0 {
            return None;
        }
        let plan = self.route.plan(req);
        if plan.target != crate::route::Target::Key
            || plan.replica_first
            || self.route.is_zoned()
            || self.route.is_cluster()
        {
            return None;
        }
        let m = self.migration.as_ref()?;
        // The migrator's map says where the key is, else where reads
        // found keys of its old owner lately.
        let known = m.known_moved(key);
        // memcached: only a key the map says moved, read on its new owner
        // alone, a miss there pulling it (`pull_missed`). A key read on
        // an old owner must be pulled: the migrator must find every key a
        // read leaves behind, and where Redis's `SCAN` returns every key
        // that stays on a server through the scan, memcached's
        // `lru_crawler metadump` misses items moved between LRU lists
        // while it crawls, which are the ones clients read.
        if memcache && !known {
            return None;
        }
        let servers = if memcache {
            std::iter::once(new).collect()
        } else if known {
            ReadOrder::new_first_order(olds, new)
        } else {
            m.read_order(olds[0]).servers(olds, new)
        };
        Some(MovedRead {
            servers,
            learns: !known,
            pull_on_miss: memcache,
            plan,
        })
    }

    /// The pulls a request of a migrating pool needs: one per key it
    /// names that an earlier placement put elsewhere (none when it is not
    /// migrating).
    pub(super) fn moved_pulls(&mut self, req: &Request, bytes: &[u8], now: Instant) -> Vec<Pull> {
        let keys: Vec<std::borrow::Cow<[u8]>> = match (req.op, &req.route) {
            // Every key the command names, not only the one it is routed
            // by: each moved one must be on its new owner before the
            // command runs there, or what the command writes to it would
            // be overwritten by, or shadow, the old copy pulled later.
            (Op::Redis(op), Route::Single | Route::Multi) => {
                crate::proto::redis::command_keys(op.cmd, req, bytes)
                    .into_iter()
                    .map(std::borrow::Cow::Owned)
                    .collect()
            }
            // The key placement uses (a meta request's `b` key decoded).
            (_, Route::Single) => vec![req.routing_key(bytes)],
            (_, Route::Multi) => req
                .keys
                .iter()
                .map(|r| std::borrow::Cow::Borrowed(&bytes[r.clone()]))
                .collect(),
            _ => return Vec::new(),
        };
        let mut pulls = Vec::new();
        for key in &keys {
            let key = key.as_ref();
            let Some(new) = self.server_for(key, now) else {
                continue;
            };
            let r = self.cfg.replicas.max(1) as usize;
            let mut news = vec![new];
            if r > 1 {
                self.placement.replicas_for(key, r, &mut news);
            }
            let Some(m) = self.migration.as_ref() else {
                return Vec::new();
            };
            let olds = m.old_owners(key, &news);
            if !olds.is_empty() && !pulls.iter().any(|p: &Pull| p.key() == key) {
                pulls.push(Pull::new(key.to_vec(), olds, news));
            }
        }
        pulls
    }
}

const GO: Hold = Hold::Go { owner: None };

impl Worker<'_> {
    /// A request of a migrating pool: if any of its keys changed owner,
    /// hold it and pull those keys over first, or read its moved key
    /// where it is, as the pool says (`PoolRt::moving`).
    ///
    /// A read of one moved key's value (`Request::reads_one_value`) is not
    /// pulled: it is asked of the servers the key may be on, in turn,
    /// until one has it (`ReadOrder::servers`, a `Retry` that goes on after
    /// a miss), and the key is left where it is for the migrator. A read
    /// then costs what it costs without a migration, plus a second read
    /// when the first server asked no longer (or not yet) has the key,
    /// against four more commands on two servers for a pull.
    ///
    /// What any of them has is the key's value, because an old owner and
    /// the new one never hold different values of a key: the new owner
    /// gets one only by a copy (never over a value it has), or by a write,
    /// and a write of a moved key runs only once its pull has deleted the
    /// old copies (`Pulls`, `pull.rs`). And a key leaves an old owner only once
    /// the new one has it, so a read that finds it on none of the old
    /// owners finds it on the new one, asked last.
    ///
    /// The client's next requests wait for the answer, as for a pull, so
    /// a write it sent after the read cannot run before the read.
    ///
    /// memcached: only a key the migrator's map says moved, and only on
    /// its new owner (a miss there pulls it, `pull_missed`): no key is
    /// left on an old owner by a read (see `PoolRt::moved_read`).
    pub(super) fn hold_for_moved_keys(
        &mut self,
        token: Token,
        req: &Request,
        bytes: &[u8],
        then: AfterPull,
        now: Instant,
    ) -> Hold {
        let Some(c) = self.conns.client(token.0) else {
            return GO;
        };
        let (pool, id) = (c.pool(), c.id());
        let reads = then == AfterPull::Route;
        let pulls = match self.pools[pool].moving(req, bytes, reads, now) {
            Moving::Go { owner } => return Hold::Go { owner },
            Moving::Pull(pulls) => pulls,
            Moving::Read(read) => {
                let (first, plan) = (read.servers[0], read.plan);
                let seq = self.conns.push_slot(token, false, read.slot(req, bytes));
                self.stats
                    .worker_add(crate::stats::WorkerField::MovedReads, 1);
                // What routing a request does besides sending it
                // (`dispatch_routed`): its key noted for the hot keys, its
                // prefix route counted, its copy to a shadow pool.
                self.recorder.note_key(pool, &req.routing_key(bytes));
                if plan.count_routes {
                    self.pools[pool].count_routes(pool, req, bytes, &self.stats);
                }
                if let Some(shadow) = plan.shadow {
                    let copy = self.shadows.copy(shadow, &mut self.pools, req, bytes, now);
                    self.send_copy(copy, Some((req, bytes)), now);
                }
                if let Some(c) = self.conns.client_mut(token.0) {
                    c.hold_for_read();
                }
                let proto = self.pools[pool].proto;
                self.send_or_fail(
                    ReplyTo::new(token, id, seq, None),
                    pool,
                    self.pools[pool].wire(first, id, self.conns.resp3(token), req.op),
                    |out| proto.write_request(req, bytes, out),
                    req.op,
                    now,
                );
                return Hold::Held;
            }
        };
        let n = pulls.len();
        self.stats
            .worker_add(crate::stats::WorkerField::Pulled, n as u64);
        // On their new owner once pulled: later reads, this worker's or
        // another's, ask there first (one that comes before the copy
        // still finds the key, asking the old owners next).
        if let Some(m) = &self.pools[pool].migration {
            pulls.iter().for_each(|p| m.mark_moved(p.key()));
        }
        let p = &self.pools[pool];
        let follows = follows_copies(req, then, p.proto, &p.route);
        let pulls = Pulls::new(pulls, p.proto, follows);
        if let Some(c) = self.conns.client_mut(token.0) {
            c.set_gate(Box::new(Gate::pulling(req, bytes, pulls, then)));
        }
        for idx in 0..n {
            let Some(g) = self.conns.client_mut(token.0).and_then(|c| c.gate_mut()) else {
                continue;
            };
            let step = g.pulls.start(idx);
            self.run_held(token, step, now);
        }
        Hold::Held
    }

    /// Carry out what a held request's pulls said (`Pulls::start`, a
    /// reply's `Client::pull_reply`), and what that leads to (a command
    /// that cannot be queued moves the pull on at once): each command on
    /// each server it names, on the client's connection slot for that
    /// server, a server's commands after one that is not queued left out,
    /// and on how many servers all went told back; or what the fleet
    /// said of a held request (`FleetHolds::ended`). A request released
    /// goes on as the step says, and its client is read again.
    pub(super) fn run_held(&mut self, token: Token, mut step: Step, now: Instant) {
        let Some(c) = self.conns.client(token.0) else {
            return;
        };
        let (pool, id) = (c.pool(), c.id());
        // What goes on, and whether it was released (its client then
        // read again).
        let (req, bytes, then, released) = loop {
            match step {
                Step::Wait => return,
                Step::Send(sends) => {
                    let (mut ok, proto, idx) = (0, self.pools[pool].proto, sends.idx as u32);
                    for &server in &sends.to {
                        let all = sends.cmds.iter().all(|&(part, ref bytes)| {
                            let waiter = Waiter::Pull {
                                token,
                                id,
                                idx,
                                part,
                            };
                            let client = Some((token, id));
                            let own =
                                CopyPlan::own(proto, pool, server, client, waiter, bytes.to_vec());
                            self.send_copy(own, None, now)
                        });
                        ok += all as usize;
                    }
                    let Some(g) = self.conns.client_mut(token.0).and_then(|c| c.gate_mut()) else {
                        return;
                    };
                    step = g.pulls.sent(&sends, ok);
                }
                Step::Behind => {
                    let Some(g) = self.conns.client(token.0).and_then(|c| c.gate()) else {
                        return;
                    };
                    break (g.req.clone(), g.bytes.clone(), g.then, false);
                }
                Step::Release { .. } | Step::Unheld { .. } => {
                    let Some(gate) = self.conns.client_mut(token.0).and_then(|c| c.take_gate())
                    else {
                        return;
                    };
                    let Gate {
                        req, bytes, then, ..
                    } = *gate;
                    let goes = match step {
                        Step::Release { sent } => !sent,
                        Step::Unheld {
                            pool,
                            since,
                            refused,
                        } => {
                            let waited = now.saturating_duration_since(since).as_micros() as u64;
                            self.stats.worker_add(WorkerField::FleetHeldUs, waited);
                            if let Some(error) = refused {
                                self.stats.worker_add(WorkerField::FleetRefused, 1);
                                let out = self.pools[pool].fleet_refusal(&req, error);
                                self.conns.push_ready(token, out, false);
                                false
                            } else {
                                self.fleet_gate(token, pool, &req, &bytes, then, now)
                                    == FleetStep::Go
                                    && !(self.pools[pool].route.is_migrating()
                                        && self.hold_for_moved_keys(token, &req, &bytes, then, now)
                                            == Hold::Held)
                            }
                        }
                        _ => false,
                    };
                    if goes {
                        break (req, bytes, then, true);
                    }
                    // Parse what the client sent meanwhile (nothing while
                    // it is held again).
                    self.resume.push(token);
                    return;
                }
            }
        };
        // A request that waited (for its keys' pulls, or for the fleet)
        // goes where it was going: routed, or into its client's
        // transaction, or its read asked again.
        match then {
            AfterPull::Route => self.dispatch_routed(token, req, &bytes, None, now),
            AfterPull::Txn => {
                if let Some(d) =
                    super::txn::pulled(&mut self.conns, &mut self.pools, token, &req, &bytes, now)
                {
                    self.send_dedicated(token, d, now)
                }
            }
            AfterPull::Read { seq } => {
                self.send_again(token, id, seq, pool, Resend::Failed(None));
            }
        }
        if released {
            self.resume.push(token);
        }
    }

    /// A memcached read of a moved key missed on its new owner: its key
    /// pulled and the read asked again behind the copy, if its client
    /// says so (`Client::pull_after_miss`); true when it is.
    pub(super) fn pull_missed(&mut self, token: Token, seq: u64, now: Instant) -> bool {
        let c = self.conns.client_mut(token.0);
        let Some((req, bytes)) = c.and_then(|c| c.pull_after_miss(seq)) else {
            return false;
        };
        let then = AfterPull::Read { seq };
        self.hold_for_moved_keys(token, &req, &bytes, then, now) == Hold::Held
    }
}

/// A read of a moved key, as its client keeps it.
impl Client {
    /// A memcached read of a key the migrator's map says moved missed on
    /// the new owner, the one server asked (`Retry::pull_on_miss`): the
    /// map guessed wrong (keys share its bits) or the key is gone from
    /// there. The request whose key is then pulled as any moved key, the
    /// read asked of the new owner again behind its copy, its answer
    /// going into the same slot `seq` (`AfterPull::Read`). `None`: the
    /// slot is not such a read, or it pulled once already: the miss is
    /// the answer.
    pub(super) fn pull_after_miss(&mut self, seq: u64) -> Option<(Request, Vec<u8>)> {
        let r = self.slot_mut(seq)?.retry.as_mut()?;
        r.pull_after_miss()
            .then(|| (r.req.clone(), r.bytes.to_vec()))
    }
}

impl Retry {
    /// A read that pulls its key after a miss on the new owner
    /// (`pull_on_miss`, memcached) missed there: true, once, when the key
    /// is to be pulled, the new owner then asked again behind the copy
    /// (the server `send_again` sends to next). False: the miss is the
    /// answer.
    fn pull_after_miss(&mut self) -> bool {
        if !self.pull_on_miss {
            return false;
        }
        self.pull_on_miss = false;
        let Some(&new) = self.replicas.last() else {
            return false;
        };
        self.replicas.push(new);
        true
    }
}

#[cfg(test)]
#[path = "migrate_tests.rs"]
mod tests;
