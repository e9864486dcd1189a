//! The migrator's blocking connection to one server: just enough RESP and
//! memcached (text and meta) to list keys and move one, with timeouts so
//! a server that stops answering ends the attempt instead of hanging it.

use super::commands::{
    dump, mc_delete, mc_get, mc_store, migrate, pttl, resp_command, restore, Target,
};
use crate::config::{PoolConfig, ServerAddr};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `MIGRATE` may wait on the new owner (connect, each write
/// and read), under [`IO_TIMEOUT`].
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest line or value read (a corrupt length must not allocate wildly).
const MAX_READ: usize = 1 << 30;

use crate::net::tls::ReadWrite as Stream;

/// A RESP reply.
#[derive(Debug, PartialEq, Eq)]
enum Resp {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

/// What became of one key of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Copied (this many bytes) and, if asked, deleted here.
    Moved(usize),
    /// Gone here, or a newer value was on every new owner.
    Skipped,
    /// A new owner refused it: left here.
    Failed,
}

/// What a walk of a server's keys hands each step's keys to (with the
/// connection, to move them on): how many keys the next step should list.
pub type OnKeys<'a> = dyn FnMut(&[&[u8]], &mut Conn) -> io::Result<usize> + 'a;

/// One blocking connection.
pub struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    at: usize,
    redis: bool,
}

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// The server will not list its keys (the command refused, renamed away or
/// too old): walking it again would not help (`ErrorKind::Unsupported`).
fn refused(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, msg.into())
}

/// `%XX` decoding of a metadump key.
fn url_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(&s[i + 1..i + 3]), 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// The key of a `lru_crawler metadump` line (`key=<url-encoded> exp=...`).
fn metadump_key(line: &[u8]) -> Option<Vec<u8>> {
    let rest = line.strip_prefix(b"key=")?;
    let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
    Some(url_decode(&rest[..end]))
}

