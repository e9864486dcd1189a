//! Sockets: listeners (TCP with SO_REUSEPORT, unix with permissions),
//! non-blocking connects to servers, and the per-socket options the data
//! path sets (TCP_NODELAY, keepalive, TCP_QUICKACK).

pub mod handover;
mod stream;
pub mod tls;

pub use stream::{Listener, Stream};

use socket2::{Domain, Protocol as SockProto, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::path::Path;

/// Resolve `host:port` to its first address (blocking: called only at
/// configuration time, never from the event loop).
pub fn resolve(host: &str, port: u16) -> io::Result<SocketAddr> {
    (host, port).to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("cannot resolve '{host}:{port}'"),
        )
    })
}

/// Create a listening TCP socket, non-blocking, close-on-exec cleared by the
/// caller when it must survive an exec (hot upgrade).
pub fn listen_tcp(addr: SocketAddr, backlog: u32, reuseport: bool) -> io::Result<OwnedFd> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(SockProto::TCP),
    )?;
    socket.set_reuse_address(true)?;
    if reuseport {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    socket.set_nonblocking(true)?;
    // SAFETY: into_raw_fd hands over sole ownership of a valid descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) })
}

/// Create a listening unix socket at `path`, with optional octal
/// permissions. A socket file left by a process that is gone is removed
/// first (twemproxy removes any file there); one a live process answers on
/// is refused, since removing it would silently take that process's clients
/// (`clear_unix_path`).
pub fn listen_unix(path: &Path, perm: Option<u32>, backlog: u32) -> io::Result<OwnedFd> {
    clear_unix_path(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.bind(&SockAddr::unix(path)?)?;
    if let Some(mode) = perm {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    socket.set_nonblocking(true)?;
    // SAFETY: into_raw_fd hands over sole ownership of a valid descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) })
}

/// Make `path` free for a new listening socket: nothing there, or a stale
/// socket file (a connect is refused: no process listens) removed. A live
/// listener (a connect succeeds, or its backlog is full) and a file that is
/// not a socket are errors.
fn clear_unix_path(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket",
        ));
    }
    // Non-blocking, so a listener with a full backlog answers EAGAIN
    // rather than holding the start-up.
    let probe = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    probe.set_nonblocking(true)?;
    match probe.connect(&SockAddr::unix(path)?) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process listens on this socket (stop it first; a socket file nobody answers on is removed)",
        )),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process listens on this socket (its backlog is full)",
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(e),
    }
}

/// Where a server lives, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// TCP address.
    Tcp(SocketAddr),
    /// Unix socket path.
    Unix(std::path::PathBuf),
}

/// Start a non-blocking connect to a server.
pub fn connect(endpoint: &Endpoint, keepalive: bool) -> io::Result<Stream> {
    match endpoint {
        Endpoint::Tcp(addr) => {
            let socket = Socket::new(
                Domain::for_address(*addr),
                Type::STREAM,
                Some(SockProto::TCP),
            )?;
            socket.set_nonblocking(true)?;
            socket.set_nodelay(true)?;
            if keepalive {
                socket.set_keepalive(true)?;
            }
            match socket.connect(&(*addr).into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(e),
            }
            let std_stream: std::net::TcpStream = socket.into();
            Ok(Stream::Tcp(mio::net::TcpStream::from_std(std_stream)))
        }
        Endpoint::Unix(path) => {
            let stream = mio::net::UnixStream::connect(path)?;
            Ok(Stream::Unix(stream))
        }
    }
}

/// Re-arm TCP_QUICKACK: Linux clears it after a while, so it is set after
/// reads to keep delayed ACKs (the 40 ms stalls) away.
pub fn set_quickack(sock: &impl std::os::fd::AsFd) {
    // A failure leaves delayed ACKs on: nothing to do about it here.
    let _ = socket2::SockRef::from(sock).set_quickack(true);
}

/// Set TCP_NODELAY and optional keepalive on an accepted client socket.
pub fn tune_client(sock: &impl std::os::fd::AsFd, keepalive: bool) {
    let s = socket2::SockRef::from(sock);
    let _ = s.set_nodelay(true);
    if keepalive {
        let _ = s.set_keepalive(true);
    }
}

/// Whether the descriptor is a TCP socket (as opposed to a unix socket).
pub fn is_tcp(sock: &impl std::os::fd::AsFd) -> bool {
    matches!(socket2::SockRef::from(sock).domain(), Ok(d) if d == Domain::IPV4 || d == Domain::IPV6)
}

/// The peer of a connected socket as text (`host:port`, or `unix` for a
/// unix-domain client), for log lines.
pub fn peer_of(fd: std::os::fd::RawFd) -> String {
    // SAFETY: the descriptor is open for the duration of the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    match socket2::SockRef::from(&fd).peer_addr() {
        Ok(a) => a
            .as_socket()
            .map_or_else(|| "unix".to_string(), |s| s.to_string()),
        Err(e) => format!("unknown peer ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_path_live_refused_stale_removed() {
        let dir = std::env::temp_dir().join(format!("walnut-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pool.sock");
        let live = listen_unix(&path, None, 8).unwrap();
        let err = listen_unix(&path, None, 8).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
        assert!(path.exists(), "the live socket's file stays");
        drop(live);
        // The file is left behind, nobody answers: stale, taken over.
        assert!(path.exists());
        let again = listen_unix(&path, None, 8).unwrap();
        drop(again);
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        assert!(listen_unix(&plain, None, 8).is_err());
        assert_eq!(std::fs::read(&plain).unwrap(), b"x");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
