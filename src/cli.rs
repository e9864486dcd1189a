//! Command line: every twemproxy 0.5 flag with its meaning and default,
//! plus walnut's process flags. Flags given on the command line override
//! the configuration's `_walnut` section.

use crate::config::{Config, CpuAffinity, ListenerMode, ProcessConfig, Workers, LOG_LEVEL_MAX};
use clap::Parser;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Default configuration file, relative to the working directory.
pub const DEFAULT_CONF_FILE: &str = "conf/nutcracker.yml";
/// Where an installed walnut keeps its configuration: `$SYSCONFDIR`
/// fixed at build time (`WALNUT_SYSCONFDIR`, `make install` passes it).
pub const SYSCONFDIR: &str = match option_env!("WALNUT_SYSCONFDIR") {
    Some(d) => d,
    None => "/etc",
};
/// Default log level (twemproxy's LOG_NOTICE).
pub const DEFAULT_LOG_LEVEL: u8 = 5;
/// Default stats port.
pub const DEFAULT_STATS_PORT: u16 = 22222;
/// Default stats address.
pub const DEFAULT_STATS_ADDR: &str = "0.0.0.0";
/// Default stats aggregation interval in ms.
pub const DEFAULT_STATS_INTERVAL_MS: u64 = 30_000;
/// The admin address whose port the kernel picks (a default admin port
/// that is taken, or one beside a stats port other than 22222).
pub const ANY_LOOPBACK_PORT: &str = "127.0.0.1:0";
/// Default mbuf (I/O buffer chunk) size in bytes.
pub const DEFAULT_MBUF_SIZE: usize = 16_384;
/// Smallest mbuf size accepted.
pub const MBUF_MIN_SIZE: usize = 512;
/// Largest mbuf size accepted.
pub const MBUF_MAX_SIZE: usize = 16_777_216;

/// Parsed command line.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "walnut",
    about = "A memcached and Redis proxy compatible with twemproxy (nutcracker)",
    disable_version_flag = true
)]
pub struct Cli {
    /// Show version and exit.
    #[arg(short = 'V', long = "version")]
    pub version: bool,

    /// Test configuration for syntax errors and exit.
    #[arg(short = 't', long = "test-conf")]
    pub test_conf: bool,

    /// Run as a daemon.
    #[arg(short = 'd', long = "daemonize")]
    pub daemonize: bool,

    /// Print stats description and exit.
    #[arg(short = 'D', long = "describe-stats")]
    pub describe_stats: bool,

    /// Set logging level (default: 5, min: 0, max: 11; higher values act as 11).
    #[arg(short = 'v', long = "verbose", value_name = "N", value_parser = parse_verbosity)]
    pub verbose: Option<u8>,

    /// Set logging file (default: stderr).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Set configuration file (default: conf/nutcracker.yml, or
    /// /etc/walnut/nutcracker.yml when that does not exist).
    #[arg(short = 'c', long = "conf-file", value_name = "FILE")]
    pub conf_file: Option<PathBuf>,

    /// Set stats monitoring port (default: 22222).
    #[arg(short = 's', long = "stats-port", value_name = "PORT", value_parser = parse_stats_port)]
    pub stats_port: Option<u16>,

    /// Set stats monitoring ip (default: 0.0.0.0).
    #[arg(short = 'a', long = "stats-addr", value_name = "ADDR")]
    pub stats_addr: Option<String>,

