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
//! on the new owner, and pulled only if it misses there
//! (`Client::pull_after_miss`).
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
use super::fleet_hold::{Admit, FleetHolds};
use super::key_groups::Resend;
use super::migration_rt::ReadOrder;
use super::pool::PoolRt;
use super::pull::{follows_copies, AfterPull, At, Hold, Pull, Pulls, Sends, Step};
use super::send_plan::{CopyPlan, SendPlan, Write};
use super::txn;
use super::Worker;
use crate::fleet::page::FleetPage;
use crate::proto::{Op, Protocol, Request, Route};
use crate::stats::WorkerField;
use mio::Token;
use std::time::{Duration, Instant};

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
    /// memcached: a miss on the new owner pulls the key
    /// (`Client::pull_after_miss`).
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
    /// The read of `req` (`bytes`) as it goes out: to the first server
    /// asked, into its slot (`slot`); and the request's plan, for what
    /// rides along with it.
    fn send_plan(self, req: &Request, bytes: &[u8]) -> (SendPlan, crate::route::Plan) {
        let (first, plan) = (self.servers[0], self.plan);
        let slot = self.slot(req, bytes);
        (SendPlan::whole(slot, first, Write::Request), plan)
    }

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
    /// rather than pulled, and of which servers in turn.
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
    /// `None`: it is pulled (not a single read of one value on a plain
    /// connection, a route that places it otherwise, or memcached with a
    /// key the migrator's map does not know moved).
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
        // alone, a miss there pulling it (`Client::pull_after_miss`). A key read on
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

/// What a request at the gates comes to (`PoolRt::gated`), carried out
/// by `Worker::gate`.
#[derive(Debug)]
pub(super) enum Gated {
    /// It goes its usual way (see [`Hold::Go`]).
    Go { owner: Option<u32> },
    /// The fleet holds or refuses it (`FleetHolds::gate`; never
    /// `Admit::Go`).
    Fleet(Admit),
    /// A read of a moved key, asked where the key is.
    Read(MovedRead),
    /// Its moved keys, each pulled over before it goes.
    Pull(Vec<Pull>),
}

impl From<Moving> for Gated {
    fn from(m: Moving) -> Gated {
        match m {
            Moving::Go { owner } => Gated::Go { owner },
            Moving::Read(read) => Gated::Read(read),
            Moving::Pull(pulls) => Gated::Pull(pulls),
        }
    }
}

impl PoolRt {
    /// What a request of this pool (`index`) at the gates comes to: the
    /// fleet's say first, when the worker is a fleet member (`page`;
    /// `FleetHolds::gate`), then, a migrating pool's, the migration's
    /// (`moving`; `reads`: a request to route, not one a transaction
    /// holds). A read asked again after a miss (`AfterPull::Read`) passed
    /// the fleet's gate when it arrived: only the migration's is asked.
    pub(super) fn gated(
        &mut self,
        index: usize,
        (holds, page): (&mut FleetHolds, Option<FleetPage>),
        at: At,
        now: Instant,
    ) -> Gated {
        let again = matches!(at.then, AfterPull::Read { .. });
        if let Some(page) = page.filter(|_| !again) {
            let in_step = || page.in_step();
            let bound = || Duration::from_millis(page.hold_ms());
            match holds.gate((self, index), in_step, bound, at.req, at.bytes, now) {
                Admit::Go => {}
                admit => return Gated::Fleet(admit),
            }
        }
        if !self.route.is_migrating() {
            return Gated::Go { owner: None };
        }
        let reads = at.then == AfterPull::Route;
        self.moving(at.req, at.bytes, reads, now).into()
    }

    /// The gate that holds a request (`at`) while its keys are pulled
    /// (`pulls`). Once pulled the keys are on their new owners: later
    /// reads, this worker's or another's, ask there first (one that comes
    /// before the copy still finds the key, asking the old owners next).
    pub(super) fn pulling(&self, at: At, pulls: Vec<Pull>) -> Gate {
        if let Some(m) = &self.migration {
            pulls.iter().for_each(|p| m.mark_moved(p.key()));
        }
        let follows = follows_copies(at.req, at.then, self.proto, &self.route);
        let pulls = Pulls::new(pulls, self.proto, follows);
        Gate::pulling(at.req, at.bytes, pulls, at.then)
    }
}

