//! TCP and unix sockets behind one type, so the data path does not care
//! which kind a pool listens on or a server lives at.

use mio::event::Source;
use mio::{Interest, Registry, Token};
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A connected stream socket.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(mio::net::TcpStream),
    /// Unix domain.
    Unix(mio::net::UnixStream),
    /// TLS over TCP.
    Tls(Box<super::tls::TlsStream>),
}

impl Stream {
    /// The socket's pending error (SO_ERROR), used after a non-blocking connect.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Stream::Tcp(s) => s.take_error(),
            Stream::Unix(s) => s.take_error(),
            Stream::Tls(s) => s.tcp.take_error(),
        }
    }

    /// Whether this is a TCP stream (TCP_QUICKACK applies).
    pub fn is_tcp(&self) -> bool {
        matches!(self, Stream::Tcp(_) | Stream::Tls(_))
    }

    /// Whether this connection carries TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// A TLS handshake not finished yet.
    pub fn is_handshaking(&self) -> bool {
        matches!(self, Stream::Tls(t) if t.is_handshaking())
    }

    /// TLS: send close_notify (best effort) before the socket closes.
    pub fn say_goodbye(&mut self) {
        if let Stream::Tls(s) = self {
            s.close();
        }
    }

    /// Shut down both directions.
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tls(s) => s.tcp.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }
    /// TLS: push ciphertext left in rustls; plain sockets have none.
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush_tls(),
            _ => Ok(()),
        }
    }
}

impl Stream {
    /// Set the socket's receive low-water mark (`SO_RCVLOWAT`): epoll
    /// reports it readable once this many bytes are queued (or on EOF or
    /// an error); a read still returns whatever is there. Neither mio nor
    /// socket2 offers it. False when the kernel refused.
    pub fn set_recv_lowat(&self, bytes: usize) -> bool {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: a valid socket descriptor and a c_int option value of
        // the size given.
        let rc = unsafe {
            libc::setsockopt(
                self.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        rc == 0
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.tcp.as_raw_fd(),
        }
    }
}

impl std::os::fd::AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
            Stream::Tls(s) => s.tcp.as_fd(),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
            Stream::Tls(s) => s.tcp.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.tcp.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
            Stream::Tls(s) => s.tcp.deregister(r),
        }
    }
}

/// A listening socket of either kind.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(mio::net::TcpListener),
    /// Unix domain.
    Unix(mio::net::UnixListener),
}

impl Listener {
    /// Wrap a listening descriptor (already non-blocking).
    pub fn from_fd(fd: OwnedFd, tcp: bool) -> Listener {
        use std::os::fd::IntoRawFd;
        let raw = fd.into_raw_fd();
        if tcp {
            // SAFETY: `raw` is an owned, listening TCP socket.
            Listener::Tcp(unsafe { mio::net::TcpListener::from_raw_fd(raw) })
        } else {
            // SAFETY: `raw` is an owned, listening unix socket.
            Listener::Unix(unsafe { mio::net::UnixListener::from_raw_fd(raw) })
        }
    }

    /// Accept one connection.
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.register(r, t, i),
            Listener::Unix(l) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.reregister(r, t, i),
            Listener::Unix(l) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.deregister(r),
            Listener::Unix(l) => l.deregister(r),
        }
    }
}
