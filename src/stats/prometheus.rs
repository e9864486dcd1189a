//! Prometheus text exposition (format 0.0.4) of the counters, the latency
//! histograms and per-worker process metrics, served on the admin port's
//! `GET /metrics`.
//!
//! Histogram buckets are the fixed bounds of [`PROM_BOUNDS_US`]; a bucket
//! counts the values strictly below its bound at µs resolution.

use super::histogram::{Class, Snapshot, PROM_BOUNDS_US};
use super::host::HostInfo;
use super::shm::Region;
use super::{Kind, PoolField, ServerField, WorkerField};
use crate::config::Config;
use std::fmt::Write as _;

/// Escape a label value.
pub fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", help.replace('\n', " "));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A metric family's Prometheus name, type and HELP. The stats JSON keeps
/// twemproxy's field names; these follow Prometheus's conventions instead:
/// no word said twice (`walnut_server_eof_total`, not
/// `walnut_server_server_eof_total`), `_total` only on counters, the unit in
/// the name (`_bytes`, `_seconds`), and HELP that says what is counted.
/// The matches are exhaustive, so a new field cannot go out unnamed.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: "counter",
        help,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: "gauge",
        help,
    }
}

fn pool_family(f: PoolField) -> Family {
    match f {
        PoolField::ClientEof => counter(
            "walnut_pool_client_eof_total",
            "client connections closed by the client (EOF)",
        ),
        PoolField::ClientErr => counter(
            "walnut_pool_client_errors_total",
            "client connections closed on an error",
        ),
        PoolField::ClientConnections => {
            gauge("walnut_pool_client_connections", "client connections open")
        }
        PoolField::ServerEjects => counter(
            "walnut_pool_server_ejections_total",
            "times a server of the pool was ejected",
        ),
        PoolField::ForwardError => counter(
            "walnut_pool_forward_errors_total",
            "requests that could not be forwarded to a server",
        ),
        PoolField::Fragments => counter(
            "walnut_pool_fragments_total",
            "fragments multi-key requests were split into",
        ),
        PoolField::ZoneFailovers => counter(
            "walnut_pool_zone_failovers_total",
            "requests of a zone pool answered by a zone other than the local one (its server lost, or an error; a read's miss with zone_failover: miss)",
        ),
    }
}

fn server_family(f: ServerField) -> Family {
    match f {
        ServerField::ServerEof => counter(
            "walnut_server_eof_total",
            "server connections closed by the server (EOF)",
        ),
        ServerField::ServerErr => counter(
            "walnut_server_errors_total",
            "server connections closed on an error",
        ),
        ServerField::ServerTimedout => counter(
            "walnut_server_timeouts_total",
            "requests that timed out on the server",
        ),
        ServerField::ServerConnections => {
            gauge("walnut_server_connections", "server connections open")
        }
        ServerField::ServerEjectedAt => gauge(
            "walnut_server_ejected_timestamp_seconds",
            "when the server was last ejected, seconds since the epoch (0: never)",
        ),
        ServerField::ServerDown => gauge(
            "walnut_server_down_workers",
            "workers whose last connection or request to the server failed (0: up)",
        ),
        ServerField::Requests => counter(
            "walnut_server_requests_total",
            "requests sent to the server",
        ),
        ServerField::RequestBytes => counter(
            "walnut_server_request_bytes_total",
            "bytes of requests sent to the server",
        ),
        ServerField::Responses => counter(
            "walnut_server_responses_total",
            "replies received from the server",
        ),
        ServerField::ResponseBytes => counter(
            "walnut_server_response_bytes_total",
            "bytes of replies received from the server",
        ),
        ServerField::InQueue => gauge(
            "walnut_server_in_queue_requests",
            "requests waiting to be sent to the server",
        ),
        ServerField::InQueueBytes => gauge(
            "walnut_server_in_queue_bytes",
            "bytes of requests waiting to be sent to the server",
        ),
        ServerField::OutQueue => gauge(
            "walnut_server_out_queue_requests",
            "requests sent to the server and waiting for its reply",
        ),
        ServerField::OutQueueBytes => gauge(
            "walnut_server_out_queue_bytes",
            "bytes of requests sent to the server and waiting for its reply",
        ),
    }
}