impl Sends {
    /// The commands to queue on the `i`th server, in order, each as the
    /// proxy's own request of pool `pool` (`proto`), on the connection
    /// slot of the client that holds the pull (`client`), its reply going
    /// to the pull.
    fn copies(
        &self,
        i: usize,
        (proto, pool): (Protocol, usize),
        client: (Token, u64),
    ) -> impl Iterator<Item = Option<CopyPlan>> + '_ {
        let (token, id) = client;
        let (server, idx) = (self.to[i], self.idx as u32);
        self.cmds.iter().map(move |&(part, ref bytes)| {
            let waiter = Waiter::Pull {
                token,
                id,
                idx,
                part,
            };
            CopyPlan::own(proto, pool, server, Some(client), waiter, bytes.to_vec())
        })
    }
}

impl Worker<'_> {
    /// A request of `pool` about to be routed, or to go into its client's
    /// transaction, or a read asked again after a miss (`then`): through
    /// the fleet's gate, then the migration's, and what they say
    /// (`PoolRt::gated`) carried out: it goes, or is held by the fleet (its
    /// client's gate set) or refused, or its moved key is read where it
    /// is, or its moved keys are pulled (its client's gate set, the pulls'
    /// steps carried out by `run_held`). A worker that is no fleet member,
    /// of a pool not migrating, lets it go at once: always inlined, so
    /// that most requests pay that check only, not a call.
    #[inline(always)]
    pub(super) fn gate(
        &mut self,
        token: Token,
        pool: usize,
        req: &Request,
        bytes: &[u8],
        then: AfterPull,
        now: Instant,
    ) -> Hold {
        if self.fleet.is_none() && !self.pools[pool].route.is_migrating() {
            return GO;
        }
        let at = At::new(req, bytes, then);
        let holds = (&mut self.fleet_holds, self.fleet);
        let read = match self.pools[pool].gated(pool, holds, at, now) {
            Gated::Go { owner } => return Hold::Go { owner },
            Gated::Fleet(admit) => {
                let on = (&mut self.conns, &self.stats, &self.pools[..]);
                return self.fleet_holds.carry_out((admit, at, token), on, now);
            }
            Gated::Pull(pulls) => {
                let n = pulls.len() as u64;
                let gate = Box::new(self.pools[pool].pulling(at, pulls));
                self.stats.worker_add(WorkerField::Pulled, n);
                if let Some(c) = self.conns.client_mut(token.0) {
                    c.set_gate(gate);
                }
                // Its pulls start (`Pulls::start_next`).
                self.run_held(token, Step::Wait, now);
                return Hold::Held;
            }
            Gated::Read(read) => read,
        };
        // A read of its moved key where the key may be, with what routing a
        // request does besides sending it (`dispatch_routed`): its key
        // noted for the hot keys, its prefix route counted, its copy to a
        // shadow pool.
        let Some(c) = self.conns.client_mut(token.0) else {
            return GO;
        };
        c.hold_for_read();
        let to = ReplyTo::new(token, c.id(), None, None);
        let (send, plan) = read.send_plan(req, bytes);
        self.stats.worker_add(WorkerField::MovedReads, 1);
        self.recorder.note_key(pool, &req.routing_key(bytes));
        if plan.count_routes {
            self.pools[pool].count_routes(pool, req, bytes, &self.stats);
        }
        if let Some(shadow) = plan.shadow {
            let copy = self.shadows.copy(shadow, &mut self.pools, req, bytes, now);
            self.send_copy(copy, Some((req, bytes)), now);
        }
        self.send_plan(to, pool, req, bytes, Ok(send), now);
        Hold::Held
    }

    /// Carry out what a held request's pulls said (`Pulls::start_next`,
    /// a reply's `Client::pull_reply`), and what that leads to (a command
    /// that cannot be queued moves the pull on at once): each command on
    /// each server it names, on the client's connection slot for that
    /// server, a server's commands after one that is not queued left out,
    /// and on how many servers all went told back; or what the fleet said
    /// of a held request (`FleetHolds::ended`): refused, or through the
    /// gates again; or a read that missed (`Client::pull_after_miss`),
    /// through the gates again. A request released goes on as the step
    /// says, and its client is read again. What became of a request put
    /// through the gates again, else `Held`.
    pub(super) fn run_held(&mut self, token: Token, mut step: Step, now: Instant) -> Hold {
        let Some(c) = self.conns.client(token.0) else {
            return GO;
        };
        let (pool, id) = (c.pool(), c.id());
        // What goes on, and whether it was released (its client then
        // read again).
        let (req, bytes, then, released) = loop {
            step = match step {
                Step::Wait => {
                    // Nothing until another reply, once every pull started.
                    let g = self.conns.client_mut(token.0).and_then(|c| c.gate_mut());
                    match g.and_then(|g| g.pulls.start_next()) {
                        Some(next) => next,
                        None => return Hold::Held,
                    }
                }
                Step::Send(sends) => {
                    let (proto, client) = ((self.pools[pool].proto, pool), (token, id));
                    let copies = |i| sends.copies(i, proto, client);
                    let sent = |i: &usize| copies(*i).all(|own| self.send_copy(own, None, now));
                    let ok = (0..sends.to.len()).filter(sent).count();
                    let g = self.conns.client_mut(token.0).and_then(|c| c.gate_mut());
                    g.map_or(Step::Wait, |g| g.pulls.sent(&sends, ok))
                }
                Step::Behind => {
                    let Some(g) = self.conns.client(token.0).and_then(|c| c.gate()) else {
                        return Hold::Held;
                    };
                    break (g.req.clone(), g.bytes.clone(), g.then, false);
                }
                // Its key pulled as any moved key's, the read asked again
                // behind the copy.
                Step::Missed { req, bytes, seq } => {
                    return self.gate(token, pool, &req, &bytes, AfterPull::Read { seq }, now);
                }
                Step::Release { .. } | Step::Unheld { .. } => {
                    let Some(gate) = self.conns.client_mut(token.0).and_then(|c| c.take_gate())
                    else {
                        return Hold::Held;
                    };
                    let g = *gate;
                    let goes = match step {
                        Step::Release { sent } => !sent,
                        // Refused, or through the gates again as a request
                        // arriving now.
                        Step::Unheld {
                            pool,
                            since,
                            refused,
                        } => {
                            let waited = now.saturating_duration_since(since).as_micros() as u64;
                            self.stats.worker_add(WorkerField::FleetHeldUs, waited);
                            let hold = match refused {
                                Some(error) => {
                                    let on = (&mut self.conns, &self.stats, &self.pools[..]);
                                    let at = At::new(&g.req, &g.bytes, g.then);
                                    let refuse = (Admit::Refuse(error), at, token);
                                    self.fleet_holds.carry_out(refuse, on, now)
                                }
                                None => self.gate(token, pool, &g.req, &g.bytes, g.then, now),
                            };
                            matches!(hold, Hold::Go { .. })
                        }
                        _ => false,
                    };
                    if goes {
                        break (g.req, g.bytes, g.then, true);
                    }
                    // Parse what the client sent meanwhile (nothing while
                    // it is held again).
                    self.resume.push(token);
                    return Hold::Held;
                }
            };
        };
        // A request that waited (for its keys' pulls, or for the fleet)
        // goes where it was going: routed, or into its client's
        // transaction, or its read asked again.
        match then {
            AfterPull::Route => self.dispatch_routed(token, req, &bytes, None, now),
            AfterPull::Txn => {
                if let Some(d) =
                    txn::pulled(&mut self.conns, &mut self.pools, token, &req, &bytes, now)
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
        Hold::Held
    }
}

/// A read of a moved key, as its client keeps it.
impl Client {
    /// A memcached read of a key the migrator's map says moved missed on
    /// the new owner, the one server asked (`Retry::pull_on_miss`): the
    /// map guessed wrong (keys share its bits) or the key is gone from
    /// there. The request whose key is then pulled as any moved key, the
    /// read asked of the new owner again behind its copy, its answer
    /// going into the same slot `seq` (`Step::Missed`, carried out by
    /// `Worker::run_held`). `None`: the slot is not such a read, or it
    /// pulled once already: the miss is the answer.
    pub(super) fn pull_after_miss(&mut self, seq: u64) -> Option<Step> {
        let r = self.slot_mut(seq)?.retry.as_mut()?;
        r.pull_after_miss().then(|| Step::Missed {
            req: r.req.clone(),
            bytes: r.bytes.to_vec(),
            seq,
        })
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
