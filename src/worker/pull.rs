//! Pulling a held request's moved keys from their old owners to their new
//! ones (see `migrate.rs`): what each reply of a pull leads to, decided
//! here without sockets. Given a reply (or a lost server) for one of a
//! pull's commands, `Pulls` says what happens next as a `Step`: commands
//! to queue on servers (the key read from the next old owner, its copy to
//! each new owner, the stale old copies' deletes), the request sent right
//! behind its keys' copies, or every key done and the request released.
//! The worker only executes those steps (`Worker::run_held`), a reply's
//! asked of its client (`Client::pull_reply`, `client_flow.rs`).
//!
//! Per key: read it from its old owners in turn, newest placement first
//! (Redis `DUMP` + `PTTL`, memcached `mg k v f t`), until one has it; copy
//! it to each new owner that is not that server, never over a value
//! there (`RESTORE` without `REPLACE`, `ms ... ME`); once every new owner
//! has it (copied, or a newer value refused the copy), delete it from the
//! old owners that no longer own it; the key is done once every delete
//! is answered. A copy that failed keeps the old copies. An old owner
//! that cannot be reached loses its keys (as in twemproxy).

use crate::migrate::commands::{del, dump, mc_delete, mc_get, mc_store, pttl, restore};
use crate::proto::redis::moving as redis_moving;
use crate::proto::{Protocol, Request, Route};
use crate::route::{PoolRoute, Target};
use std::time::Instant;

/// What became of a request at the gates of a held request (the
/// fleet's, the migration's: `Worker::gate`, `migrate.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hold {
    /// Held: its moved keys are being pulled, its read of a moved key was
    /// sent where the key is, or it waits for the fleet.
    Held,
    /// It goes its usual way; `owner`: its one key's server, when placing
    /// the key on every ring found it (so that it is not placed again; a
    /// `u32` so that it is passed on in one register).
    Go { owner: Option<u32> },
    /// The fleet refused it (the error is queued as its reply).
    Refused,
}

/// A request at the gates of a held request (the fleet's, the
/// migration's): it, its bytes, and where it goes once it may.
#[derive(Debug, Clone, Copy)]
pub(super) struct At<'r> {
    pub req: &'r Request,
    pub bytes: &'r [u8],
    pub then: AfterPull,
}

impl<'r> At<'r> {
    pub(super) fn new(req: &'r Request, bytes: &'r [u8], then: AfterPull) -> At<'r> {
        At { req, bytes, then }
    }
}

/// Where a held request goes once its keys are on their new owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPull {
    /// Routed by its keys, as any request.
    Route,
    /// To its client's transaction connection (see `txn.rs`).
    Txn,
    /// Into the slot `seq` its client's read already took: a memcached
    /// read of a moved key that missed on the new owner, asked there again
    /// once its key is pulled (`Step::Missed`).
    Read { seq: u64 },
}

/// One key pulled from its old owners to its new ones.
#[derive(Debug)]
pub struct Pull {
    /// The key.
    key: Vec<u8>,
    /// The servers it may be on (newest placement first): asked in turn
    /// until one has it.
    olds: Vec<usize>,
    /// Which of `olds` is being asked.
    at: usize,
    /// Its owners now (more than one in a replicated pool).
    news: Vec<usize>,
    /// Copies to the new owners not answered yet.
    stores: usize,
    /// Deletes of the old copies not answered yet.
    deletes: usize,
    /// A copy failed: the old copies are kept.
    store_failed: bool,
    /// Redis: the `DUMP` payload, once read.
    dump: Option<Vec<u8>>,
    /// Finished (copied, found absent, or given up).
    done: bool,
}

