//! Counters that continue across reloads and upgrades (see
//! `stats/carry.rs`): the master folds what ended generations and the
//! previous binary counted into the carry slot of its current region, and
//! adds what draining generations are still counting.

use super::Master;
use crate::stats::carry::{Names, Totals};
use crate::stats::shm::{Layout, Region};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Environment variable naming the previous binary's counters region:
/// `PID:FD:SLOTS:NAMES:SCHEMA` (names hex-encoded, see `Names::encode`;
/// the schema, `Layout::schema`, in hex). A successor of another schema
/// does not read the region: it cannot know where the counters are.
pub const PREV_STATS_ENV: &str = "WALNUT_PREV_STATS";

/// The previous binary's counters, mapped while it runs.
pub struct PrevBinary {
    /// Its master's pid.
    pub pid: libc::pid_t,
    region: Region,
    names: Names,
}

impl PrevBinary {
    /// The region a previous binary handed down, if any.
    pub fn inherit() -> Option<PrevBinary> {
        let spec = std::env::var(PREV_STATS_ENV).ok()?;
        std::env::remove_var(PREV_STATS_ENV);
        let mut it = spec.splitn(5, ':');
        let pid: libc::pid_t = it.next()?.parse().ok()?;
        let fd: RawFd = it.next()?.parse().ok()?;
        let slots: usize = it.next()?.parse().ok()?;
        let names = Names::decode(it.next()?)?;
        // SAFETY: the previous binary passed us this open descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        super::listeners::set_cloexec(std::os::fd::AsRawFd::as_raw_fd(&fd), true);
        let schema = it.next().and_then(|s| u64::from_str_radix(s, 16).ok());
        if schema != Some(Layout::schema()) {
            crate::log_warn!(
                "the previous binary (pid {pid}) lays its counters out otherwise: they start from zero"
            );
            return None;
        }
        match Region::open(fd, names.layout(), slots) {
            Ok(region) => {
                crate::log_notice!("carrying on the counters of the previous binary (pid {pid})");
                Some(PrevBinary { pid, region, names })
            }
            Err(e) => {
                crate::log_warn!("cannot map the previous binary's counters: {e}");
                None
            }
        }
    }

    /// Whether its master still runs (a zombie does not).
    fn running(&self) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        if unsafe { libc::kill(self.pid, 0) } != 0 {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(s) => !matches!(
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().chars().next()),
                Some(Some('Z' | 'X'))
            ),
            Err(_) => false,
        }
    }
}

/// The value of [`PREV_STATS_ENV`] describing `region` (counted under
/// `names`) of this master.
pub fn export_spec(region: &Region, names: &Names) -> String {
    format!(
        "{}:{}:{}:{}:{:x}",
        std::process::id(),
        std::os::fd::AsRawFd::as_raw_fd(region.fd()),
        region.slots(),
        names.encode(),
        Layout::schema()
    )
}

impl Master {
    /// Rewrite the current region's carry slot: what ended (retired) plus
    /// what draining generations and the previous binary count now.
    pub(super) fn refresh_carry(&mut self) {
        if let Some(prev) = &self.prev {
            if !prev.running() {
                let prev = self.prev.take().expect("checked above");
                if let Some(cur) = &self.current {
                    let t = prev
                        .region
                        .totals(true, false)
                        .remap(&prev.names, &cur.names);
                    self.retired.add(&t, false);
                }
                crate::log_notice!(
                    "previous binary (pid {}) is gone: its counters are carried on",
                    prev.pid
                );
                self.carry_dirty = true;
            }
        }
        let live = !self.old.is_empty() || self.prev.is_some();
        if !live && !self.carry_dirty {
            return;
        }
        self.carry_dirty = false;
        let Some(cur) = &self.current else {
            return;
        };
        let mut carry: Totals = self.retired.clone();
        for g in &self.old {
            carry.add(
                &g.region.totals(false, true).remap(&g.names, &cur.names),
                true,
            );
        }
        if let Some(p) = &self.prev {
            carry.add(
                &p.region.totals(true, true).remap(&p.names, &cur.names),
                true,
            );
        }
        cur.region.set_carry(&carry);
    }

    /// A draining generation ended: keep what it counted.
    pub(super) fn fold_generation(&mut self, region: &Region, names: &Names) {
        if let Some(cur) = &self.current {
            let t = region.totals(false, false).remap(names, &cur.names);
            self.retired.add(&t, false);
        }
        self.carry_dirty = true;
    }

    /// The configuration changes: what ended so far, in the new names.
    pub(super) fn retarget_retired(&mut self, new: &Names) {
        self.retired = match &self.current {
            Some(cur) => self.retired.remap(&cur.names, new),
            None => Totals::zero(&new.layout()),
        };
        self.carry_dirty = true;
    }
}