/// `None` for fields that are not metrics (the loop heartbeat).
fn worker_family(f: WorkerField) -> Option<Family> {
    Some(match f {
        WorkerField::TotalConnections => counter(
            "walnut_worker_accepted_connections_total",
            "client connections the worker accepted",
        ),
        WorkerField::ServerConnects => counter(
            "walnut_worker_server_connects_total",
            "server connections the worker opened",
        ),
        WorkerField::CurrConnections => gauge(
            "walnut_worker_open_connections",
            "client connections open in the worker",
        ),
        WorkerField::AcceptEagain => counter(
            "walnut_worker_accept_eagain_total",
            "wakeups to accept that found no connection (thundering herd)",
        ),
        WorkerField::Requests => counter(
            "walnut_worker_requests_total",
            "client requests the worker read",
        ),
        WorkerField::OutputBytes => gauge(
            "walnut_worker_output_buffer_bytes",
            "bytes of replies buffered for the worker's clients",
        ),
        WorkerField::BudgetEvictions => counter(
            "walnut_worker_budget_evictions_total",
            "clients closed to keep buffered replies under buffer_budget",
        ),
        WorkerField::HandedOut => counter(
            "walnut_worker_handed_out_connections_total",
            "client connections handed to a successor (reload, upgrade)",
        ),
        WorkerField::HandedIn => counter(
            "walnut_worker_handed_in_connections_total",
            "client connections taken over from a predecessor",
        ),
        WorkerField::CmdGet => counter(
            "walnut_worker_memcache_get_keys_total",
            "keys asked for by memcached retrievals",
        ),
        WorkerField::CmdSet => counter(
            "walnut_worker_memcache_set_requests_total",
            "memcached storage requests",
        ),
        WorkerField::GetHits => counter(
            "walnut_worker_memcache_get_hits_total",
            "keys memcached retrievals found",
        ),
        WorkerField::ShadowDropped => counter(
            "walnut_worker_shadow_dropped_total",
            "requests not copied to a shadow pool: its queue was full or its server down",
        ),
        WorkerField::FleetHeld => counter(
            "walnut_worker_fleet_held_requests_total",
            "requests held for the fleet: a key moving before its barrier passed, or the member catching up",
        ),
        WorkerField::FleetHeldUs => counter(
            "walnut_worker_fleet_held_seconds_total",
            "time requests were held for the fleet, summed",
        ),
        WorkerField::FleetRefused => counter(
            "walnut_worker_fleet_refused_requests_total",
            "requests refused for the fleet (key moving, membership lapsed), at once or after the hold bound",
        ),
        WorkerField::Pulled => counter(
            "walnut_worker_pulled_keys_total",
            "keys a request of a migrating pool pulled from an old owner before it ran",
        ),
        WorkerField::MovedReads => counter(
            "walnut_worker_moved_reads_total",
            "GETs of a moved key read where the key is instead of pulled",
        ),
        WorkerField::MovedRereads => counter(
            "walnut_worker_moved_rereads_total",
            "times a GET of a moved key went on to the next server (a nil, or the server not reached)",
        ),
        WorkerField::Heartbeat => return None,
    })
}

/// A worker field's value as its family exposes it: the time held for
/// the fleet in seconds, as the family's name says.
fn worker_value(f: WorkerField, v: u64) -> String {
    match f {
        WorkerField::FleetHeldUs => format!("{}", v as f64 / 1e6),
        _ => value(f.kind(), v),
    }
}

/// A field's value as the family exposes it: timestamps in seconds.
fn value(kind: Kind, v: u64) -> String {
    match kind {
        Kind::Timestamp => format!("{}", v as f64 / 1e6),
        _ => v.to_string(),
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

/// Days until each loaded TLS certificate expires (the listener's and
/// the one presented to servers), so an alert fires before it does.
fn tls_expiry(config: &Config, out: &mut String) {
    let certs: Vec<(&str, &str, i64)> = config
        .pools
        .iter()
        .flat_map(|p| {
            let sec = &p.security;
            let listen = sec.listen_tls.as_ref().and_then(|t| t.not_after);
            let server = sec.server_tls.as_ref().and_then(|t| t.not_after);
            [("listen", listen), ("server", server)]
                .into_iter()
                .filter_map(move |(side, t)| t.map(|t| (p.name.as_str(), side, t)))
        })
        .collect();
    if certs.is_empty() {
        return;
    }
    family(
        out,
        "walnut_tls_certificate_days_left",
        "gauge",
        "whole days until a loaded TLS certificate expires (negative: expired)",
    );
    for (pool, side, not_after) in certs {
        let _ = writeln!(
            out,
            "walnut_tls_certificate_days_left{{pool=\"{}\",side=\"{side}\"}} {}",
            esc(pool),
            crate::net::tls::days_left(not_after)
        );
    }
}

/// Render every metric.
pub fn render(config: &Config, region: &Region, info: &HostInfo) -> String {
    let mut out = String::with_capacity(16 * 1024);
    process_metrics(&mut out, config, region, info);
    tls_expiry(config, &mut out);
    pool_metrics(&mut out, config, region);
    server_metrics(&mut out, config, region);
    latency_metrics(&mut out, config, region);
    worker_metrics(&mut out, region, info);
    out
}

/// The process as a whole: uptime, version, generation, client connections.
fn process_metrics(out: &mut String, config: &Config, region: &Region, info: &HostInfo) {
    family(
        out,
        "walnut_uptime_seconds",
        "gauge",
        "seconds since the master started",
    );
    let _ = writeln!(out, "walnut_uptime_seconds {}", info.uptime_secs);
    family(
        out,
        "walnut_build_info",
        "gauge",
        "always 1; the version label is walnut's version",
    );
    let _ = writeln!(
        out,
        "walnut_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    family(
        out,
        "walnut_generation",
        "gauge",
        "configuration generation of the running workers",
    );
    let _ = writeln!(out, "walnut_generation {}", info.generation);
    let (total, curr) = super::json::connections(config, region);
    family(
        out,
        "walnut_accepted_connections_total",
        "counter",
        "client connections accepted (twemproxy total_connections)",
    );
    let _ = writeln!(out, "walnut_accepted_connections_total {total}");
    family(
        out,
        "walnut_open_connections",
        "gauge",
        "client connections open (twemproxy curr_connections)",
    );
    let _ = writeln!(out, "walnut_open_connections {curr}");
}

/// Every pool counter per pool, and a route pool's requests per route.
fn pool_metrics(out: &mut String, config: &Config, region: &Region) {
    for f in PoolField::ALL {
        let fam = pool_family(*f);
        family(out, fam.name, fam.kind, fam.help);
        for (pi, p) in config.pools.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}{{pool=\"{}\"}} {}",
                fam.name,
                esc(&p.name),
                value(f.kind(), region.pool_sum(pi, *f))
            );
        }
    }
    let routed = config.pools.iter().any(|p| p.routing.is_route_pool());
    if routed {
        family(
        out,
        "walnut_route_requests_total",
        "counter",
        "requests of a route pool per route (key prefix; `*`: the default route), once per route a request's keys take",
    );
        for (pi, p) in config.pools.iter().enumerate() {
            for (ri, r) in p.routing.routes.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "walnut_route_requests_total{{pool=\"{}\",route=\"{}\"}} {}",
                    esc(&p.name),
                    esc(&super::carry::route_label(r)),
                    region.route_sum(pi, ri)
                );
            }
        }
    }
}