    /// Set stats aggregation interval in msec (accepted for compatibility:
    /// walnut's stats are always live).
    #[arg(short = 'i', long = "stats-interval", value_name = "MSEC",
          default_value_t = DEFAULT_STATS_INTERVAL_MS, value_parser = parse_number)]
    pub stats_interval_ms: u64,

    /// Set pid file (default: off).
    #[arg(short = 'p', long = "pid-file", value_name = "FILE")]
    pub pid_file: Option<PathBuf>,

    /// Set size of mbuf chunk in bytes (512..16777216; accepted for
    /// compatibility: walnut sizes its buffers itself).
    #[arg(short = 'm', long = "mbuf-size", value_name = "N",
          default_value_t = DEFAULT_MBUF_SIZE, value_parser = parse_mbuf_size)]
    pub mbuf_size: usize,

    /// Number of worker processes: a number or auto (one per CPU)
    /// (default: 1).
    #[arg(long = "workers", value_name = "N|auto")]
    pub workers: Option<Workers>,

    /// How workers share listening ports (default: reuseport).
    #[arg(
        long = "listener",
        value_name = "reuseport|epoll_exclusive|accept_mutex"
    )]
    pub listener: Option<ListenerMode>,

    /// Pin workers to CPUs: auto, none, or a list such as 0,2,4-7.
    #[arg(long = "cpu-affinity", value_name = "auto|LIST")]
    pub cpu_affinity: Option<CpuAffinity>,

    /// Admin port address (default: 127.0.0.1:22223 beside the default stats
    /// port, else a free 127.0.0.1 port; the log says where:
    /// "admin listening on ADDR"; off disables it).
    #[arg(long = "admin", value_name = "ADDR|off", value_parser = crate::config::parse_admin)]
    pub admin: Option<String>,

    /// Show a live view of a running walnut from its admin port and exit
    /// on Ctrl-C (ADDR defaults to the admin address).
    #[arg(long = "top", value_name = "ADDR", num_args = 0..=1,
          default_missing_value = crate::config::DEFAULT_ADMIN)]
    pub top: Option<String>,

    /// Take the configuration from etcd (the v3 JSON gateway) instead of
    /// a file: endpoints, comma-separated. Needs --fleet; not with -c.
    #[arg(
        long = "etcd",
        value_name = "URL[,URL]",
        requires = "fleet",
        conflicts_with = "conf_file"
    )]
    pub etcd: Option<String>,

    /// The fleet whose configuration (`/walnut/fleet/NAME/config`) this
    /// instance runs and where it registers.
    #[arg(long = "fleet", value_name = "NAME", requires = "etcd")]
    pub fleet: Option<String>,

    /// This instance's member id in the fleet (default: HOSTNAME-STATSPORT).
    #[arg(long = "fleet-id", value_name = "ID")]
    pub fleet_id: Option<String>,

    /// Where the last good fleet configuration is kept (default:
    /// /var/lib/walnut).
    #[arg(long = "fleet-dir", value_name = "DIR")]
    pub fleet_dir: Option<PathBuf>,

    /// Seconds the member's etcd lease lasts without renewal (default: 5).
    #[arg(long = "fleet-ttl", value_name = "SECS", value_parser = parse_number)]
    pub fleet_ttl: Option<u64>,

    /// Milliseconds a request of a `migration: true` pool may wait for
    /// the fleet (a key moving while the barrier has not passed, or the
    /// member catching up) before it is refused; 0 refuses at once
    /// (default: the lease TTL plus one second).
    #[arg(long = "fleet-hold", value_name = "MS", value_parser = parse_number)]
    pub fleet_hold: Option<u64>,

    /// Add N to the port of every pool's TCP listen address (and `.N` to
    /// a unix socket's path): several instances of one configuration on
    /// one machine.
    #[arg(long = "port-offset", value_name = "N", value_parser = parse_number)]
    pub port_offset: Option<u64>,

    /// Print the man page (roff) generated from these flags and exit.
    #[arg(long = "man", hide = true)]
    pub man: bool,
}

/// A non-negative decimal number, as twemproxy's `nc_atoi` accepts.
fn parse_number(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("requires a number".into());
    }
    s.parse::<u64>()
        .ok()
        .filter(|n| *n <= i32::MAX as u64)
        .ok_or_else(|| "requires a number".into())
}

fn parse_verbosity(s: &str) -> Result<u8, String> {
    let n = parse_number(s)?;
    Ok(n.min(u64::from(LOG_LEVEL_MAX)) as u8)
}

fn parse_stats_port(s: &str) -> Result<u16, String> {
    let n = parse_number(s)?;
    u16::try_from(n)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("value {n} is not a valid port"))
}

