//! Why a request could not be answered by its server: one type for every
//! failure on the data path, from connection setup to a reply that makes
//! no sense. It knows three things the code that meets a failure needs:
//!
//! - the text the client is told, in twemproxy's wording (the strerror
//!   text of the failure: "Connection refused", "Connection timed out"),
//!   written per protocol by [`ServerFault::write_reply`];
//! - whether it is the server's fault ([`ServerFault::is_fault`]): counted
//!   towards its ejection and its reconnection backoff;
//! - whether the request certainly did not reach the server
//!   ([`ServerFault::retry_safe`]), so that sending it elsewhere cannot
//!   run it twice.
//!
//! Where a connection ends for it, it also gives how the stats count the
//! ending ([`ServerFault::ending`]).

use crate::proto::{Op, Protocol};
use std::borrow::Cow;
use std::fmt;
use std::io;

/// How a server connection ended (which stats counter it adds to:
/// `server_eof`, `server_err` or `server_timedout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The server closed it.
    Eof,
    /// A socket or protocol error.
    Error,
    /// A request timed out.
    Timeout,
}

/// A failed socket call: its kind, and the text clients are told (what
/// strerror(3) says for an OS error, the error's own words otherwise, as
/// for TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoFault {
    kind: io::ErrorKind,
    text: String,
}

impl IoFault {
    pub fn kind(&self) -> io::ErrorKind {
        self.kind
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// A failure of the TLS layer: `net::tls` words every error of its own
    /// "TLS ..." (an OS error never is).
    pub fn is_tls(&self) -> bool {
        self.text.starts_with("TLS ")
    }
}

impl From<&io::Error> for IoFault {
    fn from(e: &io::Error) -> Self {
        IoFault {
            kind: e.kind(),
            text: crate::util::strerror(e),
        }
    }
}

/// Why a request could not be answered by its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFault {
    /// The connection could not be opened (refused, unreachable, the TLS
    /// session could not be set up): nothing was sent on it.
    Connect(IoFault),
    /// The poller would not take the new socket: this process's trouble,
    /// not the server's.
    Register(IoFault),
    /// Reading or writing an open connection failed (a TLS session that
    /// broke included).
    Socket(IoFault),
    /// The server closed the connection.
    Closed,
    /// A request waited longer than the pool's `timeout`.
    TimedOut,
    /// The TLS handshake had not finished after this many milliseconds
    /// (`server_tls_handshake_timeout`).
    TlsHandshakeTimeout { ms: u64 },
    /// A reply that does not parse, or that no request waits for: the
    /// connection is out of step and every request on it fails. The
    /// parser's words are for the log; clients get twemproxy's errno text.
    BadReply(String),
    /// The server refused `HELLO 3` (a Redis before 6): the RESP3 clients
    /// queued behind it must not get RESP2 replies. The server is well.
    Resp3Refused,
    /// Not tried: the server is ejected, or backs off after a failure, or
    /// waits for its health probe. Clients are told its last failure
    /// (already counted when it happened), if it had one.
    Resting(Option<Box<ServerFault>>),
    /// The server's host name has no address (yet).
    Unresolved,
    /// No server to send it to: none owns the key (all ejected), or the
    /// connection just opened for it is gone.
    NoServer,
    /// A write's copy for another zone was dropped: that zone's queue is
    /// full.
    ZoneQueueFull,
    /// A Redis Cluster node redirected a request the client was still
    /// streaming to it: the rest of it went to that node.
    RedirectedMidRequest,
    /// A pair-by-pair MSET whose client sent a malformed pair: the pairs
    /// after it are never sent.
    UnsentAfterBadPair,
    /// The client sent a malformed argument in the middle of a streamed
    /// request: its connection to the server holds half a command.
    HalfSentBadArg,
    /// The client left in the middle of a streamed request.
    HalfSentClientLeft,
    /// The client left while its request was being sent again (a Redis
    /// Cluster redirection of a large request).
    HalfResentClientLeft,
}

