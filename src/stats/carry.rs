//! Counters that outlive the processes that counted them.
//!
//! A reload starts a new generation of workers with a new counters region
//! (its layout follows the new configuration), and a hot upgrade starts a
//! new master with regions of its own; the old ones keep counting while
//! they hand their clients over, then end. So that the stats port and
//! `/metrics` never go backwards, the master keeps, in the carry slot of
//! its current region, everything the others counted: generations that
//! ended (kept in `retired`), generations still draining, and the previous
//! binary's region, each matched to the current configuration by pool and
//! server *name* (what a counter means across configurations). The master
//! rewrites the carry slot as a whole (`Region::set_carry`), so the sums
//! it serves are the live workers' slots plus the carry, and grow
//! monotonically: a value moves from a live source to `retired` only once
//! its source stopped counting.
//!
//! Gauges (connections, queues) are carried from live sources only; a
//! pool or server that is no longer configured takes its counts with it.

use super::histogram;
use super::shm::{Layout, Region};
use super::{Kind, PoolField, ServerField, WorkerField};
use std::sync::atomic::Ordering;

/// Names of a configuration's pools and servers, in config order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Names {
    /// Pool names.
    pub pools: Vec<String>,
    /// Per pool, its servers' stats names.
    pub servers: Vec<Vec<String>>,
    /// Per pool, its prefix routes' labels (`*`: the default route).
    pub routes: Vec<Vec<String>>,
}

impl Names {
    /// The names of `config`'s pools and servers.
    pub fn of(config: &crate::config::Config) -> Names {
        Names {
            pools: config.pools.iter().map(|p| p.name.clone()).collect(),
            servers: config
                .pools
                .iter()
                .map(|p| p.servers.iter().map(|s| s.stats_name()).collect())
                .collect(),
            routes: config
                .pools
                .iter()
                .map(|p| p.routing.routes.iter().map(route_label).collect())
                .collect(),
        }
    }

    /// The layout of a region for these pools.
    pub fn layout(&self) -> Layout {
        Layout::new(
            self.servers.iter().map(Vec::len).collect(),
            self.routes.iter().map(Vec::len).collect(),
        )
    }

    /// A one-line form safe for an environment variable: hex of
    /// `pool\tserver\tserver...[\x1eroute...]` lines (a route's label
    /// is a key prefix, which holds no space).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        for (i, (p, servers)) in self.pools.iter().zip(&self.servers).enumerate() {
            text.push_str(p);
            for s in servers {
                text.push('\t');
                text.push_str(s);
            }
            for r in self.routes.get(i).into_iter().flatten() {
                text.push('\x1e');
                text.push_str(r);
            }
            text.push('\n');
        }
        text.bytes().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse [`Names::encode`]'s form.
    pub fn decode(hex: &str) -> Option<Names> {
        if !hex.len().is_multiple_of(2) {
            return None;
        }
        let bytes: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect();
        let text = String::from_utf8(bytes?).ok()?;
        let mut names = Names::default();
        for line in text.lines() {
            let mut routes = line.split('\x1e');
            let mut parts = routes.next()?.split('\t');
            names.pools.push(parts.next()?.to_string());
            names.servers.push(parts.map(str::to_string).collect());
            names.routes.push(routes.map(str::to_string).collect());
        }
        Some(names)
    }
}

/// A route's label in the stats: its prefix, `*` for the default.
pub fn route_label(r: &crate::config::PrefixRoute) -> String {
    if r.prefix.is_empty() {
        "*".into()
    } else {
        r.prefix.clone()
    }
}

/// How a word of a slot combines across slots and sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Counters, histogram counts and buckets.
    Add,
    /// Gauges: added, but only from live sources.
    Gauge,
    /// Timestamps and histogram maxima.
    Max,
    /// Not carried (recent latency windows, the slow-log ring, periods).
    Skip,
}