impl Pull {
    /// `key`, which may be on `olds` (newest placement first, not empty),
    /// pulled to `news`.
    pub fn new(key: Vec<u8>, olds: Vec<usize>, news: Vec<usize>) -> Pull {
        Pull {
            key,
            olds,
            at: 0,
            news,
            stores: 0,
            deletes: 0,
            store_failed: false,
            dump: None,
            done: false,
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn olds(&self) -> &[usize] {
        &self.olds
    }

    pub fn news(&self) -> &[usize] {
        &self.news
    }
}

/// Which request of a pull a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPart {
    /// Redis `DUMP key` on the old owner.
    Dump,
    /// Redis `PTTL key` on the old owner (after `Dump`).
    Ttl,
    /// memcached `mg key v f t` on the old owner.
    Get,
    /// The copy on the new owner (`RESTORE`, `ms ... ME`).
    Store,
    /// The delete on the old owner (the pull is done once every old copy's
    /// is answered).
    Delete,
}

/// What a batch of a pull's commands does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Read the key from an old owner.
    Read,
    /// Copy it to the new owners.
    Copy,
    /// Delete the stale old copies.
    Delete,
}

/// Commands of pull `idx` to queue: every one of `cmds`, in order, on
/// each server of `to`. On one server, the commands after one that cannot
/// be queued are not queued either (a `PTTL` goes only behind its
/// `DUMP`). The worker then tells `Pulls::sent` on how many servers all
/// went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sends {
    pub idx: usize,
    pub phase: Phase,
    pub to: Vec<usize>,
    pub cmds: Vec<(PullPart, Vec<u8>)>,
}

/// What the worker does next for a held request: its pulls', the fleet's
/// hold's (`Unheld`), or a missed read's (`Missed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing until another reply, once every pull started
    /// (`Pulls::start_next`).
    Wait,
    /// Queue these commands, then report with `Pulls::sent`.
    Send(Sends),
    /// The request goes now, right behind its keys' copies on the same
    /// connections; the gate stays, keeping the client's next requests
    /// back until the old copies are gone.
    Behind,
    /// Every key is done: the gate is over, the request goes on unless it
    /// went behind its copies already (`sent`), and the client is read
    /// again.
    Release { sent: bool },
    /// A fleet hold ended (`FleetHolds::ended`): the gate is over; the
    /// request of `pool`, held since `since`, is refused with `refused`,
    /// or else goes on as one arriving now would (through the fleet's
    /// gate again, then its pulls), and the client is read again.
    Unheld {
        pool: usize,
        since: Instant,
        refused: Option<&'static str>,
    },
    /// A memcached read of a moved key missed on its new owner, the one
    /// server asked (`Client::pull_after_miss`): `req` (its bytes
    /// `bytes`) pulls its key as any moved key's, the read then asked
    /// there again behind the copy, its answer into slot `seq`
    /// (`AfterPull::Read`).
    Missed {
        req: Request,
        bytes: Vec<u8>,
        seq: u64,
    },
}

/// The pulls of one held request.
#[derive(Debug)]
pub struct Pulls {
    pulls: Vec<Pull>,
    /// Pulls not finished.
    left: usize,
    proto: Protocol,
    /// The request may follow its keys' copies (`follows_copies`).
    follows: bool,
    /// It did (`Step::Behind`).
    sent: bool,
    /// How many pulls were started (`start_next`).
    started: usize,
}

impl Default for Pulls {
    /// No pulls: a gate held for something else (the fleet, a read).
    fn default() -> Pulls {
        Pulls::new(Vec::new(), Protocol::Redis, false)
    }
}

/// Whether a held request may be sent right behind its keys' copies,
/// without waiting for their answers: a server runs one connection's
/// commands in order, so the request finds the key copied (or the newer
/// value that refused the copy), a round trip saved. Only for a request
/// that only reads (a write waits until the old copies are deleted, so
/// an old owner never holds a value of the key other than the new
/// owner's), and goes to its key's owner on the client's usual
/// connection: not a transaction's (`then`), a blocking command's or a
/// memcached binary request's (its connection class), a replica read's
/// (the route's plan).
pub fn follows_copies(req: &Request, then: AfterPull, proto: Protocol, route: &PoolRoute) -> bool {
    matches!(then, AfterPull::Route | AfterPull::Read { .. })
        && req.route == Route::Single
        && req.op.reads_only()
        && proto.conn_class(req.op) == 0
        && {
            let plan = route.plan(req);
            plan.target == Target::Key && !plan.replica_first
        }
}

