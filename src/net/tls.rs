//! TLS on client and server connections.
//!
//! rustls is used because it is a state machine over byte buffers: it
//! never owns the socket, so it sits inside a worker's own edge-triggered
//! epoll loop with no async runtime and no thread. The `ring` provider
//! keeps the build free of cmake and a C toolchain beyond `cc`.
//!
//! A [`TlsStream`] is a non-blocking TCP socket plus a rustls connection.
//! Reads return plaintext and report a short read only when the socket
//! was drained *and* no decrypted byte is left inside rustls (the
//! worker's edge-triggered reads rely on that). Writes encrypt into
//! rustls and push ciphertext to the socket; ciphertext the socket did not
//! take yet stays inside rustls and goes out on the next write or
//! [`TlsStream::flush_tls`] (the next EPOLLOUT edge).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{self, Read, Write};
use std::sync::Arc;

/// Largest plaintext taken per `write` (rustls holds up to 64 KiB of
/// ciphertext before its writer refuses more).
const WRITE_CHUNK: usize = 32 * 1024;

/// CA bundle used for `server_tls` when no `server_tls_ca` is given.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from '{path}': {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate PEM in '{path}': {e}"))?;
    if certs.is_empty() {
        return Err(format!("no certificate found in '{path}'"));
    }
    Ok(certs)
}

fn load_key(path: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("cannot read a private key from '{path}': {e}"))
}

fn load_roots(path: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("bad CA certificate in '{path}': {e}"))?;
    }
    Ok(roots)
}