fn parse_mbuf_size(s: &str) -> Result<usize, String> {
    let n = parse_number(s).map_err(|_| "requires a non-zero number".to_string())?;
    let n = usize::try_from(n).map_err(|_| "requires a non-zero number".to_string())?;
    if n == 0 {
        return Err("requires a non-zero number".into());
    }
    if !(MBUF_MIN_SIZE..=MBUF_MAX_SIZE).contains(&n) {
        return Err(format!(
            "mbuf chunk size must be between {MBUF_MIN_SIZE} and {MBUF_MAX_SIZE} bytes"
        ));
    }
    Ok(n)
}

/// The line `-V` prints.
pub fn version_line() -> String {
    format!("This is walnut-{}", env!("CARGO_PKG_VERSION"))
}

impl Cli {
    /// Parses the process arguments. Exits 0 after printing the version for
    /// `-V` (unless `-D` asks for the stats description too), and exits with
    /// clap's usage error on a bad flag.
    pub fn parse_args() -> Cli {
        let cli = Cli::parse();
        if cli.version && !cli.describe_stats {
            println!("{}", version_line());
            std::process::exit(0);
        }
        cli
    }

    /// The fleet settings, if `--etcd` was given.
    pub fn fleet_opts(&self) -> Result<Option<crate::fleet::FleetOpts>, String> {
        let (Some(etcd), Some(name)) = (&self.etcd, &self.fleet) else {
            return Ok(None);
        };
        let id = self.fleet_id.clone().unwrap_or_else(|| {
            format!(
                "{}-{}",
                crate::stats::json::hostname(),
                self.stats_port.unwrap_or(DEFAULT_STATS_PORT)
            )
        });
        for (what, v) in [("fleet", name), ("fleet id", &id)] {
            if !crate::fleet::valid_name(v) {
                return Err(format!(
                    "invalid {what} '{v}' (letters, digits and -_.: only)"
                ));
            }
        }
        let ttl = self.fleet_ttl.unwrap_or(crate::fleet::DEFAULT_TTL).max(1);
        Ok(Some(crate::fleet::FleetOpts {
            etcd: etcd.clone(),
            name: name.clone(),
            id,
            dir: self
                .fleet_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::fleet::DEFAULT_DIR)),
            ttl,
            hold_ms: self
                .fleet_hold
                .unwrap_or(ttl * 1000 + crate::fleet::HOLD_SLACK_MS),
        }))
    }

    /// `config`'s pools moved by `--port-offset`; an error if a port
    /// would pass 65535.
    pub fn offset_listen(&self, config: &mut Config) -> Result<(), String> {
        let Some(n) = self.port_offset.filter(|n| *n > 0) else {
            return Ok(());
        };
        for p in &mut config.pools {
            match &mut p.listen {
                crate::config::ListenAddr::Tcp { port, .. } => {
                    *port = u16::try_from(u64::from(*port) + n).map_err(|_| {
                        format!(
                            "pool '{}': --port-offset {n} moves port {port} past 65535",
                            p.name
                        )
                    })?;
                }
                crate::config::ListenAddr::Unix { path, .. } => {
                    let mut s = path.clone().into_os_string();
                    s.push(format!(".{n}"));
                    *path = PathBuf::from(s);
                }
            }
        }
        Ok(())
    }

    /// The configuration file: `-c`, else `conf/nutcracker.yml` in the
    /// working directory (twemproxy's default), else the installed one in
    /// `SYSCONFDIR/walnut/` when the first does not exist, so that plain
    /// `walnut` runs from an install.
    pub fn conf_file(&self) -> PathBuf {
        if let Some(p) = &self.conf_file {
            return p.clone();
        }
        let local = PathBuf::from(DEFAULT_CONF_FILE);
        if local.exists() {
            return local;
        }
        let installed = installed_conf_file();
        if installed.exists() {
            installed
        } else {
            local
        }
    }

    /// When no `-c` was given and neither default file exists: a line
    /// that names both places tried (the error itself names only the
    /// first).
    pub fn missing_conf_hint(&self) -> Option<String> {
        if self.conf_file.is_some() || self.conf_file().exists() {
            return None;
        }
        Some(format!(
            "no configuration file: neither {} (in {}) nor {} exists; give one with -c FILE",
            DEFAULT_CONF_FILE,
            std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string()),
            installed_conf_file().display()
        ))
    }

    /// The log level: `-v`, else the `_walnut` `log_level`, else 5.
    pub fn log_level(&self, process: &ProcessConfig) -> u8 {
        self.verbose
            .or(process.log_level)
            .unwrap_or(DEFAULT_LOG_LEVEL)
    }

    /// The stats listen address as `host:port`: `-a`/`-s` when given, else
    /// `0.0.0.0:22222` (twemproxy's defaults).
    pub fn stats_listen(&self, _process: &ProcessConfig) -> String {
        let host = self.stats_addr.as_deref().unwrap_or(DEFAULT_STATS_ADDR);
        let port = self.stats_port.unwrap_or(DEFAULT_STATS_PORT);
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }

    /// `process` with the command line's overrides applied.
    pub fn apply_overrides(&self, process: &ProcessConfig) -> ProcessConfig {
        let mut p = process.clone();
        if let Some(w) = self.workers {
            p.workers = w;
        }
        if let Some(l) = self.listener {
            p.listener = l;
        }
        if let Some(a) = &self.cpu_affinity {
            p.cpu_affinity = a.clone();
        }
        if let Some(v) = self.verbose {
            p.log_level = Some(v);
        }
        if let Some(a) = &self.admin {
            p.admin = Some(a.clone());
        }
        p
    }

    /// The admin listen address: `--admin`, else the `_walnut` `admin`,
    /// else the default (`default_admin`); `None` when set to `off`.
    pub fn admin_listen(&self, process: &ProcessConfig) -> Option<String> {
        match self.admin.as_deref().or(process.admin.as_deref()) {
            Some("off") => None,
            Some(a) => Some(a.to_string()),
            None => Some(self.default_admin()),
        }
    }

    /// Whether the admin address is walnut's choice rather than the
    /// operator's: a default port another process holds then gives way to
    /// one the kernel picks, where a given address is refused.
    pub fn admin_is_default(&self, process: &ProcessConfig) -> bool {
        self.admin.is_none() && process.admin.is_none()
    }

    /// The admin address when none is given: 127.0.0.1:22223 beside the
    /// default stats port, as always; with another stats port (`-s`, as a
    /// second nutcracker on a host is started) a free 127.0.0.1 port the
    /// kernel picks. A fixed offset from the stats port would be another
    /// instance's stats port where operators number them one after another
    /// (twemproxy's own tests run instances with stats ports 5100, 5101 and
    /// 5102), and a second instance would then fail to start.
    fn default_admin(&self) -> String {
        if self.stats_port.unwrap_or(DEFAULT_STATS_PORT) == DEFAULT_STATS_PORT {
            crate::config::DEFAULT_ADMIN.to_string()
        } else {
            ANY_LOOPBACK_PORT.to_string()
        }
    }
}

