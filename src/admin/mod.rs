//! The admin port: a small text protocol (usable with `nc` or
//! `redis-cli`) and HTTP `GET /metrics` / `GET /stats`, served by the
//! master next to the stats port. Connections are non-blocking with
//! bounded buffers and an idle limit, so a slow admin client never stalls
//! the master.

mod commands;
mod hotkeys;
pub mod request;
pub mod top;

use crate::config::Config;
pub use crate::stats::host::{HostInfo, WorkerInfo};
use crate::stats::shm::Region;
use request::{Framing, Parsed};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// Most admin connections open at once.
const MAX_CONNS: usize = 32;
/// An admin connection idle (or stuck writing) this long is closed.
const IDLE: Duration = Duration::from_secs(60);
/// Largest reply backlog kept for one connection.
const MAX_OUT: usize = 16 * 1024 * 1024;

/// The master's side of the admin commands.
pub trait Host {
    /// State of the master and its workers.
    fn info(&self) -> HostInfo;
    /// The running configuration.
    fn config(&self) -> Option<&Config>;
    /// The counters of the running generation.
    fn region(&self) -> Option<&Region>;
    /// The stats document (as on the stats port).
    fn stats_json(&self) -> String;
    /// Send a parameter to every worker and wait for their answers; the
    /// errors reported (empty when every worker applied it).
    fn set_param(&mut self, key: &str, value: &str) -> Vec<String>;
    /// Reload the configuration (as SIGHUP): what changed, or the error.
    fn reload(&mut self) -> Result<Vec<String>, String>;
    /// The admin port's descriptors while it serves (a process forked
    /// meanwhile closes them).
    fn admin_fds(&mut self, _fds: Vec<std::os::fd::RawFd>) {}
    /// Migrations of pools: one `key=value` line each.
    fn migrations(&self) -> Vec<String> {
        Vec::new()
    }
    /// Pause, resume or abort a pool's migration.
    fn migration_control(&mut self, _what: &str, _pool: &str) -> Result<(), String> {
        Err("no migration".into())
    }
    /// The fleet's members (admin `fleet`); `None` outside a fleet.
    fn fleet(&self) -> Option<Vec<String>> {
        None
    }
    /// `/metrics` families the configuration and counters do not hold.
    fn extra_metrics(&self) -> String {
        String::new()
    }
}

struct Conn {
    sock: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    last: Instant,
    close_after: bool,
    dead: bool,
}

/// The admin listener and its connections.
pub struct AdminServer {
    listener: TcpListener,
    conns: Vec<Conn>,
    /// Slow-log entries before these sequence numbers (per slot) were
    /// reset, with the generation they belong to.
    slowlog_base: (u64, Vec<u64>),
}

impl AdminServer {
    /// Listen on `addr` (host:port).
    pub fn bind(addr: &str) -> std::io::Result<AdminServer> {
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "bad admin address"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port
            .parse()
            .map_err(|_| std::io::Error::new(ErrorKind::InvalidInput, "bad admin port"))?;
        let sa = crate::net::resolve(host, port)?;
        Self::from_fd(crate::net::listen_tcp(sa, 64, false)?)
    }

    /// Serve on a listening socket already open (inherited on upgrade).
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> std::io::Result<AdminServer> {
        let listener = TcpListener::from(fd);
        listener.set_nonblocking(true)?;
        Ok(AdminServer {
            listener,
            conns: Vec::new(),
            slowlog_base: (0, Vec::new()),
        })
    }

    /// The listening socket's descriptor (handed to a new binary).
    pub fn listener_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// The bound address.
    pub fn local_addr(&self) -> String {
        self.listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }

    /// Descriptors to poll: the listener and every connection, with the
    /// events each waits for.
    pub fn pollfds(&self) -> Vec<libc::pollfd> {
        let mut v = vec![libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        for c in &self.conns {
            let mut events = libc::POLLIN;
            if !c.out.is_empty() {
                events |= libc::POLLOUT;
            }
            v.push(libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        v
    }

    /// Every descriptor the server holds (closed in forked workers).
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = vec![self.listener.as_raw_fd()];
        v.extend(self.conns.iter().map(|c| c.sock.as_raw_fd()));
        v
    }

    /// Accept, read, answer and write whatever is ready, without blocking.
    pub fn service(&mut self, host: &mut dyn Host) {
        let now = Instant::now();
        while self.conns.len() < MAX_CONNS {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    if sock.set_nonblocking(true).is_ok() {
                        let _ = sock.set_nodelay(true);
                        self.conns.push(Conn {
                            sock,
                            inbuf: Vec::new(),
                            out: Vec::new(),
                            last: now,
                            close_after: false,
                            dead: false,
                        });
                    }
                }
                Err(_) => break,
            }
        }
        // A command may fork (reload): the new workers must not keep the
        // admin sockets open (a closed connection would never end).
        host.admin_fds(self.fds());
        let mut conns = std::mem::take(&mut self.conns);
        for c in conns.iter_mut() {
            self.read_conn(c, host, now);
            write_conn(c, now);
            if now.duration_since(c.last) > IDLE || c.out.len() > MAX_OUT {
                c.dead = true;
            }
        }
        conns.retain(|c| !(c.dead || (c.close_after && c.out.is_empty())));
        self.conns = conns;
    }

    fn read_conn(&mut self, c: &mut Conn, host: &mut dyn Host, now: Instant) {
        if c.close_after {
            return;
        }
        let mut buf = [0u8; 4096];
        loop {
            match c.sock.read(&mut buf) {
                Ok(0) => {
                    c.close_after = true;
                    break;
                }
                Ok(n) => {
                    c.last = now;
                    c.inbuf.extend_from_slice(&buf[..n]);
                    if c.inbuf.len() > 2 * request::MAX_REQUEST {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    c.dead = true;
                    return;
                }
            }
        }
        loop {
            match request::parse(&c.inbuf) {
                Parsed::Incomplete => break,
                Parsed::Invalid(msg) => {
                    c.out.extend_from_slice(format!("ERR {msg}\r\n").as_bytes());
                    c.inbuf.clear();
                    c.close_after = true;
                    break;
                }
                Parsed::Done(req, used) => {
                    c.inbuf.drain(..used);
                    if req.args.is_empty() {
                        continue;
                    }
                    let head = req.framing == Framing::Http && req.args[0] == "HEAD";
                    let (reply, quit) = commands::run(self, host, &req);
                    c.out
                        .extend_from_slice(&request::frame(&reply, req.framing, head));
                    if quit || req.framing == Framing::Http {
                        c.close_after = true;
                        c.inbuf.clear();
                        break;
                    }
                }
            }
        }
    }
}

fn write_conn(c: &mut Conn, now: Instant) {
    while !c.out.is_empty() {
        match c.sock.write(&c.out) {
            Ok(0) => break,
            Ok(n) => {
                c.out.drain(..n);
                c.last = now;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => {
                c.dead = true;
                break;
            }
        }
    }
}