/// Every server counter per server.
fn server_metrics(out: &mut String, config: &Config, region: &Region) {
    for f in ServerField::ALL {
        let fam = server_family(*f);
        family(out, fam.name, fam.kind, fam.help);
        for (pi, p) in config.pools.iter().enumerate() {
            for (si, s) in p.servers.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{}{{pool=\"{}\",server=\"{}\"}} {}",
                    fam.name,
                    esc(&p.name),
                    esc(&s.stats_name()),
                    value(f.kind(), region.server_sum(pi, si, *f))
                );
            }
        }
    }
}

/// Latency histograms: per pool and command class, and per server.
fn latency_metrics(out: &mut String, config: &Config, region: &Region) {
    let name = "walnut_request_duration_seconds";
    family(
        out,
        name,
        "histogram",
        "latency from request queued to reply received, per pool and command class",
    );
    for (pi, p) in config.pools.iter().enumerate() {
        for c in Class::ALL {
            let labels = format!("pool=\"{}\",class=\"{}\"", esc(&p.name), c.name());
            histogram(out, name, &labels, &region.latency_class(pi, c, false));
        }
    }
    let name = "walnut_server_request_duration_seconds";
    family(
        out,
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
            histogram(out, name, &labels, &region.latency_server(pi, si, false));
        }
    }
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
        let Some(fam) = worker_family(*f) else {
            continue;
        };
        family(out, fam.name, fam.kind, fam.help);
        for w in &info.workers {
            if w.index < region.slots() {
                let _ = writeln!(
                    out,
                    "{}{{worker=\"{}\"}} {}",
                    fam.name,
                    w.index,
                    worker_value(*f, region.worker_get(w.index, *f))
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
    fn family_names_follow_prometheus_conventions() {
        let mut names: Vec<Family> = PoolField::ALL.iter().map(|f| pool_family(*f)).collect();
        names.extend(ServerField::ALL.iter().map(|f| server_family(*f)));
        names.extend(WorkerField::ALL.iter().filter_map(|f| worker_family(*f)));
        let mut seen = std::collections::HashSet::new();
        for fam in &names {
            assert!(seen.insert(fam.name), "{} twice", fam.name);
            assert!(fam.name.starts_with("walnut_"), "{}", fam.name);
            assert_eq!(
                fam.kind == "counter",
                fam.name.ends_with("_total"),
                "{}",
                fam.name
            );
            assert!(
                !fam.help.is_empty() && !fam.help.starts_with('#'),
                "{}",
                fam.name
            );
            let words: Vec<&str> = fam.name.split('_').collect();
            for w in words.windows(2) {
                assert_ne!(w[0], w[1], "{} repeats a word", fam.name);
            }
            for (i, w) in words.iter().enumerate() {
                assert!(!words[i + 1..].contains(w), "{} repeats '{w}'", fam.name);
            }
        }
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
