//! The socket under a client handover: a `SOCK_SEQPACKET` unix socket in
//! Linux's abstract namespace (no file to clean up, gone with its last
//! holder), one connection per handed client, one message each carrying
//! the client's descriptor (`SCM_RIGHTS`) and its session state.
//!
//! Written over libc by hand: passing descriptors needs `sendmsg`/`recvmsg`
//! with control messages, which neither mio nor socket2 offer, and the
//! whole of it is three calls.
//!
//! Only a process of the same user may hand over: the receiver checks the
//! peer's credentials (`SO_PEERCRED`) before it takes anything.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Largest message (session state + unparsed input + unwritten output).
/// A seqpacket message must fit the socket's send buffer in one piece.
pub const MAX_MESSAGE: usize = 192 * 1024;

/// The abstract socket name a master's workers take clients on.
pub fn name_for(master_pid: u32) -> String {
    format!("walnut-handover-{master_pid}")
}

/// `bind` or `connect` (`call`) `fd` to the abstract address `name`.
fn at_name(
    fd: &OwnedFd,
    name: &str,
    call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
) -> io::Result<()> {
    let (sa, len) = sockaddr(name)?;
    // SAFETY: `sa` is a valid sockaddr_un of length `len`.
    let rc = unsafe {
        call(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > sa.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "handover name too long",
        ));
    }
    // Abstract namespace: a leading NUL, no terminator.
    for (i, b) in bytes.iter().enumerate() {
        sa.sun_path[i + 1] = *b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((sa, len as libc::socklen_t))
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bind and listen on `name` (non-blocking, close-on-exec).
pub fn listen(name: &str) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    at_name(&fd, name, libc::bind)?;
    // SAFETY: listen on our own socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 1024) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Hand `fd` and `payload` to the process listening on `name`: connect,
/// send one message, close. `WouldBlock` means the receiver's queue is
/// full for now (try again later); other errors mean nobody listens.
pub fn send(name: &str, payload: &[u8], fd: RawFd) -> io::Result<()> {
    if payload.len() > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "handover message too large",
        ));
    }
    let sock = seqpacket()?;
    let buf = (MAX_MESSAGE + 4096) as libc::c_int;
    // SAFETY: setsockopt with a c_int option value.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            &buf as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    // A unix connect to a listener whose backlog is full: EAGAIN.
    at_name(&sock, name, libc::connect)?;
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // SAFETY: CMSG_SPACE of one descriptor.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: a zeroed msghdr, then every pointer set to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds exactly one SCM_RIGHTS header with
    // room for one descriptor (CMSG_SPACE above).
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
    }
    loop {
        // SAFETY: `msg` points to live buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Accept one pending handover connection, if any, checking that its peer
/// runs as this process's user.
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    loop {
        // SAFETY: accept4 on our listening socket, no peer address wanted.
        let fd = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        // SAFETY: a fresh descriptor we own.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed ucred is valid; getsockopt fills at most `len`.
        let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: as above.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                &mut cred as *mut libc::ucred as *mut libc::c_void,
                &mut len,
            )
        };
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if rc != 0 || cred.uid != me {
            crate::log_warn!(
                "handover connection from uid {} (pid {}) refused",
                cred.uid,
                cred.pid
            );
            continue;
        }
        return Ok(Some(conn));
    }
}

/// What one handover connection delivered.
pub enum Received {
    /// The message and the descriptor it carried.
    Client(Vec<u8>, OwnedFd),
    /// Nothing yet: wait for the connection to become readable.
    Pending,
    /// The sender closed without a client (or sent no descriptor).
    Nothing,
}

/// Read the one message of a handover connection.
pub fn recv(conn: RawFd) -> io::Result<Received> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: CMSG_SPACE of a few descriptors (a hostile sender could send
    // more than one; extra ones are closed below).
    let space = unsafe { libc::CMSG_SPACE((4 * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: a zeroed msghdr, then every pointer set to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points to live buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(conn, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Received::Pending),
            _ => return Err(e),
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: walking the control messages the kernel wrote, within
    // msg_controllen; SCM_RIGHTS data holds descriptors now owned by us.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned((data as *const RawFd).add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let truncated = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    if n == 0 || truncated || fds.len() != 1 {
        return Ok(Received::Nothing);
    }
    buf.truncate(n);
    Ok(Received::Client(buf, fds.pop().expect("one descriptor")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_descriptor_and_its_state_cross() {
        let name = format!("walnut-handover-test-{}", std::process::id());
        let l = listen(&name).unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        send(&name, b"state", b.as_raw_fd()).unwrap();
        drop(b);
        let conn = accept(l.as_raw_fd()).unwrap().expect("a connection");
        let Received::Client(payload, fd) = recv(conn.as_raw_fd()).unwrap() else {
            panic!("no client received");
        };
        assert_eq!(payload, b"state");
        let mut b2 = std::os::unix::net::UnixStream::from(fd);
        a.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        b2.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
    }

    #[test]
    fn nobody_listening_is_an_error() {
        let (_a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = send("walnut-handover-nobody-here", b"x", b.as_raw_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_closed_connection_brings_nothing() {
        let name = format!("walnut-handover-test2-{}", std::process::id());
        let l = listen(&name).unwrap();
        let s = seqpacket().unwrap();
        at_name(&s, &name, libc::connect).unwrap();
        let conn = accept(l.as_raw_fd()).unwrap().expect("a connection");
        assert!(matches!(recv(conn.as_raw_fd()).unwrap(), Received::Pending));
        drop(s);
        assert!(matches!(recv(conn.as_raw_fd()).unwrap(), Received::Nothing));
    }
}