impl Conn {
    /// Connect to `addr` of `pool` (AUTH and SELECT as the workers do).
    pub fn open(addr: &ServerAddr, pool: &PoolConfig) -> io::Result<Conn> {
        let stream: Box<dyn Stream> = match addr {
            ServerAddr::Tcp { host, port } => {
                let sa = crate::net::resolve(host, *port)?;
                let s = std::net::TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                let _ = s.set_nodelay(true);
                pool.security.tls().connected_blocking(s, host)?
            }
            ServerAddr::Unix { path } => {
                let s = std::os::unix::net::UnixStream::connect(path)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                Box::new(s)
            }
        };
        let mut c = Conn {
            stream,
            buf: Vec::new(),
            at: 0,
            redis: pool.redis,
        };
        if pool.redis {
            if let Some(pw) = &pool.redis_auth {
                match &pool.security.redis_auth_user {
                    Some(u) => c.send(&resp_command(&[b"AUTH", u.as_bytes(), pw.as_bytes()]))?,
                    None => c.send(&resp_command(&[b"AUTH", pw.as_bytes()]))?,
                }
                if let Resp::Error(e) = c.resp()? {
                    return Err(err(String::from_utf8_lossy(&e).into_owned()));
                }
            }
            if pool.redis_db != 0 {
                c.send(&resp_command(&[
                    b"SELECT",
                    pool.redis_db.to_string().as_bytes(),
                ]))?;
                if let Resp::Error(e) = c.resp()? {
                    return Err(err(String::from_utf8_lossy(&e).into_owned()));
                }
            }
        }
        Ok(c)
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed",
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// One line without its CRLF.
    fn line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(nl) = memchr::memchr(b'\n', &self.buf[self.at..]) {
                let end = self.at + nl;
                let line = self.buf[self.at..end]
                    .strip_suffix(b"\r")
                    .unwrap_or(&self.buf[self.at..end])
                    .to_vec();
                self.at = end + 1;
                return Ok(line);
            }
            if self.buf.len() - self.at > MAX_READ {
                return Err(err("line too long"));
            }
            self.fill()?;
        }
    }

    /// `n` bytes then a CRLF.
    fn block(&mut self, n: usize) -> io::Result<Vec<u8>> {
        if n > MAX_READ {
            return Err(err("value too large"));
        }
        while self.buf.len() - self.at < n + 2 {
            self.fill()?;
        }
        let v = self.buf[self.at..self.at + n].to_vec();
        self.at += n + 2;
        Ok(v)
    }

    fn resp(&mut self) -> io::Result<Resp> {
        let line = self.line()?;
        let (kind, rest) = line.split_first().ok_or_else(|| err("empty reply"))?;
        let num = || -> io::Result<i64> {
            std::str::from_utf8(rest)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err("bad number in reply"))
        };
        Ok(match kind {
            b'+' => Resp::Simple(rest.to_vec()),
            b'-' => Resp::Error(rest.to_vec()),
            b':' => Resp::Int(num()?),
            b'$' => match num()? {
                n if n < 0 => Resp::Bulk(None),
                n => Resp::Bulk(Some(self.block(n as usize)?)),
            },
            b'*' => match num()? {
                n if n < 0 => Resp::Array(None),
                n => {
                    let mut v = Vec::with_capacity((n as usize).min(1024));
                    for _ in 0..n {
                        v.push(self.resp()?);
                    }
                    Resp::Array(Some(v))
                }
            },
            b'_' => Resp::Bulk(None),
            _ => return Err(err("unexpected reply")),
        })
    }

    /// How many keys the server holds (Redis `DBSIZE`, memcached
    /// `curr_items`): the migration's estimate of the work ahead.
    pub fn key_count(&mut self) -> io::Result<u64> {
        if self.redis {
            self.send(&resp_command(&[b"DBSIZE"]))?;
            return match self.resp()? {
                Resp::Int(n) => Ok(n.max(0) as u64),
                _ => Err(err("DBSIZE: unexpected reply")),
            };
        }
        self.send(b"stats\r\n")?;
        let mut n = 0;
        loop {
            let line = self.line()?;
            if line == b"END" {
                return Ok(n);
            }
            if let Some(v) = line.strip_prefix(b"STAT curr_items ") {
                n = std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            } else if !line.starts_with(b"STAT ") {
                return Err(err("stats: unexpected reply"));
            }
        }
    }

    /// Every key of a Redis server (`SCAN`), handed to `f` as each step
    /// lists them; `f` says how many the next step should ask for.
    pub fn scan_redis(&mut self, f: &mut OnKeys<'_>) -> io::Result<()> {
        let mut cursor = b"0".to_vec();
        let mut count = 100;
        loop {
            let n = count.to_string();
            self.send(&resp_command(&[b"SCAN", &cursor, b"COUNT", n.as_bytes()]))?;
            let Resp::Array(Some(mut parts)) = self.resp()? else {
                return Err(refused("SCAN: unexpected reply"));
            };
            let (Some(Resp::Array(Some(keys))), Some(Resp::Bulk(Some(next)))) =
                (parts.pop(), parts.pop())
            else {
                return Err(err("SCAN: unexpected reply"));
            };
            let keys: Vec<&[u8]> = keys
                .iter()
                .filter_map(|k| match k {
                    Resp::Bulk(Some(k)) => Some(k.as_slice()),
                    _ => None,
                })
                .collect();
            count = f(&keys, self)?;
            if next == b"0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Every key of a memcached server (`lru_crawler metadump all`), handed
    /// to `f` once the dump is read, as many at a time as `f` last asked
    /// for.
    pub fn scan_memcache(&mut self, f: &mut OnKeys<'_>) -> io::Result<()> {
        let mut keys = Vec::new();
        let mut tries = 0;
        loop {
            self.send(b"lru_crawler metadump all\r\n")?;
            let first = self.line()?;
            if first.starts_with(b"BUSY") {
                // Another crawl runs: wait for it (10 s at most, then this
                // walk fails and the next pass tries again).
                if tries == 100 {
                    return Err(err("lru_crawler metadump: the crawler stays busy"));
                }
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let mut line = first;
            loop {
                if line == b"END" {
                    break;
                }
                if line.starts_with(b"ERROR") || line.starts_with(b"CLIENT_ERROR") {
                    return Err(refused(format!(
                        "lru_crawler metadump: {} (migration needs memcached 1.6 or later)",
                        String::from_utf8_lossy(&line)
                    )));
                }
                if let Some(k) = metadump_key(&line) {
                    keys.push(k);
                }
                line = self.line()?;
            }
            break;
        }
        let mut at = 0;
        let mut count = 100;
        while at < keys.len() {
            let end = keys.len().min(at + count.max(1));
            let chunk: Vec<&[u8]> = keys[at..end].iter().map(Vec::as_slice).collect();
            count = f(&chunk, self)?;
            at = end;
        }
        Ok(())
    }

    /// Copy each of `keys` with its TTL (and flags) to each of `dsts`
    /// where it is absent (a newer value there wins), then, when
    /// `delete`, delete it here, only once every copy succeeded. Each step
    /// is one pipelined batch: the reads here, the writes to each new
    /// owner, the deletes here. What became of each key, in order.
    pub fn move_batch(
        &mut self,
        keys: &[&[u8]],
        dsts: &mut [&mut Conn],
        delete: bool,
    ) -> io::Result<Vec<Outcome>> {
        let mut req = Vec::with_capacity(keys.iter().map(|k| k.len() * 2 + 40).sum());
        for key in keys {
            if self.redis {
                req.extend_from_slice(&dump(key));
                req.extend_from_slice(&pttl(key));
            } else {
                req.extend_from_slice(&mc_get(key));
            }
        }
        self.send(&req)?;
        let mut read = Vec::with_capacity(keys.len());
        for key in keys {
            read.push(if self.redis {
                self.read_redis(key)?
            } else {
                self.read_memcache(key)?
            });
        }
        let mut out: Vec<Outcome> = read
            .iter()
            .map(|r| match r {
                Some((_, len)) => Outcome::Moved(*len),
                None => Outcome::Skipped,
            })
            .collect();
        let mut stored = vec![false; keys.len()];
        for dst in dsts.iter_mut() {
            let mut req = Vec::new();
            for (store, _) in read.iter().flatten() {
                req.extend_from_slice(store);
            }
            dst.send(&req)?;
            for (i, r) in read.iter().enumerate() {
                if r.is_none() {
                    continue;
                }
                match dst.stored(self.redis)? {
                    Ok(s) => stored[i] |= s,
                    Err(e) => {
                        crate::log_info!("migration: key not moved: {e}");
                        out[i] = Outcome::Failed;
                    }
                }
            }
        }
        let gone: Vec<&[u8]> = keys
            .iter()
            .zip(&out)
            .filter(|(_, o)| !matches!(o, Outcome::Skipped | Outcome::Failed))
            .map(|(k, _)| *k)
            .collect();
        if delete && !gone.is_empty() {
            if self.redis {
                let mut args: Vec<&[u8]> = vec![b"DEL"];
                args.extend(&gone);
                self.send(&resp_command(&args))?;
                self.resp()?;
            } else {
                let mut req = Vec::new();
                for key in &gone {
                    req.extend_from_slice(&mc_delete(key));
                }
                self.send(&req)?;
                for _ in &gone {
                    self.line()?;
                }
            }
        }
        for (o, s) in out.iter_mut().zip(stored) {
            if matches!(o, Outcome::Moved(_)) && !s {
                // Every new owner had a newer value.
                *o = Outcome::Skipped;
            }
        }
        Ok(out)
    }

    /// The reply to one `RESTORE` or `ms ... ME`: whether it stored the
    /// key (false: a newer value was there), or the server's refusal.
    fn stored(&mut self, redis: bool) -> io::Result<Result<bool, String>> {
        Ok(if redis {
            match self.resp()? {
                Resp::Simple(_) => Ok(true),
                Resp::Error(e) if e.starts_with(b"BUSYKEY") => Ok(false),
                Resp::Error(e) => Err(String::from_utf8_lossy(&e).into_owned()),
                _ => return Err(err("RESTORE: unexpected reply")),
            }
        } else {
            match self.line()?.as_slice() {
                b"HD" => Ok(true),
                b"NS" | b"EX" => Ok(false),
                other => Err(format!("ms: {}", String::from_utf8_lossy(other))),
            }
        })
    }

    /// Redis `MIGRATE` of `keys` to `to` (no `REPLACE`: a key the new
    /// owner has is left here, and the server answers `BUSYKEY`): the
    /// server sends them itself, in one round trip, and deletes each one
    /// the new owner stored. `Ok(true)` when the server moved them (or
    /// found none), else the server's error: some keys may have moved,
    /// the rest are still here.
    pub fn migrate(&mut self, to: &Target, keys: &[&[u8]]) -> io::Result<Result<(), String>> {
        self.send(&migrate(to, MIGRATE_TIMEOUT.as_millis() as u64, keys))?;
        Ok(match self.resp()? {
            Resp::Simple(_) => Ok(()),
            Resp::Error(e) => Err(String::from_utf8_lossy(&e).into_owned()),
            _ => return Err(err("MIGRATE: unexpected reply")),
        })
    }

    /// The time a no-op takes to come back (Redis `PING`, memcached `mn`):
    /// how long the server's queue is.
    pub fn ping(&mut self) -> io::Result<Duration> {
        let at = Instant::now();
        if self.redis {
            self.send(&resp_command(&[b"PING"]))?;
            self.resp()?;
        } else {
            self.send(b"mn\r\n")?;
            self.line()?;
        }
        Ok(at.elapsed())
    }

    /// The replies to `DUMP` + `PTTL`: the `RESTORE` that recreates the
    /// key, and its size.
    fn read_redis(&mut self, key: &[u8]) -> io::Result<Option<(Vec<u8>, usize)>> {
        let dump = self.resp()?;
        let ttl = self.resp()?;
        let (Resp::Bulk(Some(payload)), Resp::Int(ttl)) = (dump, ttl) else {
            return Ok(None);
        };
        if ttl == -2 {
            return Ok(None);
        }
        let len = payload.len();
        Ok(Some((restore(key, ttl, &payload), len)))
    }

    /// The reply to `mg k v f t`: the `ms ... ME` (add) that recreates the
    /// item, and its size.
    fn read_memcache(&mut self, key: &[u8]) -> io::Result<Option<(Vec<u8>, usize)>> {
        let head = self.line()?;
        if head == b"ERROR" {
            // Not a miss (`EN`): a server without the meta commands.
            return Err(err(
                "mg: unknown command (migration needs memcached 1.6 or later)",
            ));
        }
        if !head.starts_with(b"VA ") {
            return Ok(None);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut words = head.split(' ').skip(1);
        let len: usize = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| err("mg: bad reply"))?;
        let (mut flags, mut ttl) = ("0".to_string(), 0i64);
        for w in words {
            if let Some(f) = w.strip_prefix('f') {
                flags = f.to_string();
            } else if let Some(t) = w.strip_prefix('t') {
                ttl = t.parse().unwrap_or(0);
            }
        }
        let value = self.block(len)?;
        Ok(Some((mc_store(key, flags, ttl, &value), len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadump_lines() {
        assert_eq!(
            metadump_key(b"key=user%3A1 exp=-1 la=1 cas=2 fetch=no cls=1 size=63"),
            Some(b"user:1".to_vec())
        );
        assert_eq!(metadump_key(b"key=a%20b exp=5"), Some(b"a b".to_vec()));
        assert_eq!(metadump_key(b"key=plain"), Some(b"plain".to_vec()));
        assert_eq!(metadump_key(b"END"), None);
        assert_eq!(url_decode(b"%"), b"%".to_vec());
        assert_eq!(url_decode(b"x%4"), b"x%4".to_vec());
    }
}
