//! `mcload`: a closed-loop memcached text-protocol load generator.
//!
//! The benchmark uses it where the Debian load generators cannot measure what
//! is asked: `memcaslap` reports only min/avg/max and a log2 histogram of
//! latencies (no p50/p99/p99.9) and cannot count individual slow requests,
//! which the TCP_QUICKACK scenario needs. `mcload` records every request's
//! latency in a 1 µs-resolution histogram, on one thread with one epoll loop
//! (like `redis-benchmark`), so its own cost per request stays low.
//!
//! Output: one JSON object on stdout.

mod hist;
mod opts;

use hist::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use opts::Opts;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// One request in flight.
#[derive(Clone, Copy)]
enum Kind {
    Get,
    Set,
}

struct Conn {
    sock: TcpStream,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    rpos: usize,
    inflight: VecDeque<(Instant, Kind)>,
}

/// xorshift64*: cheap, deterministic key and op choice.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn key(buf: &mut Vec<u8>, i: u64) {
    let _ = write!(buf, "key:{i:010}");
}

/// Parse the reply at the head of `buf`; `Some((consumed, error))` when whole.
fn parse_reply(buf: &[u8], kind: Kind) -> Option<(usize, bool)> {
    let mut pos = 0;
    loop {
        let nl = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let line = &buf[pos..nl];
        match kind {
            Kind::Get if line.starts_with(b"VALUE ") => {
                let len: usize = std::str::from_utf8(line)
                    .ok()
                    .and_then(|l| l.split(' ').nth(3))
                    .and_then(|n| n.parse().ok())?;
                let end = nl + 2 + len + 2;
                if buf.len() < end {
                    return None;
                }
                pos = end;
            }
            Kind::Get => return Some((nl + 2, line != b"END")),
            Kind::Set => return Some((nl + 2, line != b"STORED")),
        }
    }
}

fn compose(c: &mut Conn, o: &Opts, rng: &mut Rng, value: &[u8]) {
    let now = Instant::now();
    for _ in 0..o.pipeline {
        let is_get = (rng.next() % 1000) < (o.get_ratio * 1000.0) as u64;
        if is_get {
            c.wbuf.extend_from_slice(b"get");
            for _ in 0..o.mget {
                c.wbuf.push(b' ');
                key(&mut c.wbuf, rng.next() % o.keyspace);
            }
            c.wbuf.extend_from_slice(b"\r\n");
            c.inflight.push_back((now, Kind::Get));
        } else {
            c.wbuf.extend_from_slice(b"set ");
            key(&mut c.wbuf, rng.next() % o.keyspace);
            let _ = write!(c.wbuf, " 0 0 {}\r\n", value.len());
            c.wbuf.extend_from_slice(value);
            c.wbuf.extend_from_slice(b"\r\n");
            c.inflight.push_back((now, Kind::Set));
        }
    }
}

fn flush(c: &mut Conn) -> io::Result<()> {
    while c.wpos < c.wbuf.len() {
        match c.sock.write(&c.wbuf[c.wpos..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => c.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    c.wbuf.clear();
    c.wpos = 0;
    Ok(())
}

/// Store every key once (blocking, pipelined) so gets hit.
fn prefill(o: &Opts, value: &[u8]) -> io::Result<()> {
    let mut s = std::net::TcpStream::connect(o.addr)?;
    s.set_nodelay(true)?;
    let batch = 64u64;
    let mut buf = Vec::new();
    let mut rbuf = vec![0u8; 65536];
    let mut i = 0;
    while i < o.keyspace {
        buf.clear();
        let n = batch.min(o.keyspace - i);
        for k in i..i + n {
            buf.extend_from_slice(b"set ");
            key(&mut buf, k);
            let _ = write!(buf, " 0 0 {}\r\n", value.len());
            buf.extend_from_slice(value);
            buf.extend_from_slice(b"\r\n");
        }
        s.write_all(&buf)?;
        let mut lines = 0;
        while lines < n {
            let got = s.read(&mut rbuf)?;
            if got == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            lines += rbuf[..got].iter().filter(|&&b| b == b'\n').count() as u64;
        }
        i += n;
    }
    Ok(())
}

fn run(o: &Opts) -> io::Result<()> {
    let value = vec![b'x'; o.value_size];
    if o.prefill {
        prefill(o, &value)?;
    }
    let mut poll = Poll::new()?;
    let mut conns = Vec::with_capacity(o.conns);
    for i in 0..o.conns {
        let std_sock = std::net::TcpStream::connect(o.addr)?;
        std_sock.set_nodelay(true)?;
        std_sock.set_nonblocking(true)?;
        let mut sock = TcpStream::from_std(std_sock);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        conns.push(Conn {
            sock,
            wbuf: Vec::new(),
            wpos: 0,
            rbuf: Vec::with_capacity(65536),
            rpos: 0,
            inflight: VecDeque::new(),
        });
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut hist = Histogram::new();
    let (mut done, mut errors) = (0u64, 0u64);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(o.duration);
    for c in conns.iter_mut() {
        compose(c, o, &mut rng, &value);
        flush(c)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut chunk = vec![0u8; 256 * 1024];
    let mut stopping = false;
    let mut last = start;
    'outer: loop {
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        let now = Instant::now();
        if now >= deadline || (o.requests > 0 && done >= o.requests) {
            stopping = true;
        }
        if stopping && conns.iter().all(|c| c.inflight.is_empty()) {
            break 'outer;
        }
        if stopping && now >= deadline + Duration::from_secs(5) {
            break 'outer;
        }
        for ev in events.iter() {
            let Some(c) = conns.get_mut(ev.token().0) else {
                continue;
            };
            flush(c)?;
            loop {
                match c.sock.read(&mut chunk) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => c.rbuf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            let done_at = Instant::now();
            while let Some(&(t0, kind)) = c.inflight.front() {
                let Some((used, err)) = parse_reply(&c.rbuf[c.rpos..], kind) else {
                    break;
                };
                c.rpos += used;
                c.inflight.pop_front();
                hist.record(done_at.duration_since(t0));
                last = done_at;
                done += 1;
                errors += u64::from(err);
            }
            if c.rpos == c.rbuf.len() {
                c.rbuf.clear();
                c.rpos = 0;
            }
            if c.inflight.is_empty() && !stopping {
                compose(c, o, &mut rng, &value);
                flush(c)?;
            }
        }
    }
    let secs = last.duration_since(start).as_secs_f64().max(1e-6);
    println!(
        "{{\"requests\":{done},\"errors\":{errors},\"seconds\":{secs:.4},\"rps\":{:.1},\
         \"p50_ms\":{:.3},\"p99_ms\":{:.3},\"p999_ms\":{:.3},\"max_ms\":{:.3},\"over_30ms\":{}}}",
        done as f64 / secs,
        hist.percentile(50.0),
        hist.percentile(99.0),
        hist.percentile(99.9),
        hist.max_ms(),
        hist.count_over(Duration::from_millis(30)),
    );
    Ok(())
}

fn main() {
    let opts = match Opts::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mcload: {e}\n{}", opts::USAGE);
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&opts) {
        eprintln!("mcload: {e}");
        std::process::exit(1);
    }
}