impl Pulls {
    /// `pulls` of a request of a `proto` pool; `follows`: it may go right
    /// behind its keys' copies (`follows_copies`).
    pub fn new(pulls: Vec<Pull>, proto: Protocol, follows: bool) -> Pulls {
        Pulls {
            left: pulls.len(),
            pulls,
            proto,
            follows,
            sent: false,
            started: 0,
        }
    }

    /// The next pull not started yet starts (`start`); `None` once all
    /// did. Pulls start one after the other, each as far as it goes
    /// before the next starts.
    pub fn start_next(&mut self) -> Option<Step> {
        let idx = self.started;
        if idx >= self.pulls.len() {
            return None;
        }
        self.started += 1;
        Some(self.start(idx))
    }

    pub fn is_empty(&self) -> bool {
        self.pulls.is_empty()
    }

    /// Pull `idx` starts (or goes on to its next old owner): the key is
    /// asked of the old owner at hand.
    pub fn start(&mut self, idx: usize) -> Step {
        let Some(p) = self.pulls.get(idx) else {
            return Step::Wait;
        };
        let Some(&old) = p.olds.get(p.at) else {
            return Step::Wait;
        };
        let cmds = match self.proto {
            Protocol::Redis => vec![
                (PullPart::Dump, dump(&p.key)),
                (PullPart::Ttl, pttl(&p.key)),
            ],
            Protocol::Memcache => vec![(PullPart::Get, mc_get(&p.key))],
        };
        Step::Send(Sends {
            idx,
            phase: Phase::Read,
            to: vec![old],
            cmds,
        })
    }

    /// The worker queued `s` on `ok` of its servers (the others could not
    /// be reached).
    pub fn sent(&mut self, s: &Sends, ok: usize) -> Step {
        let idx = s.idx;
        let Some(p) = self.pulls.get_mut(idx) else {
            return Step::Wait;
        };
        match s.phase {
            Phase::Read if ok < s.to.len() => self.done(idx),
            Phase::Read => Step::Wait,
            Phase::Copy => {
                p.stores = ok;
                p.store_failed |= ok < s.to.len();
                if ok == 0 {
                    self.finish(idx)
                } else {
                    self.behind()
                }
            }
            Phase::Delete if ok > 0 => {
                p.deletes = ok;
                Step::Wait
            }
            Phase::Delete => self.done(idx),
        }
    }

    /// A reply to pull `idx`'s command `part` (`None`: its server could
    /// not be reached).
    pub fn reply(&mut self, idx: usize, part: PullPart, reply: Option<&[u8]>) -> Step {
        let Some(p) = self.pulls.get_mut(idx) else {
            return Step::Wait;
        };
        if p.done {
            return Step::Wait;
        }
        if part == PullPart::Delete {
            // Answered or lost, the old copy is not waited for again (an
            // old owner that cannot be reached loses its keys).
            p.deletes = p.deletes.saturating_sub(1);
            return if p.deletes == 0 {
                self.done(idx)
            } else {
                Step::Wait
            };
        }
        let Some(reply) = reply else {
            return match part {
                // A `DUMP` is always followed by its `PTTL` on the same
                // connection: that one's outcome moves the pull on.
                PullPart::Dump => Step::Wait,
                PullPart::Store => self.stored(idx, false),
                _ => self.next(idx),
            };
        };
        match part {
            PullPart::Dump => {
                p.dump = redis_moving::bulk_payload(reply).map(<[u8]>::to_vec);
                Step::Wait
            }
            PullPart::Ttl => {
                let ttl = redis_moving::integer(reply).unwrap_or(-2);
                match p.dump.take().filter(|_| ttl != -2) {
                    Some(payload) => {
                        let store = restore(&p.key, ttl, &payload);
                        self.copy(idx, store)
                    }
                    None => self.next(idx),
                }
            }
            PullPart::Get => match crate::proto::memcache::moving::meta_value(reply) {
                Some(v) => {
                    let store = mc_store(&p.key, v.flags, v.ttl, v.value);
                    self.copy(idx, store)
                }
                None => self.next(idx),
            },
            PullPart::Store => self.stored(idx, crate::proto::copied(reply)),
            PullPart::Delete => Step::Wait,
        }
    }

