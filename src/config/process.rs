//! The reserved `_walnut` section: settings of the process as a whole.

use super::addr::parse_uint;
use super::scalar::{parse_bool, parse_micros, parse_millis, parse_size, Report};
use super::yaml::{RawSection, RawValue, Scalar};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// Name of the reserved top-level section.
pub const PROCESS_SECTION: &str = "_walnut";

/// Keys the `_walnut` section accepts.
pub const PROCESS_KEYS: [&str; 12] = [
    "workers",
    "listener",
    "cpu_affinity",
    "admin",
    "tcp_quickack",
    "accept_mutex_delay",
    "graceful_timeout",
    "log_level",
    "max_connections",
    "buffer_budget",
    "slowlog_threshold",
    "reply_hold",
];

/// Default admin port address (loopback only).
pub const DEFAULT_ADMIN: &str = "127.0.0.1:22223";

/// Default slow-log threshold: 10 ms.
pub const DEFAULT_SLOWLOG_US: u64 = 10_000;

/// Default `reply_hold`: 200 µs.
pub const DEFAULT_REPLY_HOLD_US: u64 = 200;

/// Highest log level (twemproxy's LOG_PVERB).
pub const LOG_LEVEL_MAX: u8 = 11;

/// Most workers accepted.
pub const WORKERS_MAX: usize = 1024;

/// How many worker processes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// One per online CPU.
    Auto,
    /// Exactly this many (at least 1).
    N(usize),
}

impl FromStr for Workers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(Workers::Auto);
        }
        match parse_uint(s).map(|n| n as usize) {
            Some(n) if (1..=WORKERS_MAX).contains(&n) => Ok(Workers::N(n)),
            _ => Err(format!(
                "invalid workers '{s}': expected auto or a number from 1 to {WORKERS_MAX}"
            )),
        }
    }
}

/// How workers share a listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerMode {
    /// One SO_REUSEPORT socket per worker.
    Reuseport,
    /// One shared socket, EPOLLEXCLUSIVE wakeups.
    EpollExclusive,
    /// One shared socket guarded by an accept mutex in shared memory.
    AcceptMutex,
}

impl FromStr for ListenerMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reuseport" => Ok(ListenerMode::Reuseport),
            "epoll_exclusive" => Ok(ListenerMode::EpollExclusive),
            "accept_mutex" => Ok(ListenerMode::AcceptMutex),
            _ => Err(format!(
                "invalid listener '{s}': expected reuseport, epoll_exclusive or accept_mutex"
            )),
        }
    }
}

/// Which CPUs workers are pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuAffinity {
    /// No pinning.
    None,
    /// Worker i on CPU i (modulo the CPU count).
    Auto,
    /// Worker i on the i-th CPU of the list (cycling).
    List(Vec<usize>),
}

impl FromStr for CpuAffinity {
    type Err = String;
    /// `none`, `auto`, or CPUs separated by commas or blanks, with ranges:
    /// `0,2,4-7`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "off" => return Ok(CpuAffinity::None),
            "auto" => return Ok(CpuAffinity::Auto),
            _ => {}
        }
        let bad = || {
            format!("invalid cpu_affinity '{s}': expected auto, none or a CPU list like 0,1,4-7")
        };
        let mut cpus = Vec::new();
        for part in s.split([',', ' ']).filter(|p| !p.is_empty()) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let lo = parse_uint(lo).ok_or_else(bad)? as usize;
            let hi = parse_uint(hi).ok_or_else(bad)? as usize;
            if hi < lo || hi - lo >= 4096 || hi >= 4096 {
                return Err(bad());
            }
            cpus.extend(lo..=hi);
        }
        if cpus.is_empty() {
            return Err(bad());
        }
        Ok(CpuAffinity::List(cpus))
    }
}