impl ServerFault {
    /// The text a client is told.
    pub fn text(&self) -> Cow<'_, str> {
        Cow::Borrowed(match self {
            ServerFault::Connect(e) | ServerFault::Register(e) | ServerFault::Socket(e) => e.text(),
            ServerFault::Closed => "Connection reset by peer",
            ServerFault::TimedOut => "Connection timed out",
            ServerFault::TlsHandshakeTimeout { ms } => {
                return Cow::Owned(format!("TLS handshake not finished after {ms} ms"))
            }
            ServerFault::BadReply(_) => "Invalid argument",
            ServerFault::Resp3Refused => "server does not speak RESP3",
            ServerFault::Resting(Some(last)) => return last.text(),
            ServerFault::Resting(None) | ServerFault::NoServer => "Connection refused",
            ServerFault::Unresolved => "Name or service not known",
            ServerFault::ZoneQueueFull => "zone queue full",
            ServerFault::RedirectedMidRequest => "redirected mid-request",
            ServerFault::UnsentAfterBadPair => "Protocol error in the request",
            ServerFault::HalfSentBadArg => "protocol error in a request",
            ServerFault::HalfSentClientLeft => "client closed in the middle of a request",
            ServerFault::HalfResentClientLeft => "client gone while its request was sent again",
        })
    }

    /// What the log says about a reply that ends a connection (more than
    /// the client is told).
    pub fn detail(&self) -> Cow<'_, str> {
        match self {
            ServerFault::BadReply(why) => Cow::Borrowed(why),
            ServerFault::Resp3Refused => {
                Cow::Borrowed("server does not speak RESP3 (HELLO 3 refused)")
            }
            _ => self.text(),
        }
    }

    /// The error reply for a request of `op` in `proto`'s wording
    /// (memcached `SERVER_ERROR <text>` or its binary error, Redis
    /// `-ERR <text>`).
    pub fn write_reply(&self, proto: Protocol, op: Op, out: &mut Vec<u8>) {
        proto.server_error(op, &self.text(), out);
    }

    /// The server failed: counted towards its ejection
    /// (`server_failure_limit`) and its reconnection backoff. False when
    /// the server is well and only one connection or request is unusable,
    /// when the failure was counted already (`Resting`), or when it is
    /// this process's or the client's.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            ServerFault::Connect(_)
                | ServerFault::Socket(_)
                | ServerFault::Closed
                | ServerFault::TimedOut
                | ServerFault::TlsHandshakeTimeout { .. }
                | ServerFault::BadReply(_)
        )
    }

    /// The request certainly did not reach the server: sending it to
    /// another one cannot run it twice. True only when nothing of it was
    /// written: no connection, not tried, or a TLS handshake that never
    /// finished (requests wait behind it, unsent). A failure on an open
    /// connection may come after the server ran the request.
    pub fn retry_safe(&self) -> bool {
        matches!(
            self,
            ServerFault::Connect(_)
                | ServerFault::Register(_)
                | ServerFault::TlsHandshakeTimeout { .. }
                | ServerFault::Resting(_)
                | ServerFault::Unresolved
                | ServerFault::NoServer
                | ServerFault::ZoneQueueFull
                | ServerFault::UnsentAfterBadPair
        )
    }

    /// A failure of the TLS layer: the operator's to fix (a certificate
    /// refused, a handshake that fails or never ends), so logged at the
    /// default level.
    pub fn is_tls(&self) -> bool {
        match self {
            ServerFault::Connect(e) | ServerFault::Socket(e) => e.is_tls(),
            ServerFault::TlsHandshakeTimeout { .. } => true,
            _ => false,
        }
    }

    /// How a connection closed for this failure is counted.
    pub fn ending(&self) -> Ending {
        match self {
            ServerFault::Closed => Ending::Eof,
            ServerFault::TimedOut | ServerFault::TlsHandshakeTimeout { .. } => Ending::Timeout,
            _ => Ending::Error,
        }
    }
}

