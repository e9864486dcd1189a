//! The admin commands.

use super::request::{Framing, Reply, Request};
use super::{AdminServer, Host};
use crate::config::show;
use crate::hash::fnv::fnv1a64;
use crate::stats::histogram::{Class, Snapshot};
use crate::stats::{PoolField, ServerField};
use std::fmt::Write as _;

/// Parameters `config set` accepts (besides `pool.NAME.timeout`).
const PARAMS: &[&str] = crate::config::runtime::NAMES;

const HELP: &str = "commands:
  status                      master, workers, configuration file
  stats                       the stats JSON (as on the stats port)
  pools                       per pool: requests, errors, latency
  servers                     per server: state, connections, latency
  slowlog get [N] | len | reset
  hotkeys [POOL] [N]          most requested keys per pool over the last second (sampled)
  migration [pause|resume|abort POOL]
                              progress of online scale-out, and its control
  fleet                       this instance's fleet (--etcd): revision applied, members
  config show                 the running configuration as YAML (walnut -t accepts it)
  config get PARAM            one value: KEY of _walnut, or pool.NAME.KEY
  config set PARAM VALUE      log_level, slowlog_threshold (us), client_idle_timeout (ms),
                              tcp_quickack, latency (on/off), pool.NAME.timeout (ms),
                              client_output_limit (bytes, k/m/g), client_max_inflight,
                              reply_hold (us, or 1ms; 0 = off)
  reload                      re-read the configuration (as SIGHUP)
  ping | help | quit
HTTP: GET /metrics (Prometheus), GET /stats (JSON), GET /config (config show, as a file)";

/// Run one request; the reply and whether to close afterwards.
pub fn run(srv: &mut AdminServer, host: &mut dyn Host, req: &Request) -> (Reply, bool) {
    if req.framing == Framing::Http {
        let path = req.args.get(1).map(String::as_str).unwrap_or("/");
        let path = path.split('?').next().unwrap_or(path);
        let reply = match path {
            "/metrics" => Reply::Http(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                metrics(host),
            ),
            "/stats" => Reply::Http(200, "application/json", host.stats_json()),
            // The running configuration alone (no END line), to save and
            // load again: `curl -s 127.0.0.1:22223/config > walnut.yml`.
            "/config" => Reply::Http(200, "application/yaml", config_show(host) + "\n"),
            _ => Reply::Http(404, "text/plain", "not found\n".into()),
        };
        return (reply, true);
    }
    let args: Vec<&str> = req.args.iter().map(String::as_str).collect();
    let cmd = args[0].to_ascii_lowercase();
    let reply = match cmd.as_str() {
        "quit" | "exit" => return (Reply::Ok, true),
        "ping" => Reply::Text("PONG".into()),
        "help" => Reply::Text(HELP.into()),
        "status" => Reply::Text(status(host)),
        "stats" => Reply::Text(host.stats_json().trim_end().to_string()),
        "metrics" => Reply::Text(metrics(host)),
        "pools" => Reply::Text(pools(host)),
        "servers" => Reply::Text(servers(host)),
        "slowlog" => slowlog(srv, host, &args[1..]),
        "hotkeys" => match (host.config(), host.region()) {
            (Some(c), Some(r)) => match super::hotkeys::command(c, r, &args[1..]) {
                Ok(text) => Reply::Text(text),
                Err(e) => Reply::Err(e),
            },
            _ => Reply::Err("not running".into()),
        },
        "config" => config(host, &args[1..]),
        "migration" => match args.len() {
            1 => {
                let lines = host.migrations();
                if lines.is_empty() {
                    Reply::Text("no migration".into())
                } else {
                    Reply::Text(lines.join("\n"))
                }
            }
            3 => match host.migration_control(&args[1].to_ascii_lowercase(), args[2]) {
                Ok(()) => Reply::Ok,
                Err(e) => Reply::Err(e),
            },
            _ => Reply::Err("usage: migration [pause|resume|abort POOL]".into()),
        },
        "fleet" => match host.fleet() {
            Some(lines) => Reply::Text(lines.join("\n")),
            None => Reply::Err("not in a fleet (started without --etcd)".into()),
        },
        "reload" => match host.reload() {
            Ok(changes) if changes.is_empty() => Reply::Ok,
            Ok(changes) => Reply::Text(changes.join("\n")),
            Err(e) => Reply::Err(e),
        },
        _ => Reply::Err(format!("unknown command '{}' (try help)", args[0])),
    };
    (reply, false)
}

fn metrics(host: &dyn Host) -> String {
    match (host.config(), host.region()) {
        (Some(c), Some(r)) => {
            crate::stats::prometheus::render(c, r, &host.info())
                + &super::hotkeys::metrics(c, r)
                + &host.extra_metrics()
        }
        _ => String::new(),
    }
}