/// Settings of the process as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessConfig {
    /// `workers:` number of worker processes (default 1, as twemproxy).
    pub workers: Workers,
    /// `listener:` port sharing mode (default reuseport).
    pub listener: ListenerMode,
    /// `cpu_affinity:` worker pinning (default none).
    pub cpu_affinity: CpuAffinity,
    /// `admin:` host:port of the admin port (default 127.0.0.1:22223;
    /// `off` disables it).
    pub admin: Option<String>,
    /// `tcp_quickack:` set TCP_QUICKACK after reads (default true).
    pub tcp_quickack: bool,
    /// `accept_mutex_delay:` ms a worker waits before retrying the accept
    /// mutex (default 500).
    pub accept_mutex_delay_ms: u64,
    /// `graceful_timeout:` ms a graceful stop waits for in-flight requests
    /// (default 30000).
    pub graceful_timeout_ms: u64,
    /// `max_connections:` client connections one worker holds before it
    /// stops accepting (resumes below 90%); 0 = no limit (default).
    pub max_connections: usize,
    /// `buffer_budget:` bytes of client replies one worker buffers; over
    /// it the clients holding the most are closed until below 90%
    /// (default 1g; 0 = no budget).
    pub buffer_budget: usize,
    /// `log_level:` 0..=11, overriding the default of `-v`.
    pub log_level: Option<u8>,
    /// `slowlog_threshold:` requests slower than this many µs go to the
    /// slow log (default 10 ms; 0 disables). Accepts `us`, `ms`, `s`.
    pub slowlog_threshold_us: u64,
    /// `reply_hold:` how long, at most, replies already queued for a
    /// client that pipelined a batch of requests wait for the rest of the
    /// batch's replies, so that the batch goes out in one write (default
    /// 200 µs; 0 writes every reply as soon as it is next in line).
    /// Accepts `us`, `ms`, `s`.
    pub reply_hold_us: u64,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            workers: Workers::N(1),
            listener: ListenerMode::Reuseport,
            cpu_affinity: CpuAffinity::None,
            admin: None,
            tcp_quickack: true,
            accept_mutex_delay_ms: 500,
            graceful_timeout_ms: 30_000,
            max_connections: 0,
            buffer_budget: 1 << 30,
            log_level: None,
            slowlog_threshold_us: DEFAULT_SLOWLOG_US,
            reply_hold_us: DEFAULT_REPLY_HOLD_US,
        }
    }
}

/// Checks an admin address `host:port` (or `off`).
pub fn parse_admin(s: &str) -> Result<String, String> {
    if s == "off" {
        return Ok(s.to_string());
    }
    match s.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty() && parse_uint(port).is_some_and(|p| (1..=65535).contains(&p)) =>
        {
            Ok(s.to_string())
        }
        _ => Err(format!("invalid admin address '{s}': expected host:port")),
    }
}

/// Written as in the `_walnut` section (`auto`, `4`).
impl fmt::Display for Workers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workers::Auto => f.write_str("auto"),
            Workers::N(n) => write!(f, "{n}"),
        }
    }
}

/// Written as in the `_walnut` section (`reuseport`).
impl fmt::Display for ListenerMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenerMode::Reuseport => "reuseport",
            ListenerMode::EpollExclusive => "epoll_exclusive",
            ListenerMode::AcceptMutex => "accept_mutex",
        })
    }
}

