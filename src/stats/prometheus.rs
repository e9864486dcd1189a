//! Prometheus text exposition (format 0.0.4) of the counters, the latency
//! histograms and per-worker process metrics, served on the admin port's
//! `GET /metrics`.
//!
//! Histogram buckets are the fixed bounds of [`PROM_BOUNDS_US`]; a bucket
//! counts the values strictly below its bound at µs resolution.

use super::histogram::{Class, Snapshot, PROM_BOUNDS_US};
use super::shm::Region;
use super::{Kind, PoolField, ServerField, WorkerField};
use crate::admin::HostInfo;
use crate::config::Config;
use std::fmt::Write as _;

/// Escape a label value.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", help.replace('\n', " "));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn metric_name(prefix: &str, field: &str, kind: Kind) -> (String, &'static str) {
    match kind {
        Kind::Counter => (format!("{prefix}_{field}_total"), "counter"),
        _ => (format!("{prefix}_{field}"), "gauge"),
    }
}

fn histogram(out: &mut String, name: &str, labels: &str, s: &Snapshot) {
    let cum = s.cumulative();
    for (b, n) in PROM_BOUNDS_US.iter().zip(cum) {
        let le = *b as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", s.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", s.sum as f64 / 1e6);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", s.count);
}

/// CPU seconds (user + system) and resident bytes of a process, from
/// /proc/PID/stat and /proc/PID/statm.
pub fn proc_usage(pid: i32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    Some(((utime + stime) as f64 / hz, pages * page))
}

/// Render every metric.
pub fn render(config: &Config, region: &Region, info: &HostInfo) -> String {
    let mut out = String::with_capacity(16 * 1024);
    family(
        &mut out,
        "walnut_uptime_seconds",
        "gauge",
        "seconds since the master started",
    );
    let _ = writeln!(out, "walnut_uptime_seconds {}", info.uptime_secs);
    family(
        &mut out,
        "walnut_generation",
        "gauge",
        "configuration generation of the running workers",
    );
    let _ = writeln!(out, "walnut_generation {}", info.generation);
    let (total, curr) = super::json::connections(config, region);
    family(
        &mut out,
        "walnut_total_connections",
        "counter",
        "connections made (twemproxy total_connections)",
    );
    let _ = writeln!(out, "walnut_total_connections {total}");
    family(
        &mut out,
        "walnut_curr_connections",
        "gauge",
        "connections open (twemproxy curr_connections)",
    );
    let _ = writeln!(out, "walnut_curr_connections {curr}");

    for f in PoolField::ALL {
        let (name, kind) = metric_name("walnut_pool", f.name(), f.kind());
        family(&mut out, &name, kind, f.description());
        for (pi, p) in config.pools.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}{{pool=\"{}\"}} {}",
                esc(&p.name),
                region.pool_sum(pi, *f)
            );
        }
    }
    for f in ServerField::ALL {
        let (name, kind) = metric_name("walnut_server", f.name(), f.kind());
        family(&mut out, &name, kind, f.description());
        for (pi, p) in config.pools.iter().enumerate() {
            for (si, s) in p.servers.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{{pool=\"{}\",server=\"{}\"}} {}",
                    esc(&p.name),
                    esc(&s.stats_name()),
                    region.server_sum(pi, si, *f)
                );
            }
        }
    }

    let name = "walnut_request_duration_seconds";
    family(
        &mut out,
        name,
        "histogram",
        "latency from request queued to reply received, per pool and command class",
    );
    for (pi, p) in config.pools.iter().enumerate() {
        for c in Class::ALL {
            let labels = format!("pool=\"{}\",class=\"{}\"", esc(&p.name), c.name());
            histogram(&mut out, name, &labels, &region.latency_class(pi, c, false));
        }
    }
    let name = "walnut_server_request_duration_seconds";
    family(
        &mut out,
        name,
        "histogram",
        "latency from request queued to reply received, per server",
    );
    for (pi, p) in config.pools.iter().enumerate() {
        for (si, s) in p.servers.iter().enumerate() {
            let labels = format!(
                "pool=\"{}\",server=\"{}\"",
                esc(&p.name),
                esc(&s.stats_name())
            );
            histogram(
                &mut out,
                name,
                &labels,
                &region.latency_server(pi, si, false),
            );
        }
    }

    worker_metrics(&mut out, region, info);
    out
}

fn worker_metrics(out: &mut String, region: &Region, info: &HostInfo) {
    let usage: Vec<Option<(f64, u64)>> = info
        .workers
        .iter()
        .map(|w| if w.alive { proc_usage(w.pid) } else { None })
        .collect();
    family(
        out,
        "walnut_worker_up",
        "gauge",
        "1 when the worker process is running",
    );
    for w in &info.workers {
        let _ = writeln!(
            out,
            "walnut_worker_up{{worker=\"{}\",pid=\"{}\"}} {}",
            w.index,
            w.pid,
            u8::from(w.alive)
        );
    }
    family(
        out,
        "walnut_worker_respawns_total",
        "counter",
        "times the worker was restarted after dying",
    );
    for w in &info.workers {
        let _ = writeln!(
            out,
            "walnut_worker_respawns_total{{worker=\"{}\"}} {}",
            w.index, w.respawns
        );
    }
    family(
        out,
        "walnut_worker_cpu_seconds_total",
        "counter",
        "user + system CPU time of the worker process",
    );
    for (w, u) in info.workers.iter().zip(&usage) {
        if let Some((cpu, _)) = u {
            let _ = writeln!(
                out,
                "walnut_worker_cpu_seconds_total{{worker=\"{}\"}} {cpu}",
                w.index
            );
        }
    }
    family(
        out,
        "walnut_worker_resident_memory_bytes",
        "gauge",
        "resident set size of the worker process",
    );
    for (w, u) in info.workers.iter().zip(&usage) {
        if let Some((_, rss)) = u {
            let _ = writeln!(
                out,
                "walnut_worker_resident_memory_bytes{{worker=\"{}\"}} {rss}",
                w.index
            );
        }
    }
    for f in WorkerField::ALL {
        if *f == WorkerField::Heartbeat {
            continue;
        }
        let (name, kind) = metric_name("walnut_worker", f.name(), f.kind());
        let name = name.replace("_total_total", "_total");
        family(out, &name, kind, f.description());
        for w in &info.workers {
            if w.index < region.slots() {
                let _ = writeln!(
                    out,
                    "{name}{{worker=\"{}\"}} {}",
                    w.index,
                    region.worker_get(w.index, *f)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_usage() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let me = std::process::id() as i32;
        let (cpu, rss) = proc_usage(me).unwrap();
        assert!(cpu >= 0.0 && rss > 0);
        assert!(proc_usage(-5).is_none());
    }

    #[test]
    fn histogram_lines() {
        let mut s = Snapshot::default();
        s.record(150);
        s.record(20_000);
        let mut out = String::new();
        histogram(&mut out, "h", "pool=\"p\"", &s);
        assert!(out.contains("h_bucket{pool=\"p\",le=\"0.0001\"} 0\n"));
        assert!(out.contains("h_bucket{pool=\"p\",le=\"0.00025\"} 1\n"));
        assert!(out.contains("h_bucket{pool=\"p\",le=\"0.025\"} 2\n"));
        assert!(out.contains("h_bucket{pool=\"p\",le=\"+Inf\"} 2\n"));
        assert!(out.contains("h_count{pool=\"p\"} 2\n"));
        assert!(out.contains("h_sum{pool=\"p\"} 0.02015\n"));
    }
}