impl fmt::Display for ServerFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::memcache::McOp;

    fn os(code: i32) -> IoFault {
        IoFault::from(&io::Error::from_raw_os_error(code))
    }

    fn every() -> Vec<ServerFault> {
        vec![
            ServerFault::Connect(os(libc::ECONNREFUSED)),
            ServerFault::Register(os(libc::ENOMEM)),
            ServerFault::Socket(os(libc::ECONNRESET)),
            ServerFault::Closed,
            ServerFault::TimedOut,
            ServerFault::TlsHandshakeTimeout { ms: 400 },
            ServerFault::BadReply("unexpected data from server".into()),
            ServerFault::Resp3Refused,
            ServerFault::Resting(None),
            ServerFault::Resting(Some(Box::new(ServerFault::TimedOut))),
            ServerFault::Unresolved,
            ServerFault::NoServer,
            ServerFault::ZoneQueueFull,
            ServerFault::RedirectedMidRequest,
            ServerFault::UnsentAfterBadPair,
            ServerFault::HalfSentBadArg,
            ServerFault::HalfSentClientLeft,
            ServerFault::HalfResentClientLeft,
        ]
    }

    #[test]
    fn wording_is_twemproxys_and_the_proxys_own() {
        let texts: Vec<String> = every().iter().map(|f| f.to_string()).collect();
        assert_eq!(
            texts,
            [
                "Connection refused",
                "Cannot allocate memory",
                "Connection reset by peer",
                "Connection reset by peer",
                "Connection timed out",
                "TLS handshake not finished after 400 ms",
                "Invalid argument",
                "server does not speak RESP3",
                "Connection refused",
                "Connection timed out",
                "Name or service not known",
                "Connection refused",
                "zone queue full",
                "redirected mid-request",
                "Protocol error in the request",
                "protocol error in a request",
                "client closed in the middle of a request",
                "client gone while its request was sent again",
            ]
        );
        let bad = ServerFault::BadReply("unexpected data from server".into());
        assert_eq!(bad.detail(), "unexpected data from server");
        assert_eq!(
            ServerFault::Resp3Refused.detail(),
            "server does not speak RESP3 (HELLO 3 refused)"
        );
        assert_eq!(ServerFault::TimedOut.detail(), "Connection timed out");
    }

    #[test]
    fn io_faults_keep_their_kind_and_words() {
        let refused = os(libc::ECONNREFUSED);
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        let tls = IoFault::from(&io::Error::new(
            io::ErrorKind::InvalidData,
            "TLS handshake failed: bad certificate",
        ));
        assert_eq!(tls.text(), "TLS handshake failed: bad certificate");
        assert!(ServerFault::Socket(tls.clone()).is_tls());
        assert!(ServerFault::Connect(tls).is_tls());
        assert!(!ServerFault::Connect(refused).is_tls());
        assert!(ServerFault::TlsHandshakeTimeout { ms: 1 }.is_tls());
        assert!(!ServerFault::BadReply("TLS in a reply".into()).is_tls());
    }

    #[test]
    fn replies_per_protocol() {
        let refused = ServerFault::Connect(os(libc::ECONNREFUSED));
        let mut out = Vec::new();
        refused.write_reply(Protocol::Memcache, Op::Mc(McOp::Get), &mut out);
        assert_eq!(out, b"SERVER_ERROR Connection refused\r\n");
        let get = crate::proto::redis::Cmd::lookup(b"GET").expect("GET");
        let op = Op::Redis(crate::proto::redis::RedisOp {
            cmd: get,
            class: get.class(),
        });
        out.clear();
        ServerFault::TimedOut.write_reply(Protocol::Redis, op, &mut out);
        assert_eq!(out, b"-ERR Connection timed out\r\n");
        out.clear();
        ServerFault::TlsHandshakeTimeout { ms: 800 }.write_reply(Protocol::Redis, op, &mut out);
        assert_eq!(out, b"-ERR TLS handshake not finished after 800 ms\r\n");
    }

    #[test]
    fn faults_are_the_servers_failures_only() {
        let faults: Vec<bool> = every().iter().map(ServerFault::is_fault).collect();
        assert_eq!(
            faults,
            [
                true, false, true, true, true, true, true, false, false, false, false, false,
                false, false, false, false, false, false
            ]
        );
    }

    #[test]
    fn retry_is_safe_only_before_anything_was_sent() {
        let safe: Vec<bool> = every().iter().map(ServerFault::retry_safe).collect();
        assert_eq!(
            safe,
            [
                true, true, false, false, false, true, false, false, true, true, true, true, true,
                false, true, false, false, false
            ]
        );
    }

    #[test]
    fn endings_count_eof_timeout_and_errors() {
        assert_eq!(ServerFault::Closed.ending(), Ending::Eof);
        assert_eq!(ServerFault::TimedOut.ending(), Ending::Timeout);
        assert_eq!(
            ServerFault::TlsHandshakeTimeout { ms: 1 }.ending(),
            Ending::Timeout
        );
        assert_eq!(ServerFault::Socket(os(libc::EPIPE)).ending(), Ending::Error);
        assert_eq!(ServerFault::HalfSentClientLeft.ending(), Ending::Error);
    }
}
