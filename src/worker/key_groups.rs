//! Where a request's keys go in a pool: grouped by server (or, in a
//! Redis Cluster pool, by slot) for a split, whether the keys of a command
//! that runs on one server live apart, the server of a command without a
//! key, and of a request sent on a connection of its own; what a split
//! request becomes once grouped (`Split`), and where a failed fragment's
//! keys go next in a replicated pool (`next_replicas`). Questions of the
//! pool's placement, asked by the executors (`forward.rs`, `blocking.rs`,
//! `stream.rs`).

use super::conn::zone_tag;
use super::conn::{Fragment, Multi, MultiMode, ReadBytes, ReplySlot, Retry};
use super::pool::PoolRt;
use super::send_plan::{KeyGroups, NotSent, SendPlan, Write};
use crate::proto::redis::CmdClass;
use crate::proto::{Op, Request};
use smallvec::SmallVec;
use std::time::Instant;

/// A read sent on (`PoolRt::send_again`, `PoolRt::zone_moves`): its
/// plan, and the request it sends with its bytes (the slot's, which
/// keeps them).
#[derive(Debug)]
pub(super) struct Again {
    pub plan: SendPlan,
    pub req: Request,
    pub bytes: Vec<u8>,
    /// New fragments to count (`fragments`): a zone pool's.
    pub fragments: u64,
}

/// Why a read's keys go on after its reply (`PoolRt::resend`).
pub(super) enum Resend<'a> {
    /// Its server could not be reached: the whole read (`None`) or its
    /// fragment's keys go to their next server (`PoolRt::send_again`).
    Failed(Option<usize>),
    /// A warm-up pool's read found its key in the warm pool: the value is
    /// copied to the cold one (`ReplySlot::warm_hit`).
    WarmHit,
    /// The reply of fragment `fi` of a zone pool's multi-key read came,
    /// not yet stored: its misses move to the next zone, what it found in
    /// the warm pool is copied to the cold one (`PoolRt::zone_moves`).
    Missed { fi: usize, reply: &'a mut Vec<u8> },
}

/// Warm-up copies to start, each a key with its warm and its cold owner.
pub(super) type WarmCopies = Vec<(Vec<u8>, usize, usize)>;

/// Key `i` goes to server `s`: into its group, or a new group with room
/// for the `left` keys from `i` on (one allocation per group, not a
/// growth per few keys).
#[inline]
pub(super) fn add_key(groups: &mut KeyGroups, s: usize, i: usize, left: usize) {
    match groups.iter_mut().find(|(gs, _)| *gs == s) {
        Some((_, v)) => v.push(i),
        None => {
            let mut v = Vec::with_capacity(left);
            v.push(i);
            groups.push((s, v));
        }
    }
}

/// What a split request (`proto::Route::Multi`) does once its keys are
/// grouped by server.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Split {
    /// Refused with this reply: only one server can promise what the
    /// command does (MSETNX, a blocking pop over keys, ...), and its keys
    /// live on several.
    Refused(Vec<u8>),
    /// Sent as a single-key request: its keys are on one server.
    Whole,
    /// One fragment per group, the replies merged.
    Fragments,
}

/// The servers a request for a key several servers hold goes to, and
/// how (`PoolRt::replicas`, `replica_read`, `zone_owners`): the worker
/// sends it as this says (`Worker::send_plan`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owners {
    /// A read: to the first, the others kept to fail over to in order.
    Read(Vec<usize>),
    /// A write: to every one, answered with the first success once all
    /// have answered.
    Write(Vec<usize>),
    /// A zone pool's `async` write: to every zone, answered by the local
    /// zone, or by the next that succeeds when it fails.
    ZoneWrite(Vec<usize>),
}

/// Where a request for one server goes (`PoolRt::place`).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// To this server.
    Server(usize),
    /// Refused with this reply: a command that runs on one server names
    /// keys that live apart (`keys_apart`).
    Apart(Vec<u8>),
    /// No server to go to (every one ejected).
    NoServer,
}

impl PoolRt {
    /// `replicas: n`: the servers of `req`'s key on the ring (the ring
    /// rebuilt first if an ejection's time is up); a memcached read goes
    /// to one after another, anything else to every one.
    pub(super) fn replicas(&mut self, req: &Request, bytes: &[u8], now: Instant) -> Owners {
        let key = req.routing_key(bytes);
        let key = key.as_ref();
        let _ = self.server_for(key, now);
        let r = self.cfg.replicas as usize;
        let mut replicas = Vec::with_capacity(r);
        self.placement.replicas_for(key, r, &mut replicas);
        if matches!(req.op, Op::Mc(op) if op.is_read()) {
            Owners::Read(replicas)
        } else {
            Owners::Write(replicas)
        }
    }