fn rule_of(kind: Kind) -> Rule {
    match kind {
        Kind::Counter => Rule::Add,
        Kind::Gauge => Rule::Gauge,
        Kind::Timestamp => Rule::Max,
    }
}

/// The rule of every word of a slot of `layout`.
fn rules(layout: &Layout) -> Vec<Rule> {
    let mut r = vec![Rule::Skip; layout.slot_words()];
    for f in WorkerField::ALL {
        r[layout.worker_idx(*f)] = rule_of(f.kind());
    }
    for (p, n) in layout.servers_per_pool.iter().enumerate() {
        for f in PoolField::ALL {
            r[layout.pool_idx(p, *f)] = rule_of(f.kind());
        }
        for s in 0..*n {
            for f in ServerField::ALL {
                r[layout.server_idx(p, s, *f)] = rule_of(f.kind());
            }
        }
        for route in 0..layout.routes_per_pool[p] {
            if let Some(i) = layout.route_idx(p, route) {
                r[i] = Rule::Add;
            }
        }
    }
    // Lifetime histograms: count, sum, max, period, buckets.
    for series in 0..layout.hist_series() {
        let base = layout.hist_idx(0, series);
        r[base] = Rule::Add;
        r[base + 1] = Rule::Add;
        r[base + 2] = Rule::Max;
        for w in &mut r[base + 4..base + histogram::WORDS] {
            *w = Rule::Add;
        }
    }
    r
}

/// One slot's worth of totals in a region's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Totals {
    layout: Layout,
    words: Vec<u64>,
}

impl Totals {
    /// Nothing counted yet, in `layout`.
    pub fn zero(layout: &Layout) -> Totals {
        Totals {
            layout: layout.clone(),
            words: vec![0; layout.slot_words()],
        }
    }

    /// Add `other` (same layout), gauges too when `gauges`.
    pub fn add(&mut self, other: &Totals, gauges: bool) {
        debug_assert_eq!(self.layout, other.layout);
        for ((w, o), rule) in self
            .words
            .iter_mut()
            .zip(&other.words)
            .zip(rules(&self.layout))
        {
            match rule {
                Rule::Add => *w = w.wrapping_add(*o),
                Rule::Gauge if gauges => *w = w.wrapping_add(*o),
                Rule::Max => *w = (*w).max(*o),
                Rule::Gauge | Rule::Skip => {}
            }
        }
    }

    /// These totals (counted under `from`) in the layout of `to`: pools
    /// and servers matched by name; what `to` does not name is dropped.
    pub fn remap(&self, from: &Names, to: &Names) -> Totals {
        let src = &self.layout;
        let dst_layout = to.layout();
        let mut out = Totals::zero(&dst_layout);
        let dst = &dst_layout;
        let mut copy = |from_idx: usize, to_idx: usize, len: usize| {
            out.words[to_idx..to_idx + len].copy_from_slice(&self.words[from_idx..from_idx + len]);
        };
        for f in WorkerField::ALL {
            copy(src.worker_idx(*f), dst.worker_idx(*f), 1);
        }
        for (dp, pname) in to.pools.iter().enumerate() {
            let Some(sp) = from.pools.iter().position(|n| n == pname) else {
                continue;
            };
            for f in PoolField::ALL {
                copy(src.pool_idx(sp, *f), dst.pool_idx(dp, *f), 1);
            }
            for c in histogram::Class::ALL {
                copy(
                    src.hist_idx(0, src.class_series(sp, c)),
                    dst.hist_idx(0, dst.class_series(dp, c)),
                    histogram::WORDS,
                );
            }
            let no_routes = Vec::new();
            let from_routes = from.routes.get(sp).unwrap_or(&no_routes);
            for (dr, rname) in to.routes.get(dp).unwrap_or(&no_routes).iter().enumerate() {
                let sr = from_routes.iter().position(|n| n == rname);
                if let (Some(si), Some(di)) = (
                    sr.and_then(|sr| src.route_idx(sp, sr)),
                    dst.route_idx(dp, dr),
                ) {
                    copy(si, di, 1);
                }
            }
            for (ds, sname) in to.servers[dp].iter().enumerate() {
                let Some(ss) = from.servers[sp].iter().position(|n| n == sname) else {
                    continue;
                };
                for f in ServerField::ALL {
                    copy(src.server_idx(sp, ss, *f), dst.server_idx(dp, ds, *f), 1);
                }
                copy(
                    src.hist_idx(0, src.server_series(sp, ss)),
                    dst.hist_idx(0, dst.server_series(dp, ds)),
                    histogram::WORDS,
                );
            }
        }
        out
    }
}