/// The listener side: certificate chain, key and optional client CA
/// (mutual TLS: a client without a certificate signed by it is refused).
pub fn server_config(
    cert: &str,
    key: &str,
    client_ca: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = load_certs(cert)?;
    let key = load_key(key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(load_roots(ca)?),
                provider(),
            )
            .build()
            .map_err(|e| format!("client CA '{ca}': {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| cert_key_error(cert, &e))?;
    Ok(Arc::new(config))
}

/// The server side: CA to verify servers with (the system bundle when
/// `None`), and an optional client certificate and key.
pub fn client_config(
    ca: Option<&str>,
    cert_key: Option<(&str, &str)>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = load_roots(ca.unwrap_or(SYSTEM_CA_BUNDLE))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match cert_key {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| cert_key_error(cert, &e))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Why a certificate and its key were refused, in words that say what to
/// do: an X.509 version 1 certificate (what `openssl x509 -req` makes
/// without extensions) is refused by rustls as `UnsupportedCertVersion`,
/// which is no mismatch with the key.
fn cert_key_error(cert: &str, e: &rustls::Error) -> String {
    if format!("{e:?}").contains("UnsupportedCertVersion") {
        format!(
            "certificate '{cert}' is X.509 version 1; TLS here needs version 3: sign it again with extensions, e.g. openssl x509 -req ... -extfile <(printf 'subjectAltName=DNS:HOST')"
        )
    } else {
        format!("certificate '{cert}' and key do not fit: {e}")
    }
}

/// The name a server's certificate must carry: a DNS name or an IP.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string())
        .map_err(|e| format!("'{host}' is not a valid TLS name: {e}"))
}

/// When the first certificate in `path` expires (seconds since the
/// epoch), read when the configuration is loaded.
pub fn not_after(path: &str) -> Option<i64> {
    let certs = load_certs(path).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(certs[0].as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// Whole days from now until `not_after` (negative once expired).
pub fn days_left(not_after: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    (not_after - now).div_euclid(86_400)
}

/// A TCP connection carrying TLS.
#[derive(Debug)]
pub struct TlsStream {
    /// The socket.
    pub tcp: mio::net::TcpStream,
    conn: rustls::Connection,
}

impl TlsStream {
    /// A connection accepted on a TLS listener.
    pub fn accept(
        tcp: mio::net::TcpStream,
        config: &Arc<rustls::ServerConfig>,
    ) -> io::Result<TlsStream> {
        let conn = rustls::ServerConnection::new(config.clone()).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            conn: conn.into(),
        })
    }

    /// A connection to a TLS server (`name`: what its certificate must say).
    pub fn connect(
        tcp: mio::net::TcpStream,
        config: &Arc<rustls::ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<TlsStream> {
        let conn = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            conn: conn.into(),
        })
    }

    /// Whether the handshake is still going on.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Push buffered ciphertext to the socket until it is all out or the
    /// socket is full (then `Ok`: the next EPOLLOUT edge comes back here).
    pub fn flush_tls(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Say goodbye (close_notify), best effort.
    pub fn close(&mut self) {
        self.conn.send_close_notify();
        let _ = self.flush_tls();
    }

    /// A protocol error: send rustls's alert (best effort) and report it.
    fn fail(&mut self, e: rustls::Error) -> io::Error {
        let _ = self.flush_tls();
        let what = if self.conn.is_handshaking() {
            match &e {
                rustls::Error::InvalidMessage(_) => {
                    "TLS handshake failed (is the peer speaking plain text?)"
                }
                _ => "TLS handshake failed",
            }
        } else {
            "TLS error"
        };
        io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
    }
}

impl Read for TlsStream {
    /// Fill `buf` with plaintext. Less than `buf.len()` means the socket
    /// is drained and rustls holds no plaintext; `Ok(0)`: the peer closed.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        let mut eof = false;
        loop {
            match self.conn.reader().read(&mut buf[n..]) {
                Ok(0) if n < buf.len() => {
                    // close_notify received.
                    eof = true;
                    break;
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    eof = true;
                    break;
                }
                Err(e) => return Err(e),
            }
            if n == buf.len() {
                break;
            }
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => {
                    eof = true;
                    // Whatever rustls still holds is read above next time.
                    if let Err(e) = self.conn.process_new_packets() {
                        return Err(self.fail(e));
                    }
                    if let Ok(k) = self.conn.reader().read(&mut buf[n..]) {
                        n += k;
                    }
                    break;
                }
                Ok(_) => {
                    if let Err(e) = self.conn.process_new_packets() {
                        return Err(self.fail(e));
                    }
                    // Handshake replies, key updates.
                    self.flush_tls()?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if n == 0 && !eof {
                        return Err(e);
                    }
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if n == 0 && !eof {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_tls()?;
        if self.conn.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self
            .conn
            .writer()
            .write(&buf[..buf.len().min(WRITE_CHUNK)])?;
        self.flush_tls()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_tls()
    }
}

/// A pool's TLS as its connections use it: built once per worker from
/// the pool's configuration (files are read again on every reload).
#[derive(Debug, Default)]
pub struct PoolTls {
    /// The listener's config; `None`: plain TCP.
    accept: Option<Arc<rustls::ServerConfig>>,
    /// The servers' config; `None`: plain TCP.
    connect: Option<Arc<rustls::ClientConfig>>,
    /// `server_tls_name`, checked instead of each server's host.
    name: Option<ServerName<'static>>,
    /// Why a configured side could not be built (its files changed
    /// since the configuration was checked): connections are refused.
    broken: Option<String>,
    /// The pool asked for TLS on its listener.
    listen_wanted: bool,
    /// The pool asked for TLS to its servers.
    servers_wanted: bool,
}

impl PoolTls {
    /// TLS on the pool's listener, from its certificate and key files
    /// (and the CA that client certificates must chain to).
    pub fn listen(&mut self, cert: &str, key: &str, client_ca: Option<&str>) {
        self.listen_wanted = true;
        match server_config(cert, key, client_ca) {
            Ok(c) => self.accept = Some(c),
            Err(e) => self.broken = Some(e),
        }
    }

    /// TLS to the pool's servers: the CA to check them against, a client
    /// certificate and key, and a name to check instead of each host.
    pub fn servers(&mut self, ca: Option<&str>, pair: Option<(&str, &str)>, name: Option<&str>) {
        self.servers_wanted = true;
        match client_config(ca, pair) {
            Ok(c) => self.connect = Some(c),
            Err(e) => self.broken = Some(e),
        }
        self.name = name.and_then(|n| server_name(n).ok());
    }

    /// Why TLS could not be set up, if it could not.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// A client accepted on the pool's listener, wrapped in TLS when the
    /// listener has it.
    pub fn accepted(&self, sock: super::Stream) -> io::Result<super::Stream> {
        match (sock, &self.accept) {
            (super::Stream::Tcp(tcp), Some(cfg)) => {
                Ok(super::Stream::Tls(Box::new(TlsStream::accept(tcp, cfg)?)))
            }
            (_, None) if self.listen_wanted => Err(io::Error::other(
                self.broken
                    .clone()
                    .unwrap_or_else(|| "TLS not set up".into()),
            )),
            (sock, _) => Ok(sock),
        }
    }

    /// A connection being opened to a server at `host`, wrapped in TLS
    /// when the pool's servers speak it.
    pub fn connected(&self, sock: super::Stream, host: &str) -> io::Result<super::Stream> {
        match (sock, &self.connect) {
            (super::Stream::Tcp(tcp), Some(cfg)) => {
                let name = match &self.name {
                    Some(n) => n.clone(),
                    None => server_name(host).map_err(io::Error::other)?,
                };
                Ok(super::Stream::Tls(Box::new(TlsStream::connect(
                    tcp, cfg, name,
                )?)))
            }
            (_, None) if self.servers_wanted => Err(io::Error::other(
                self.broken
                    .clone()
                    .unwrap_or_else(|| "TLS not set up".into()),
            )),
            (sock, _) => Ok(sock),
        }
    }

    /// The same for a blocking connection (the migrator's).
    pub fn connected_blocking(
        &self,
        tcp: std::net::TcpStream,
        host: &str,
    ) -> io::Result<Box<dyn ReadWrite>> {
        match &self.connect {
            Some(cfg) => {
                let name = match &self.name {
                    Some(n) => n.clone(),
                    None => server_name(host).map_err(io::Error::other)?,
                };
                let conn =
                    rustls::ClientConnection::new(cfg.clone(), name).map_err(io::Error::other)?;
                Ok(Box::new(rustls::StreamOwned::new(conn, tcp)))
            }
            None if self.servers_wanted => Err(io::Error::other(
                self.broken
                    .clone()
                    .unwrap_or_else(|| "TLS not set up".into()),
            )),
            None => Ok(Box::new(tcp)),
        }
    }
}

/// A blocking byte stream (plain or TLS).
pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Interest, Poll, Token};
    use std::time::{Duration, Instant};

    fn vector(name: &str) -> String {
        format!("{}/tests/vectors/tls/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    /// A TLS client and server over loopback.
    fn pair() -> (TlsStream, TlsStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().unwrap();
        for s in [&client, &server] {
            s.set_nonblocking(true).unwrap();
        }
        let scfg = server_config(&vector("server.crt"), &vector("server.key"), None).unwrap();
        let ccfg = client_config(Some(&vector("ca.crt")), None).unwrap();
        let s = TlsStream::accept(mio::net::TcpStream::from_std(server), &scfg).unwrap();
        let c = TlsStream::connect(
            mio::net::TcpStream::from_std(client),
            &ccfg,
            server_name("localhost").unwrap(),
        )
        .unwrap();
        (c, s)
    }

    /// Send `data` from `a` to `b` as the worker does: write until
    /// WouldBlock, flush on EPOLLOUT edges, read until a short read.
    fn transfer(a: &mut TlsStream, b: &mut TlsStream, data: &[u8]) -> (Vec<u8>, usize) {
        let mut poll = Poll::new().unwrap();
        let both = Interest::READABLE | Interest::WRITABLE;
        poll.registry()
            .register(&mut a.tcp, Token(0), both)
            .unwrap();
        poll.registry()
            .register(&mut b.tcp, Token(1), both)
            .unwrap();
        let mut events = Events::with_capacity(8);
        let (mut sent, mut got, mut blocked) = (0, Vec::new(), 0);
        let mut buf = vec![0u8; 16 * 1024];
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < data.len() {
            if Instant::now() > deadline {
                let w = a.write(&data[sent..]);
                let r = b.read(&mut buf);
                panic!(
                    "stalled at {} of {} (sent {sent}): a wants_write {} write {:?}, b wants_write {} read {:?}",
                    got.len(),
                    data.len(),
                    a.conn.wants_write(),
                    w,
                    b.conn.wants_write(),
                    r
                );
            }
            // The sender reads too (handshake messages), as a worker
            // reads every connection it has.
            match a.read(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => panic!("sender read {other:?}"),
            }
            a.flush_tls().unwrap();
            while sent < data.len() {
                match a.write(&data[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        blocked += 1;
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            b.flush_tls().unwrap();
            loop {
                match b.read(&mut buf) {
                    Ok(0) => panic!("eof"),
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        if n < buf.len() {
                            break; // short: drained, wait for an edge
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            if got.len() < data.len() {
                poll.poll(&mut events, Some(Duration::from_millis(200)))
                    .unwrap();
            }
        }
        poll.registry().deregister(&mut a.tcp).unwrap();
        poll.registry().deregister(&mut b.tcp).unwrap();
        (got, blocked)
    }

    #[test]
    fn large_transfers_both_ways_with_partial_writes() {
        let (mut c, mut s) = pair();
        let up: Vec<u8> = (0..8_000_000u32).map(|i| (i % 251) as u8).collect();
        let (got, blocked) = transfer(&mut c, &mut s, &up);
        assert!(got == up, "{} bytes arrived of {}", got.len(), up.len());
        assert!(
            blocked > 0,
            "the socket never refused a write: nothing partial tested"
        );
        assert!(!c.is_handshaking() && !s.is_handshaking());
        let down: Vec<u8> = (0..3_000_000u32).map(|i| (i % 13) as u8).collect();
        assert!(transfer(&mut s, &mut c, &down).0 == down);
    }

    #[test]
    fn plain_text_to_a_tls_server_is_a_clear_error() {
        let (c, mut s) = pair();
        let mut raw = c.tcp;
        raw.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let err = loop {
            match s.read(&mut [0u8; 64]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline);
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => break e,
                Ok(n) => panic!("read {n} plaintext bytes"),
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("plain text"), "{err}");
    }

    #[test]
    fn certificate_files_are_checked() {
        let e = server_config(&vector("server.crt"), &vector("ca.crt"), None).unwrap_err();
        assert!(e.contains("private key"), "{e}");
        let e = client_config(Some("/nonexistent/ca.pem"), None).unwrap_err();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        let t = not_after(&vector("server.crt")).unwrap();
        assert!(days_left(t) > 30_000);
    }
}