    /// A Sentinel pool's single-key read: to a replica of its key's
    /// master that is up, by `read_from` and the client (`read_order`),
    /// the master kept to fail over to. `None` when the master serves it
    /// (not a read, no replica up, or `read_from` picked the master).
    pub(super) fn replica_read(
        &mut self,
        req: &Request,
        bytes: &[u8],
        client_id: u64,
        now: Instant,
    ) -> Option<Owners> {
        let Op::Redis(op) = req.op else {
            return None;
        };
        if req.keys.is_empty() || !crate::proto::redis::commands::is_read_command(op.cmd.name()) {
            return None;
        }
        let key = req.routing_key(bytes);
        let master = self.server_for(key.as_ref(), now)?;
        self.read_order(master, client_id, now).map(Owners::Read)
    }

    /// How a request for a key the servers `owners` hold is sent: as a
    /// read (`replicated_read`), a write (`replicated_write`) or a zone
    /// pool's `async` write (`zone_write`) says. `NoServer` when there is
    /// none.
    pub(super) fn owners_plan(
        &self,
        owners: Owners,
        req: &Request,
        bytes: &[u8],
        client_id: u64,
    ) -> Result<SendPlan, NotSent> {
        match owners {
            Owners::Read(s) => self.replicated_read(req, bytes, s, client_id),
            Owners::Write(s) => self.replicated_write(req, s),
            Owners::ZoneWrite(s) => self.zone_write(req, s),
        }
        .ok_or(NotSent::NoServer)
    }

    /// A read of a key the servers `replicas` hold (`Owners::Read`): to
    /// the first, the others kept in the slot to fail over to in order
    /// (`replica_read_random`: turned by the time and the client, so
    /// clients spread over them). `None`: no server.
    pub(super) fn replicated_read(
        &self,
        req: &Request,
        bytes: &[u8],
        mut replicas: Vec<usize>,
        client_id: u64,
    ) -> Option<SendPlan> {
        let first = *replicas.first()?;
        let first = if self.cfg.replica_read_random && replicas.len() > 1 {
            let n = (crate::util::epoch_us() as usize ^ client_id as usize) % replicas.len();
            replicas.rotate_left(n);
            replicas[0]
        } else {
            first
        };
        let slot = ReplySlot {
            retry: Some(Box::new(Retry {
                req: req.clone(),
                bytes: ReadBytes::from_slice(bytes),
                replicas: replicas.into(),
                next: 1,
                on_miss: false,
                learns: false,
                pull_on_miss: false,
            })),
            ..ReplySlot::default()
        };
        Some(SendPlan::whole(slot, first, Write::Request))
    }

    /// A write of a key the servers `replicas` hold (`Owners::Write`): to
    /// every one, a fragment each knowing its server's zone, answered with
    /// the first success. `None`: no server.
    pub(super) fn replicated_write(&self, req: &Request, replicas: Vec<usize>) -> Option<SendPlan> {
        self.owners_write(req, replicas, MultiMode::Replicate)
    }

    /// A write to every one of `owners`, a fragment each knowing its
    /// server's zone, merged as `mode` says (a replicated pool's write, a
    /// zone pool's async one). `None`: no owner.
    pub(super) fn owners_write(
        &self,
        req: &Request,
        owners: Vec<usize>,
        mode: MultiMode,
    ) -> Option<SendPlan> {
        if owners.is_empty() {
            return None;
        }
        let routing = &self.cfg.routing;
        let zones: SmallVec<[u8; 4]> = owners.iter().map(|&s| zone_tag(routing, s)).collect();
        let slot = ReplySlot::for_owners(req, &zones, mode);
        Some(SendPlan::each(slot, owners, Write::Request))
    }

    /// The server of `req`, a request for one server: its key's owner, or
    /// for a command without a key (`keyless`) the keyless server;
    /// refused when it names several keys that live apart.
    #[inline]
    pub(super) fn place(
        &mut self,
        req: &Request,
        bytes: &[u8],
        keyless: bool,
        client_id: u64,
        now: Instant,
    ) -> Placed {
        if let Op::Redis(r) = req.op {
            if crate::proto::redis::names_more_keys(r.cmd)
                && self.keys_apart(r.cmd, req, bytes, now)
            {
                let mut out = Vec::new();
                crate::proto::redis::reply::cross_server(r.cmd.name(), false, &mut out);
                return Placed::Apart(out);
            }
        }
        let server = if keyless {
            self.keyless_server(client_id, now)
        } else {
            self.server_for(req.routing_key(bytes).as_ref(), now)
        };
        server.map_or(Placed::NoServer, Placed::Server)
    }