fn status(host: &dyn Host) -> String {
    let info = host.info();
    let mut s = String::new();
    // The running configuration's checksum (of the text it was loaded
    // from); the file's own only when it changed on disk since.
    let running = host.config().map(|c| c.checksum);
    let on_disk = std::fs::read(&info.conf_path).map(|b| fnv1a64(&b));
    let _ = writeln!(s, "version: {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(s, "master_pid: {}", info.master_pid);
    let _ = writeln!(s, "uptime: {}", info.uptime_secs);
    let _ = writeln!(s, "config_file: {}", info.conf_path.display());
    if let Some(sum) = running {
        let _ = writeln!(s, "config_checksum: fnv1a64:{sum:016x}");
    }
    match on_disk {
        Ok(disk) if Some(disk) == running => {}
        Ok(disk) => {
            let _ = writeln!(
                s,
                "config_file_checksum: fnv1a64:{disk:016x} (the file changed since it was loaded: reload to apply it)"
            );
        }
        Err(e) => {
            let _ = writeln!(s, "config_file_checksum: unreadable ({e})");
        }
    }
    let _ = writeln!(s, "generation: {}", info.generation);
    let _ = writeln!(s, "workers: {}", info.workers.len());
    let _ = writeln!(s, "draining_workers: {}", info.draining);
    for w in &info.workers {
        let _ = writeln!(
            s,
            "worker {}: pid={} state={} uptime={} respawns={}",
            w.index,
            w.pid,
            if w.alive { "running" } else { "dead" },
            w.uptime_secs,
            w.respawns
        );
    }
    for (k, v) in &info.runtime {
        let _ = writeln!(s, "runtime_set: {k}={v}");
    }
    s
}

fn lat(s: &Snapshot) -> String {
    format!(
        "count={} avg_us={} p50_us={} p90_us={} p95_us={} p98_us={} p99_us={} p999_us={} max_us={}",
        s.count,
        s.mean(),
        s.quantile(0.5),
        s.quantile(0.9),
        s.quantile(0.95),
        s.quantile(0.98),
        s.quantile(0.99),
        s.quantile(0.999),
        s.max
    )
}

fn pools(host: &dyn Host) -> String {
    let (Some(cfg), Some(r)) = (host.config(), host.region()) else {
        return String::new();
    };
    let mut s = String::new();
    for (pi, p) in cfg.pools.iter().enumerate() {
        let mut requests = 0;
        let mut errors = r.pool_sum(pi, PoolField::ForwardError);
        for si in 0..p.servers.len() {
            requests += r.server_sum(pi, si, ServerField::Requests);
            errors += r.server_sum(pi, si, ServerField::ServerErr)
                + r.server_sum(pi, si, ServerField::ServerTimedout);
        }
        let _ = writeln!(
            s,
            "pool={} protocol={} servers={} client_connections={} requests={} errors={} window=recent {}",
            p.name,
            if p.redis { "redis" } else { "memcache" },
            p.servers.len(),
            r.pool_sum(pi, PoolField::ClientConnections),
            requests,
            errors,
            lat(&r.latency_pool(pi, true))
        );
        for c in Class::ALL {
            let l = r.latency_class(pi, c, false);
            if l.count > 0 {
                let _ = writeln!(
                    s,
                    "pool={} class={} window=lifetime {}",
                    p.name,
                    c.name(),
                    lat(&l)
                );
            }
        }
    }
    s
}

fn servers(host: &dyn Host) -> String {
    let (Some(cfg), Some(r)) = (host.config(), host.region()) else {
        return String::new();
    };
    let now = crate::util::epoch_us();
    let mut s = String::new();
    for (pi, p) in cfg.pools.iter().enumerate() {
        for (si, sv) in p.servers.iter().enumerate() {
            let ejected_at = r.server_sum(pi, si, ServerField::ServerEjectedAt);
            let ejected = p.auto_eject_hosts
                && ejected_at > 0
                && now < ejected_at + p.server_retry_timeout_ms * 1000;
            let _ = writeln!(
                s,
                "pool={} server={} state={} ejected_at={} connections={} requests={} responses={} server_err={} server_timedout={} server_eof={} {}",
                p.name,
                sv.stats_name(),
                if ejected {
                    "ejected"
                } else if r.server_sum(pi, si, ServerField::ServerDown) > 0 {
                    "down"
                } else {
                    "up"
                },
                ejected_at,
                r.server_sum(pi, si, ServerField::ServerConnections),
                r.server_sum(pi, si, ServerField::Requests),
                r.server_sum(pi, si, ServerField::Responses),
                r.server_sum(pi, si, ServerField::ServerErr),
                r.server_sum(pi, si, ServerField::ServerTimedout),
                r.server_sum(pi, si, ServerField::ServerEof),
                lat(&r.latency_server(pi, si, false))
            );
        }
    }
    s
}

fn printable(key: &[u8]) -> String {
    let mut s = String::new();
    for &b in key {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' {
            s.push(b as char);
        } else {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    s
}

fn slowlog(srv: &mut AdminServer, host: &dyn Host, args: &[&str]) -> Reply {
    let (Some(cfg), Some(r)) = (host.config(), host.region()) else {
        return Reply::Err("not running".into());
    };
    let gen = host.info().generation;
    if srv.slowlog_base.0 != gen {
        srv.slowlog_base = (gen, vec![0; r.slots()]);
    }
    let base = |slot: usize| srv.slowlog_base.1.get(slot).copied().unwrap_or(0);
    let sub = args.first().map(|a| a.to_ascii_lowercase());
    match sub.as_deref() {
        Some("reset") => {
            srv.slowlog_base.1 = (0..r.slots()).map(|s| r.slowlog(s).written()).collect();
            Reply::Ok
        }
        Some("len") => {
            let n: u64 = (0..r.slots())
                .map(|s| r.slowlog(s).read(base(s)).len() as u64)
                .sum();
            Reply::Text(n.to_string())
        }
        Some("get") | None => {
            let n = match args.get(1).map(|a| a.parse::<usize>()) {
                None => 10,
                Some(Ok(n)) => n,
                Some(Err(_)) => return Reply::Err("N must be a number".into()),
            };
            let mut all: Vec<(usize, crate::stats::slowlog::Entry)> = Vec::new();
            for slot in 0..r.slots() {
                all.extend(
                    r.slowlog(slot)
                        .read(base(slot))
                        .into_iter()
                        .map(|e| (slot, e)),
                );
            }
            all.sort_by_key(|e| std::cmp::Reverse(e.1.time_us));
            let mut s = String::new();
            for (slot, e) in all.into_iter().take(n) {
                let pool = cfg.pools.get(e.pool as usize);
                let server = pool
                    .and_then(|p| p.servers.get(e.server as usize))
                    .map(|sv| sv.stats_name())
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "id={}.{} time_us={} latency_us={} pool={} server={} cmd={} key=\"{}\" size={}",
                    slot,
                    e.seq,
                    e.time_us,
                    e.latency_us,
                    pool.map_or("", |p| p.name.as_str()),
                    server,
                    e.cmd,
                    printable(&e.key),
                    e.size
                );
            }
            Reply::Text(s)
        }
        Some(other) => Reply::Err(format!("unknown slowlog subcommand '{other}'")),
    }
}

fn config(host: &mut dyn Host, args: &[&str]) -> Reply {
    match args.first().map(|a| a.to_ascii_lowercase()).as_deref() {
        Some("show") => Reply::Text(config_show(host)),
        Some("get") => match args.get(1) {
            Some(param) => config_get(host, param),
            None => Reply::Err("usage: config get PARAM (e.g. pool.NAME.timeout, workers)".into()),
        },
        Some("set") => {
            let (Some(key), Some(value)) = (args.get(1), args.get(2)) else {
                return Reply::Err("usage: config set PARAM VALUE".into());
            };
            let pool_param = key
                .strip_prefix("pool.")
                .and_then(|r| r.rsplit_once('.'))
                .is_some_and(|(_, p)| p == "timeout");
            if !PARAMS.contains(key) && !pool_param {
                return Reply::Err(format!(
                    "unknown parameter '{key}': expected one of {}, pool.NAME.timeout",
                    PARAMS.join(", ")
                ));
            }
            let errs = host.set_param(key, value);
            if errs.is_empty() {
                Reply::Ok
            } else {
                Reply::Err(errs.join("; "))
            }
        }
        _ => Reply::Err("usage: config show | config get PARAM | config set PARAM VALUE".into()),
    }
}

fn config_show(host: &dyn Host) -> String {
    let Some(cfg) = host.config() else {
        return String::new();
    };
    let info = host.info();
    let rt = show::Runtime {
        log_level: crate::log::level(),
        set: &info.runtime,
    };
    show::to_yaml(cfg, &rt).trim_end().to_string()
}

fn config_get(host: &dyn Host, param: &str) -> Reply {
    let Some(cfg) = host.config() else {
        return Reply::Err("no configuration loaded".into());
    };
    let info = host.info();
    let rt = show::Runtime {
        log_level: crate::log::level(),
        set: &info.runtime,
    };
    match show::get(cfg, &rt, param) {
        Ok(v) => Reply::Text(v),
        Err(e) => Reply::Err(e),
    }
}