/// Written as in the `_walnut` section (`none`, `auto`, `0,2,4`).
impl fmt::Display for CpuAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuAffinity::None => f.write_str("none"),
            CpuAffinity::Auto => f.write_str("auto"),
            CpuAffinity::List(cpus) => {
                let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

/// Validates the `_walnut` section.
pub(crate) fn validate_process(r: &mut Report, section: &RawSection) -> ProcessConfig {
    let mut cfg = ProcessConfig::default();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for e in &section.entries {
        let key = e.key.text.as_str();
        if let Some(first) = seen.get(key) {
            r.error(
                e.key.line,
                format!("'{key}' is a duplicate (first set on line {first})"),
            );
            continue;
        }
        seen.insert(key, e.key.line);
        if !PROCESS_KEYS.contains(&key) {
            r.error(
                e.key.line,
                format!(
                    "unknown key '{key}': expected one of {}",
                    PROCESS_KEYS.join(", ")
                ),
            );
            continue;
        }
        let v = match &e.value {
            RawValue::Scalar(v) => v,
            RawValue::Seq(items) if key == "cpu_affinity" => {
                let joined: Vec<&str> = items.iter().map(|s| s.text.as_str()).collect();
                let v = Scalar {
                    text: joined.join(","),
                    line: e.key.line,
                };
                set(r, &mut cfg, key, &v);
                continue;
            }
            RawValue::Seq(_) => {
                r.error(
                    e.key.line,
                    format!("'{key}' must be a single value, not a list"),
                );
                continue;
            }
        };
        set(r, &mut cfg, key, v);
    }
    cfg
}

fn set(r: &mut Report, cfg: &mut ProcessConfig, key: &str, v: &Scalar) {
    let fail = |r: &mut Report, msg: String| r.error(v.line, format!("'{key}': {msg}"));
    match key {
        "workers" => match v.text.parse() {
            Ok(w) => cfg.workers = w,
            Err(m) => fail(r, m),
        },
        "listener" => match v.text.parse() {
            Ok(l) => cfg.listener = l,
            Err(m) => fail(r, m),
        },
        "cpu_affinity" => match v.text.parse() {
            Ok(a) => cfg.cpu_affinity = a,
            Err(m) => fail(r, m),
        },
        "admin" => match parse_admin(&v.text) {
            Ok(a) => cfg.admin = Some(a),
            Err(m) => fail(r, m),
        },
        "tcp_quickack" => {
            if let Some(b) = parse_bool(r, key, v) {
                cfg.tcp_quickack = b;
            }
        }
        "accept_mutex_delay" | "graceful_timeout" => match parse_millis(&v.text) {
            Some(ms) if key == "accept_mutex_delay" => cfg.accept_mutex_delay_ms = ms,
            Some(ms) => cfg.graceful_timeout_ms = ms,
            None => fail(
                r,
                format!(
                    "invalid value '{}': expected milliseconds, e.g. 500 or 30s",
                    v.text
                ),
            ),
        },
        "buffer_budget" => match parse_size(&v.text) {
            Some(n) => cfg.buffer_budget = n,
            None => fail(
                r,
                format!(
                    "invalid value '{}': expected bytes, optionally with k, m or g",
                    v.text
                ),
            ),
        },
        "max_connections" => match parse_uint(&v.text) {
            Some(n) => cfg.max_connections = n as usize,
            None => fail(
                r,
                format!(
                    "invalid value '{}': expected a number of connections",
                    v.text
                ),
            ),
        },
        "slowlog_threshold" | "reply_hold" => match parse_micros(&v.text) {
            Some(us) if key == "reply_hold" => cfg.reply_hold_us = us,
            Some(us) => cfg.slowlog_threshold_us = us,
            None => fail(
                r,
                format!(
                    "invalid value '{}': expected microseconds, e.g. 10000, 10ms or 0",
                    v.text
                ),
            ),
        },
        "log_level" => match parse_uint(&v.text).and_then(|n| u8::try_from(n).ok()) {
            Some(n) if n <= LOG_LEVEL_MAX => cfg.log_level = Some(n),
            _ => fail(
                r,
                format!("invalid value '{}': expected 0 to {LOG_LEVEL_MAX}", v.text),
            ),
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_parse() {
        assert_eq!("auto".parse::<Workers>(), Ok(Workers::Auto));
        assert_eq!("4".parse::<Workers>(), Ok(Workers::N(4)));
        assert!("0".parse::<Workers>().is_err());
        assert!("-1".parse::<Workers>().is_err());
        assert!("many".parse::<Workers>().is_err());
    }

    #[test]
    fn listener_parse() {
        assert_eq!("reuseport".parse(), Ok(ListenerMode::Reuseport));
        assert_eq!("epoll_exclusive".parse(), Ok(ListenerMode::EpollExclusive));
        assert_eq!("accept_mutex".parse(), Ok(ListenerMode::AcceptMutex));
        assert!("epoll".parse::<ListenerMode>().is_err());
    }

    #[test]
    fn affinity_parse() {
        assert_eq!("auto".parse(), Ok(CpuAffinity::Auto));
        assert_eq!("none".parse(), Ok(CpuAffinity::None));
        assert_eq!(
            "0,2,4-6".parse(),
            Ok(CpuAffinity::List(vec![0, 2, 4, 5, 6]))
        );
        assert_eq!("1 3".parse(), Ok(CpuAffinity::List(vec![1, 3])));
        for bad in ["", "x", "3-1", "0-99999", "1,,a"] {
            assert!(bad.parse::<CpuAffinity>().is_err(), "{bad}");
        }
    }

    #[test]
    fn millis_and_admin() {
        assert_eq!(parse_millis("500"), Some(500));
        assert_eq!(parse_millis("250ms"), Some(250));
        assert_eq!(parse_millis("30s"), Some(30_000));
        assert_eq!(parse_millis("-1"), None);
        assert!(parse_admin("127.0.0.1:22222").is_ok());
        assert!(parse_admin("::1:22222").is_ok());
        assert!(parse_admin("127.0.0.1").is_err());
        assert!(parse_admin(":1").is_err());
        assert!(parse_admin("h:0").is_err());
        assert!(parse_admin("off").is_ok());
        assert_eq!(parse_micros("250"), Some(250));
        assert_eq!(parse_micros("250us"), Some(250));
        assert_eq!(parse_micros("10ms"), Some(10_000));
        assert_eq!(parse_micros("2s"), Some(2_000_000));
        assert_eq!(parse_micros("x"), None);
    }

    #[test]
    fn defaults() {
        let p = ProcessConfig::default();
        assert_eq!(p.workers, Workers::N(1));
        assert_eq!(p.listener, ListenerMode::Reuseport);
        assert_eq!(p.cpu_affinity, CpuAffinity::None);
        assert!(p.tcp_quickack);
        assert_eq!(
            (p.accept_mutex_delay_ms, p.graceful_timeout_ms),
            (500, 30_000)
        );
        assert_eq!(p.log_level, None);
        assert_eq!(p.admin, None);
    }
}