    /// What `req`, its keys in `groups` groups, does: refused when a
    /// one-server command's keys are apart, sent whole when they are on
    /// one server, else split; a replicated pool's split request and a
    /// zone pool's multi-key read stay split even on one server (they fall
    /// over per key).
    pub(super) fn split(&self, req: &Request, groups: usize) -> Split {
        if let Op::Redis(r) = req.op {
            if groups > 1 && matches!(r.class, CmdClass::OneServer | CmdClass::Blocking) {
                let mut out = Vec::new();
                let cluster = self.cluster.is_some();
                crate::proto::redis::reply::cross_server(r.cmd.name(), cluster, &mut out);
                return Split::Refused(out);
            }
        }
        if groups <= 1 && !self.route.keeps_split(req.op) {
            return Split::Whole;
        }
        Split::Fragments
    }

    /// A replicated pool's split read whose fragment `frag` failed: its
    /// keys grouped by their next replica, and the attempt that is. `None`
    /// when they have no further replica (or the request is not a split).
    pub(super) fn next_replicas(&self, m: &Multi, frag: usize) -> Option<(u8, KeyGroups)> {
        let r = self.cfg.replicas as usize;
        let f = m.frags.get(frag)?;
        let attempt = f.attempt as usize + 1;
        if r <= 1 || attempt >= r || m.mode != MultiMode::Split {
            return None;
        }
        let mut replicas = Vec::with_capacity(r);
        let mut groups = KeyGroups::new();
        for &i in &f.keys {
            let Some(range) = m.req.keys.get(i) else {
                continue;
            };
            self.placement
                .replicas_for(&m.bytes[range.clone()], r, &mut replicas);
            add_key(
                &mut groups,
                *replicas.get(attempt)?,
                i,
                m.req.keys.len() - i,
            );
        }
        Some((attempt as u8, groups))
    }

    /// How a split request is sent (`Split::Fragments`): one fragment per
    /// group of `groups`, each to its server, answered into one slot that
    /// merges them.
    pub(super) fn split_plan(req: &Request, bytes: &[u8], groups: KeyGroups) -> SendPlan {
        let frags = groups
            .iter()
            .map(|(_, keys)| Fragment {
                keys: keys.clone(),
                ..Fragment::default()
            })
            .collect();
        let slot = ReplySlot {
            multi: Some(Box::new(Multi {
                req: req.clone(),
                bytes: bytes.to_vec(),
                frags,
                remaining: groups.len(),
                error: None,
                mode: MultiMode::Split,
            })),
            ..ReplySlot::default()
        };
        SendPlan {
            slot: Some(slot),
            to: groups,
            frag: Some(0),
            write: Write::Fragment,
            bounded: SmallVec::new(),
        }
    }

    /// A replicated pool's split read whose fragment `frag` failed: its
    /// keys sent again to their next replicas (`next_replicas`), as new
    /// fragments of `m` (`Multi::refragment`, counted before any is sent,
    /// so none completes it early). `None` when they have no further
    /// replica.
    pub(super) fn replica_retry(&self, m: &mut Multi, frag: usize) -> Option<SendPlan> {
        let (attempt, groups) = self.next_replicas(m, frag)?;
        let base = m.refragment(frag, groups.iter().map(|(_, keys)| keys), attempt);
        Some(SendPlan {
            slot: None,
            to: groups,
            frag: Some(base as u32),
            write: Write::Fragment,
            bounded: SmallVec::new(),
        })
    }

    /// A read of `slot` that failed, sent on (`Worker::send_again`):
    /// whole (`frag` `None`) to the next server its `Retry` names, or the
    /// keys of its failed fragment `frag` as new fragments of the same
    /// request: a replicated pool's to their next replicas
    /// (`replica_retry`), a zone pool's to their next zone
    /// (`Multi::zone_retry`, `zone_next`; counted as fragments). `None`
    /// when it has nowhere further to go.
    pub(super) fn send_again(&self, slot: &mut ReplySlot, frag: Option<usize>) -> Option<Again> {
        let Some(fi) = frag else {
            let retry = slot.retry.as_mut()?;
            let server = retry.take_next()?;
            let mut to = KeyGroups::new();
            to.push((server, Vec::new()));
            let plan = SendPlan {
                slot: None,
                to,
                frag: None,
                write: Write::Request,
                bounded: SmallVec::new(),
            };
            // The bytes stay the slot's too: a failure to queue it may
            // send it on again at once.
            let (req, bytes) = (retry.req.clone(), retry.bytes.to_vec());
            return Some(Again {
                plan,
                req,
                bytes,
                fragments: 0,
            });
        };
        let m = slot.multi.as_mut()?;
        let zoned = self.route.zones().is_some();
        let plan = if zoned {
            m.zone_retry(fi)
                .and_then(|(keys, zone)| self.zone_next(m, fi, &keys, zone, true))
        } else {
            self.replica_retry(m, fi)
        }?;
        let fragments = if zoned { plan.to.len() as u64 } else { 0 };
        Some(Again {
            plan,
            req: m.req.clone(),
            bytes: m.bytes.clone(),
            fragments,
        })
    }