impl Region {
    /// The sum of the workers' slots (and of the carry slot when
    /// `with_carry`), gauges included when `gauges`.
    pub fn totals(&self, with_carry: bool, gauges: bool) -> Totals {
        let layout = self.layout();
        let mut out = Totals::zero(layout);
        let rules = rules(layout);
        let last = if with_carry {
            self.carry_slot()
        } else {
            self.slots() - 1
        };
        for slot in 0..=last {
            let words = self.words(slot, 0, layout.slot_words());
            for ((w, v), rule) in out.words.iter_mut().zip(words).zip(&rules) {
                let v = v.load(Ordering::Relaxed);
                match rule {
                    Rule::Add => *w = w.wrapping_add(v),
                    Rule::Gauge if gauges => *w = w.wrapping_add(v),
                    Rule::Max => *w = (*w).max(v),
                    Rule::Gauge | Rule::Skip => {}
                }
            }
        }
        out
    }

    /// Write `t` (in this region's layout) as the carry slot.
    pub fn set_carry(&self, t: &Totals) {
        assert_eq!(&t.layout, self.layout());
        let words = self.words(self.carry_slot(), 0, t.words.len());
        for ((w, v), rule) in words.iter().zip(&t.words).zip(rules(&t.layout)) {
            if rule != Rule::Skip {
                w.store(*v, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::histogram::Class;

    fn names(pools: &[(&str, &[&str])]) -> Names {
        Names {
            pools: pools.iter().map(|(p, _)| p.to_string()).collect(),
            servers: pools
                .iter()
                .map(|(_, s)| s.iter().map(|x| x.to_string()).collect())
                .collect(),
            routes: vec![Vec::new(); pools.len()],
        }
    }

    #[test]
    fn names_survive_the_environment() {
        let mut n = names(&[("alpha", &["a:1", "b name"]), ("β", &[]), ("front", &["x"])]);
        n.routes[2] = vec!["user:".into(), "*".into()];
        assert_eq!(Names::decode(&n.encode()), Some(n));
        assert_eq!(Names::decode("zz"), None);
    }

    #[test]
    fn route_counts_follow_their_labels() {
        let mut old = names(&[("front", &["a", "b"])]);
        old.routes[0] = vec!["user:".into(), "sess:".into(), "*".into()];
        let r = Region::new(old.layout(), 1).unwrap();
        r.slot(0).route_add(0, 0, 5);
        r.slot(0).route_add(0, 1, 7);
        r.slot(0).route_add(0, 2, 11);
        // A route added in front, one gone.
        let mut new = names(&[("other", &[]), ("front", &["a", "b"])]);
        new.routes[1] = vec!["user:vip:".into(), "user:".into(), "*".into()];
        let t = r.totals(true, false).remap(&old, &new);
        let r2 = Region::new(new.layout(), 1).unwrap();
        r2.set_carry(&t);
        assert_eq!(r2.route_sum(1, 0), 0);
        assert_eq!(r2.route_sum(1, 1), 5);
        assert_eq!(r2.route_sum(1, 2), 11);
    }

    #[test]
    fn totals_follow_names_into_a_new_layout() {
        let old = names(&[("p", &["s1", "s2"]), ("gone", &["g"])]);
        let r = Region::new(old.layout(), 2).unwrap();
        r.slot(0).server_add(0, 1, ServerField::Requests, 5);
        r.slot(1).server_add(0, 1, ServerField::Requests, 7);
        r.slot(1)
            .server_add(0, 1, ServerField::ServerConnections, 1);
        r.slot(0).pool_add(0, PoolField::ClientEof, 3);
        r.slot(0).pool_add(1, PoolField::ClientEof, 100);
        r.slot(0).worker_add(WorkerField::TotalConnections, 9);
        r.slot(1).record_latency(0, 1, Class::Read, 250);
        // The new configuration: server s2 first, a new server, no "gone".
        let new = names(&[("new", &["n"]), ("p", &["s2", "s3"])]);
        let t = r.totals(true, false).remap(&old, &new);
        let r2 = Region::new(new.layout(), 1).unwrap();
        r2.slot(0).server_add(1, 0, ServerField::Requests, 1);
        r2.set_carry(&t);
        assert_eq!(r2.server_sum(1, 0, ServerField::Requests), 13);
        assert_eq!(r2.server_sum(1, 1, ServerField::Requests), 0);
        assert_eq!(r2.server_sum(1, 0, ServerField::ServerConnections), 0);
        assert_eq!(r2.pool_sum(1, PoolField::ClientEof), 3);
        assert_eq!(r2.pool_sum(0, PoolField::ClientEof), 0);
        assert_eq!(r2.worker_sum(WorkerField::TotalConnections), 9);
        assert_eq!(r2.latency_server(1, 0, false).count, 1);
        assert_eq!(r2.latency_server(1, 0, false).max, 250);
        assert_eq!(r2.latency_class(1, Class::Read, false).count, 1);
        // The recent window is the live workers' only.
        assert_eq!(r2.latency_server(1, 0, true).count, 0);
        // Gauges come along from a live source.
        let live = r.totals(false, true).remap(&old, &new);
        r2.set_carry(&live);
        assert_eq!(r2.server_sum(1, 0, ServerField::ServerConnections), 1);
    }

    #[test]
    fn carry_adds_up_sources() {
        let n = names(&[("p", &["s"])]);
        let layout = n.layout();
        let a = Region::new(layout.clone(), 1).unwrap();
        a.slot(0).server_add(0, 0, ServerField::Responses, 2);
        a.slot(0).server_set(0, 0, ServerField::ServerEjectedAt, 50);
        let b = Region::new(layout.clone(), 1).unwrap();
        b.slot(0).server_add(0, 0, ServerField::Responses, 3);
        b.slot(0).server_set(0, 0, ServerField::ServerEjectedAt, 40);
        let mut t = Totals::zero(&layout);
        t.add(&a.totals(true, false), false);
        t.add(&b.totals(true, false), false);
        let c = Region::new(layout, 1).unwrap();
        c.set_carry(&t);
        assert_eq!(c.server_sum(0, 0, ServerField::Responses), 5);
        assert_eq!(c.server_sum(0, 0, ServerField::ServerEjectedAt), 50);
    }

    #[test]
    fn a_previous_binary_region_can_be_mapped_read_only() {
        let n = names(&[("p", &["s"])]);
        let a = Region::new(n.layout(), 2).unwrap();
        a.slot(1).server_add(0, 0, ServerField::Requests, 4);
        let fd = a.fd().try_clone().unwrap();
        let b = Region::open(fd, n.layout(), 2).unwrap();
        assert_eq!(b.server_sum(0, 0, ServerField::Requests), 4);
        a.slot(0).server_add(0, 0, ServerField::Requests, 1);
        assert_eq!(b.totals(true, false).remap(&n, &n), {
            let mut t = Totals::zero(&n.layout());
            t.add(&a.totals(true, false), false);
            t
        });
    }
}