    /// The key is not on the server asked: ask the next that may have it,
    /// or, when none is left, the pull is done.
    fn next(&mut self, idx: usize) -> Step {
        match self.pulls.get_mut(idx) {
            Some(p) if p.at + 1 < p.olds.len() => {
                p.at += 1;
                p.dump = None;
                self.start(idx)
            }
            _ => self.done(idx),
        }
    }

    /// The key was found on one of its old owners: copy it (`store`) to
    /// every new owner that is not that server.
    fn copy(&mut self, idx: usize, store: Vec<u8>) -> Step {
        let Some(p) = self.pulls.get(idx) else {
            return Step::Wait;
        };
        let source = p.olds[p.at];
        let to: Vec<usize> = p.news.iter().copied().filter(|&n| n != source).collect();
        Step::Send(Sends {
            idx,
            phase: Phase::Copy,
            to,
            cmds: vec![(PullPart::Store, store)],
        })
    }

    /// A new owner answered a copy (`ok`: it has the key now, copied or
    /// newer); once all have, the pull finishes.
    fn stored(&mut self, idx: usize, ok: bool) -> Step {
        let Some(p) = self.pulls.get_mut(idx) else {
            return Step::Wait;
        };
        p.store_failed |= !ok;
        p.stores = p.stores.saturating_sub(1);
        if p.stores == 0 {
            self.finish(idx)
        } else {
            Step::Wait
        }
    }

    /// Only once every new owner has the key do the old copies go (from
    /// servers that no longer own it): a new owner that is down must not
    /// cost the key. The pull is done once every delete is answered: a
    /// write of the key runs only then, so an old owner never holds a
    /// value of the key other than the new owner's (what
    /// a moved key read where it is relies on, `PoolRt::moving`).
    fn finish(&mut self, idx: usize) -> Step {
        let Some(p) = self.pulls.get(idx) else {
            return Step::Wait;
        };
        if p.store_failed {
            return self.done(idx);
        }
        let to: Vec<usize> = p
            .olds
            .iter()
            .copied()
            .filter(|o| !p.news.contains(o))
            .collect();
        let del = match self.proto {
            Protocol::Redis => del(&p.key),
            Protocol::Memcache => mc_delete(&p.key),
        };
        Step::Send(Sends {
            idx,
            phase: Phase::Delete,
            to,
            cmds: vec![(PullPart::Delete, del)],
        })
    }

    /// One key is where it belongs (or lost): once every key is, the
    /// request is released.
    fn done(&mut self, idx: usize) -> Step {
        let Some(p) = self.pulls.get_mut(idx) else {
            return Step::Wait;
        };
        if p.done {
            return Step::Wait;
        }
        p.done = true;
        self.left -= 1;
        if self.left > 0 {
            return self.behind();
        }
        Step::Release { sent: self.sent }
    }

    /// Once every key is either done or has its copies queued on its new
    /// owners, a request that may (`follows`) goes right behind those
    /// copies, once.
    fn behind(&mut self) -> Step {
        if self.sent || !self.follows || !self.pulls.iter().all(|p| p.done || p.stores > 0) {
            return Step::Wait;
        }
        self.sent = true;
        Step::Behind
    }
}

/// The pulls of a client's held request, kept in its gate.
#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