    /// What goes on from `slot` after a reply, and why (`Resend`): the
    /// warm-up copies to start first, then the read's keys sent again,
    /// carried out by `Worker::send_again`.
    pub(super) fn resend(
        &self,
        slot: &mut ReplySlot,
        why: Resend<'_>,
    ) -> (WarmCopies, Option<Again>) {
        match why {
            Resend::Failed(frag) => (Vec::new(), self.send_again(slot, frag)),
            Resend::WarmHit => (slot.warm_hit().into_iter().collect(), None),
            Resend::Missed { fi, reply } => match slot.multi.as_mut() {
                Some(m) => self.zone_moves(m, fi, reply),
                None => (Vec::new(), None),
            },
        }
    }

    /// The server a request `op` on `key` goes to when it is sent on a
    /// connection of its own (a blocking command, a streamed request): in
    /// a cluster pool the node of its slot, else the pool's placement
    /// (`None`: no server).
    pub(super) fn key_server(
        &mut self,
        key: &[u8],
        op: crate::proto::Op,
        client_id: u64,
        now: Instant,
    ) -> Option<usize> {
        if self.cluster.is_some() {
            return Some(self.cluster_server(key, op, client_id));
        }
        self.server_for(key, now)
    }

    /// Whether the keys of a command that names several (RENAME, SMOVE,
    /// SUNIONSTORE, BITOP, EVAL, ...) live on different servers. Such a
    /// command runs on one server, which sees only its own keys: routed
    /// by its first key it would answer wrongly without an error (a COPY
    /// to a key of another server, a BITOP over keys it does not hold), so
    /// it is refused, as a Redis Cluster node answers CROSSSLOT.
    pub(super) fn keys_apart(
        &mut self,
        cmd: crate::proto::redis::Cmd,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> bool {
        let keys = crate::proto::redis::command_keys(cmd, req, bytes);
        let mut first = None;
        for k in &keys {
            let s = self.server_for(k, now);
            match first {
                None => first = Some(s),
                Some(f) if f != s => return true,
                Some(_) => {}
            }
        }
        false
    }

    /// The server a Redis command without a key goes to (TIME, EVAL with
    /// numkeys 0): `keyless_server: first` takes the first server of the
    /// list that is not ejected, `random` any of them, per request.
    pub(super) fn keyless_server(&mut self, client_id: u64, now: Instant) -> Option<usize> {
        // Brings back ejected servers whose retry time came, as for a key.
        self.server_for(b"", now)?;
        // The configured servers only (not replicas found at run time).
        let live: SmallVec<[usize; 8]> = (0..self.cfg.servers.len().min(self.servers.len()))
            .filter(|&i| self.servers[i].ejected_until.is_none_or(|t| t <= now))
            .collect();
        if self.cfg.keyless_random && !live.is_empty() {
            let n = (crate::util::epoch_us() ^ client_id.rotate_left(17)) as usize;
            return live.get(n % live.len()).copied();
        }
        live.first().copied()
    }

    /// Key indices grouped by server, in client order; `None` when a key
    /// has no server to go to.
    #[inline]
    pub(super) fn server_groups(
        &mut self,
        req: &Request,
        bytes: &[u8],
        now: Instant,
    ) -> Option<KeyGroups> {
        let mut groups = KeyGroups::new();
        for (i, r) in req.keys.iter().enumerate() {
            let s = self.server_for(&bytes[r.clone()], now)?;
            add_key(&mut groups, s, i, req.keys.len() - i);
        }
        Some(groups)
    }

    /// A cluster pool's key indices grouped by hash slot (a cluster node
    /// refuses keys of different slots), in client order, each group with
    /// its slot's node.
    pub(super) fn slot_groups(&self, client_id: u64, req: &Request, bytes: &[u8]) -> KeyGroups {
        let mut groups = KeyGroups::new();
        let mut by_slot: std::collections::HashMap<u16, usize> = Default::default();
        for (i, r) in req.keys.iter().enumerate() {
            let key = &bytes[r.clone()];
            let slot = crate::proto::redis::cluster::key_slot(key);
            let g = *by_slot.entry(slot).or_insert_with(|| {
                groups.push((
                    self.cluster_server(key, req.op, client_id),
                    Vec::with_capacity(req.keys.len() - i),
                ));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        groups
    }
}

#[cfg(test)]
#[path = "key_groups_tests.rs"]
mod tests;
