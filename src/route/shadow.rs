//! `shadow:`: requests copied, fire and forget, to another pool (a new
//! cluster tried under real traffic). The worker's `shadow.rs` samples
//! and sends the copies.

use crate::config::Shadow;
use crate::proto::Request;

/// A shadow pool's routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowRoute {
    /// The pool copies go to, by index.
    pub to: usize,
    /// Only writes are copied.
    pub writes_only: bool,
    /// The share of requests copied, in percent.
    pub sample_pct: u32,
}

impl ShadowRoute {
    /// The route of `shadow:`, whose pool has index `to`.
    pub fn new(sh: &Shadow, to: usize) -> ShadowRoute {
        ShadowRoute {
            to,
            writes_only: sh.writes_only,
            sample_pct: sh.sample_pct,
        }
    }

    /// Whether `req` is of the kind copied (before sampling): it names a
    /// key, and is a write when only writes are.
    pub fn takes(&self, req: &Request) -> bool {
        if req.keys.is_empty() {
            return false;
        }
        !self.writes_only || !req.op.reads_only()
    }

    /// Whether the `tick`th request taken is in the sample.
    pub fn sampled(&self, tick: u64) -> bool {
        self.sample_pct >= 100 || tick % 100 < u64::from(self.sample_pct)
    }
}