/// The configuration file an install provides.
pub fn installed_conf_file() -> PathBuf {
    Path::new(SYSCONFDIR).join("walnut/nutcracker.yml")
}

/// `-t`: checks the file at `path`. Prints each warning and error, then
/// nutcracker's verdict line, on stderr. Returns the exit code (0 or 1).
pub fn run_test_conf(path: &Path) -> i32 {
    let stderr = std::io::stderr();
    let mut out = stderr.lock();
    let (code, report) = test_conf_report(path);
    // A closed stderr cannot be reported anywhere; the exit code still is.
    let _ = out.write_all(report.as_bytes());
    code
}

/// The text `-t` prints and its exit code.
pub fn test_conf_report(path: &Path) -> (i32, String) {
    let mut s = String::new();
    match Config::load(path) {
        Ok(config) => {
            for w in &config.warnings {
                s.push_str(&format!("walnut: warning: {w}\n"));
            }
            s.push_str(&format!(
                "walnut: configuration file '{}' syntax is ok\n",
                path.display()
            ));
            (0, s)
        }
        Err(errors) => {
            for e in &errors {
                s.push_str(&format!("walnut: {e}\n"));
            }
            s.push_str(&format!(
                "walnut: configuration file '{}' syntax is invalid\n",
                path.display()
            ));
            (1, s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("walnut").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_twemproxy() {
        let c = parse(&[]).unwrap();
        assert!(!c.version && !c.test_conf && !c.daemonize && !c.describe_stats);
        assert_eq!(c.verbose, None);
        assert_eq!(c.log_level(&ProcessConfig::default()), 5);
        assert_eq!(c.output, None);
        assert_eq!(c.conf_file, None);
        assert_eq!(c.stats_listen(&ProcessConfig::default()), "0.0.0.0:22222");
        assert_eq!(c.stats_interval_ms, 30_000);
        assert_eq!(c.pid_file, None);
        assert_eq!(c.mbuf_size, 16_384);
        assert_eq!((c.workers, c.listener, c.cpu_affinity), (None, None, None));
    }

    #[test]
    fn fleet_hold_defaults_to_the_lease_plus_a_second() {
        let base = ["--etcd", "http://127.0.0.1:2379", "--fleet", "f"];
        let hold = |extra: &[&str]| {
            let args: Vec<&str> = base.iter().chain(extra).copied().collect();
            parse(&args).unwrap().fleet_opts().unwrap().unwrap().hold_ms
        };
        assert_eq!(hold(&[]), 6000);
        assert_eq!(hold(&["--fleet-ttl", "2"]), 3000);
        assert_eq!(hold(&["--fleet-hold", "0"]), 0);
        assert_eq!(hold(&["--fleet-ttl", "2", "--fleet-hold", "1500"]), 1500);
    }

    #[test]
    fn short_and_long_flags() {
        let c = parse(&[
            "-t",
            "-d",
            "-v",
            "7",
            "-o",
            "/var/log/w.log",
            "-c",
            "x.yml",
            "-s",
            "2222",
            "-a",
            "127.0.0.1",
            "-i",
            "1000",
            "-p",
            "/run/w.pid",
            "-m",
            "512",
        ])
        .unwrap();
        assert!(c.test_conf && c.daemonize);
        assert_eq!(c.verbose, Some(7));
        assert_eq!(c.output, Some(PathBuf::from("/var/log/w.log")));
        assert_eq!(c.conf_file(), PathBuf::from("x.yml"));
        assert_eq!(c.stats_listen(&ProcessConfig::default()), "127.0.0.1:2222");
        assert_eq!(c.stats_interval_ms, 1000);
        assert_eq!(c.pid_file, Some(PathBuf::from("/run/w.pid")));
        assert_eq!(c.mbuf_size, 512);
        let c = parse(&[
            "--test-conf",
            "--daemonize",
            "--describe-stats",
            "--verbose=11",
            "--output",
            "o",
            "--conf-file=y.yml",
            "--stats-port",
            "1",
            "--stats-addr",
            "::1",
            "--stats-interval",
            "0",
            "--pid-file",
            "p",
            "--mbuf-size",
            "16777216",
            "--version",
        ])
        .unwrap();
        assert!(c.test_conf && c.daemonize && c.describe_stats && c.version);
        assert_eq!(c.verbose, Some(11));
        assert_eq!(c.stats_listen(&ProcessConfig::default()), "[::1]:1");
        assert_eq!(c.mbuf_size, 16_777_216);
        assert_eq!(parse(&["-v3", "-c/etc/n.yml"]).unwrap().verbose, Some(3));
        assert!(parse(&["-V"]).unwrap().version);
        assert!(parse(&["-D"]).unwrap().describe_stats);
    }

    #[test]
    fn verbosity_clamps_like_twemproxy() {
        assert_eq!(parse(&["-v", "0"]).unwrap().verbose, Some(0));
        assert_eq!(parse(&["-v", "40"]).unwrap().verbose, Some(11));
        assert!(parse(&["-v", "-1"]).is_err());
        assert!(parse(&["-v", "loud"]).is_err());
    }

    #[test]
    fn rejects_bad_numbers() {
        for args in [
            &["-s", "0"][..],
            &["-s", "65536"],
            &["-s", "x"],
            &["-i", "-5"],
            &["-m", "511"],
            &["-m", "16777217"],
            &["-m", "0"],
            &["-m", "big"],
            &["-c"],
            &["-x"],
            &["--workers", "0"],
            &["--listener", "epoll"],
            &["--cpu-affinity", "3-1"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn walnut_flags_override_section() {
        let c = parse(&[
            "--workers",
            "auto",
            "--listener",
            "epoll_exclusive",
            "--cpu-affinity",
            "0-2",
            "-v",
            "9",
        ])
        .unwrap();
        let section = ProcessConfig {
            workers: Workers::N(4),
            listener: ListenerMode::AcceptMutex,
            log_level: Some(2),
            admin: Some("127.0.0.1:9000".into()),
            ..ProcessConfig::default()
        };
        let p = c.apply_overrides(&section);
        assert_eq!(p.workers, Workers::Auto);
        assert_eq!(p.listener, ListenerMode::EpollExclusive);
        assert_eq!(p.cpu_affinity, CpuAffinity::List(vec![0, 1, 2]));
        assert_eq!(p.log_level, Some(9));
        assert_eq!(p.admin.as_deref(), Some("127.0.0.1:9000"));
        assert_eq!(c.log_level(&section), 9);
        assert_eq!(c.stats_listen(&section), "0.0.0.0:22222");
        assert_eq!(c.admin_listen(&section).as_deref(), Some("127.0.0.1:9000"));
        // Without flags the section stands.
        let none = parse(&[]).unwrap();
        assert_eq!(none.apply_overrides(&section), section);
        assert_eq!(none.log_level(&section), 2);
        // -s alone keeps the default host; the admin port is separate.
        let port_only = parse(&["-s", "7000"]).unwrap();
        assert_eq!(port_only.stats_listen(&section), "0.0.0.0:7000");
        assert_eq!(
            port_only.apply_overrides(&section).admin.as_deref(),
            Some("127.0.0.1:9000")
        );
        let admin = parse(&["--admin", "127.0.0.1:9100"]).unwrap();
        assert_eq!(
            admin.admin_listen(&section).as_deref(),
            Some("127.0.0.1:9100")
        );
        let off = parse(&["--admin", "off"]).unwrap();
        assert_eq!(off.admin_listen(&section), None);
        assert_eq!(
            parse(&[])
                .unwrap()
                .admin_listen(&ProcessConfig::default())
                .as_deref(),
            Some("127.0.0.1:22223")
        );
        // Without an admin address: 22223 beside the default stats port
        // (given or not), a kernel-picked one beside any other, so that
        // instances numbered by stats port never take each other's.
        let bare = ProcessConfig::default();
        for (args, want) in [
            (&[][..], "127.0.0.1:22223"),
            (&["-s", "22222"][..], "127.0.0.1:22223"),
            (&["-s", "5100"][..], "127.0.0.1:0"),
        ] {
            let c = parse(args).unwrap();
            assert_eq!(c.admin_listen(&bare).as_deref(), Some(want), "{args:?}");
            assert!(c.admin_is_default(&bare));
        }
        assert!(!port_only.admin_is_default(&section));
        assert!(!admin.admin_is_default(&bare));
        assert_eq!(
            parse(&["--top"]).unwrap().top.as_deref(),
            Some("127.0.0.1:22223")
        );
    }

    #[test]
    fn version_line_format() {
        assert_eq!(
            version_line(),
            format!("This is walnut-{}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn test_conf_reports() {
        let dir = std::env::temp_dir().join(format!("walnut-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.yml");
        std::fs::write(
            &good,
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n",
        )
        .unwrap();
        let (code, text) = test_conf_report(&good);
        assert_eq!(code, 0);
        assert_eq!(
            text,
            format!(
                "walnut: configuration file '{}' syntax is ok\n",
                good.display()
            )
        );
        let bad = dir.join("bad.yml");
        std::fs::write(
            &bad,
            "a:\n  listen: 127.0.0.1:22121\n  hash: xyz\n  servers:\n   - h:1:0\n",
        )
        .unwrap();
        let (code, text) = test_conf_report(&bad);
        assert_eq!(code, 1);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with(&format!("walnut: {}:3: pool 'a': 'hash'", bad.display())));
        assert!(lines[1].contains(":5: pool 'a': server 'h:1:0': has a zero weight"));
        assert!(lines[2].ends_with("syntax is invalid"));
        let (code, text) = test_conf_report(&dir.join("missing.yml"));
        assert_eq!(code, 1);
        assert!(text.contains("cannot read the configuration file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
