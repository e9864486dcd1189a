//! `walnut`: parse the command line, check the configuration, become a
//! daemon if asked, and hand over to the master process.

use std::path::{Path, PathBuf};
use walnut::cli::{self, Cli};
use walnut::config::Config;
use walnut::master::{Master, MasterOpts};

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Detach from the terminal as twemproxy's `-d` does: fork, setsid, fork,
/// chdir /, stdio to /dev/null (stderr to the log file if there is one).
fn daemonize() -> std::io::Result<()> {
    // SAFETY: the process is single-threaded here; each parent exits at once.
    unsafe {
        match libc::fork() {
            -1 => return Err(std::io::Error::last_os_error()),
            0 => {}
            _ => libc::_exit(0),
        }
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        match libc::fork() {
            -1 => return Err(std::io::Error::last_os_error()),
            0 => {}
            _ => libc::_exit(0),
        }
        libc::umask(0);
        let root = c"/";
        libc::chdir(root.as_ptr());
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            let logfd = walnut::log::fd();
            libc::dup2(if logfd > 2 { logfd } else { null }, 2);
            if null > 2 {
                libc::close(null);
            }
        }
    }
    Ok(())
}

/// Print `walnut: MSG` on stderr and exit with status 1: the one way
/// start-up fails before the master runs.
fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("walnut: {msg}");
    std::process::exit(1);
}

/// The modes that answer and exit without a configuration: `--describe-stats`,
/// `--top` and `--man`. Their exit status, or None to go on.
fn answer_and_exit(cli: &Cli) -> Option<i32> {
    if cli.describe_stats {
        // nutcracker prints the version and the descriptions on stderr.
        eprint!("{}", walnut::stats::describe());
        return Some(0);
    }
    if let Some(addr) = &cli.top {
        return Some(walnut::admin::top::run(addr, None));
    }
    if cli.man {
        print!("{}", walnut::manpage::render());
        return Some(0);
    }
    None
}

/// The configuration at `path`, or every error found in it and exit.
fn load_or_exit(path: &Path) -> Config {
    match Config::load(path) {
        Ok(c) => c,
        Err(errs) => {
            for e in errs.iter() {
                eprintln!("walnut: {e}");
            }
            fail(format_args!(
                "configuration file '{}' syntax is invalid",
                path.display()
            ));
        }
    }
}

/// The running binary's absolute path, for an upgrade (USR2) to exec
/// again: `argv[0]` made absolute when it names a path, else the kernel's
/// idea of the executable.
fn own_exe(args: &[String]) -> PathBuf {
    args.first()
        .map(|a| {
            let p = Path::new(a);
            if a.contains('/') {
                absolute(p)
            } else {
                std::env::current_exe().unwrap_or_else(|_| p.to_path_buf())
            }
        })
        .unwrap_or_default()
}

fn main() {
    // `walnut fleet ...` publishes and lists a fleet's configuration.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("fleet") {
        std::process::exit(walnut::fleet::cmd::main(&argv[2..]));
    }
    let cli = Cli::parse_args();
    if let Some(status) = answer_and_exit(&cli) {
        std::process::exit(status);
    }
    let fleet = match cli.fleet_opts() {
        Ok(f) => f.map(|mut f| {
            f.dir = absolute(&f.dir);
            f
        }),
        Err(e) => fail(e),
    };
    let conf_file = cli.conf_file();
    if fleet.is_none() {
        if let Some(hint) = cli.missing_conf_hint() {
            fail(hint);
        }
    }
    if cli.test_conf && fleet.is_none() {
        std::process::exit(cli::run_test_conf(&conf_file));
    }
    walnut::util::mark_start();
    // Paths are made absolute before `-d` moves the process to `/`, so a
    // log reopen (USR1) and a new binary (USR2) find the same files.
    let start_dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    if let Err(e) = walnut::log::init(cli.output.as_deref().map(absolute).as_deref()) {
        fail(format_args!("cannot open log file: {e}"));
    }
    let conf_path = match &fleet {
        // The fleet's configuration from etcd, or the last good one.
        Some(f) => walnut::fleet::fetch_initial(f).unwrap_or_else(|e| fail(e)),
        None => absolute(&conf_file),
    };
    if cli.test_conf {
        std::process::exit(cli::run_test_conf(&conf_path));
    }
    let config = load_or_exit(&conf_path);
    for w in &config.warnings {
        walnut::log_warn!("{w}");
    }
    let apply = {
        let cli = cli.clone();
        move |c: &Config| {
            let mut c = c.clone();
            c.process = cli.apply_overrides(&c.process);
            if let Err(e) = cli.offset_listen(&mut c) {
                walnut::log_error!("{e}");
            }
            c
        }
    };
    let config = apply(&config);
    walnut::log::set_level(cli.log_level(&config.process));
    let pid_file = cli.pid_file.as_ref().map(|p| absolute(p));
    if cli.daemonize {
        if let Err(e) = daemonize() {
            fail(format_args!("cannot daemonize: {e}"));
        }
    }
    let args: Vec<String> = std::env::args().collect();
    let opts = MasterOpts {
        conf_path,
        stats_addr: cli.stats_listen(&walnut::config::ProcessConfig::default()),
        admin_addr: cli.admin_listen(&config.process),
        admin_fallback: cli.admin_is_default(&config.process),
        stats_reuseport: config.pools.iter().any(|p| p.reuseport),
        pid_file,
        start_dir,
        exe: own_exe(&args),
        args,
        overrides: Box::new(apply),
        fleet,
    };
    walnut::log_notice!(
        "walnut-{} started on pid {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    let mut master = match Master::new(opts) {
        Ok(m) => m,
        Err(e) => {
            walnut::log_error!("{e}");
            fail(e);
        }
    };
    std::process::exit(master.run(config));
}
