//! `walnut --top ADDR`: a live terminal view of a running walnut, read from
//! its admin port once a second: requests/s, errors/s and recent p50/p99
//! latency per pool.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One pool line of the `pools` command.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolRow {
    /// Pool name.
    pub name: String,
    /// Requests forwarded (counter).
    pub requests: u64,
    /// Errors (counter).
    pub errors: u64,
    /// Client connections.
    pub clients: u64,
    /// Recent p50, µs.
    pub p50: u64,
    /// Recent p99, µs.
    pub p99: u64,
}

/// Parse the per-pool summary lines of the `pools` command.
pub fn parse_pools(text: &str) -> Vec<PoolRow> {
    let mut rows = Vec::new();
    for line in text.lines() {
        if line.contains(" class=") || !line.starts_with("pool=") {
            continue;
        }
        let kv: HashMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let n = |k: &str| kv.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        rows.push(PoolRow {
            name: kv.get("pool").copied().unwrap_or("").to_string(),
            requests: n("requests"),
            errors: n("errors"),
            clients: n("client_connections"),
            p50: n("p50_us"),
            p99: n("p99_us"),
        });
    }
    rows
}

fn fetch(addr: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"pools\r\n")?;
    let mut out = String::new();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let l = line.trim_end();
        if l == "END" {
            break;
        }
        if let Some(e) = l.strip_prefix("ERR ") {
            return Err(std::io::Error::other(e.to_string()));
        }
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

/// Render one screen from the previous and current samples.
pub fn render(addr: &str, prev: &[PoolRow], cur: &[PoolRow], secs: f64) -> String {
    let mut s = format!(
        "walnut top — {addr}\n\n{:<20} {:>10} {:>10} {:>8} {:>10} {:>10}\n",
        "POOL", "REQ/S", "ERR/S", "CLIENTS", "P50(us)", "P99(us)"
    );
    for row in cur {
        let before = prev.iter().find(|p| p.name == row.name);
        let rate = |now: u64, then: Option<u64>| match then {
            Some(t) if secs > 0.0 => now.saturating_sub(t) as f64 / secs,
            _ => 0.0,
        };
        s.push_str(&format!(
            "{:<20} {:>10.0} {:>10.1} {:>8} {:>10} {:>10}\n",
            row.name,
            rate(row.requests, before.map(|b| b.requests)),
            rate(row.errors, before.map(|b| b.errors)),
            row.clients,
            row.p50,
            row.p99
        ));
    }
    s
}

/// Refresh every second until interrupted (or `iterations` screens).
pub fn run(addr: &str, iterations: Option<u64>) -> i32 {
    let mut prev: Vec<PoolRow> = Vec::new();
    let mut prev_at = Instant::now();
    let mut n = 0;
    loop {
        match fetch(addr) {
            Ok(text) => {
                let cur = parse_pools(&text);
                let now = Instant::now();
                let screen = render(addr, &prev, &cur, now.duration_since(prev_at).as_secs_f64());
                print!("\x1b[H\x1b[2J{screen}");
                let _ = std::io::stdout().flush();
                prev = cur;
                prev_at = now;
            }
            Err(e) => {
                eprintln!("walnut: cannot read {addr}: {e}");
                return 1;
            }
        }
        n += 1;
        if iterations.is_some_and(|max| n >= max) {
            return 0;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_renders() {
        let text = "pool=alpha protocol=redis servers=2 client_connections=3 requests=100 errors=1 window=recent count=5 avg_us=1 p50_us=40 p90_us=1 p95_us=1 p98_us=1 p99_us=90 p999_us=1 max_us=1\n\
                    pool=alpha class=read window=lifetime count=5\n";
        let rows = parse_pools(text);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].requests, 100);
        assert_eq!((rows[0].p50, rows[0].p99, rows[0].clients), (40, 90, 3));
        let mut prev = rows.clone();
        prev[0].requests = 50;
        let screen = render("x", &prev, &rows, 2.0);
        assert!(screen.contains("alpha"));
        assert!(screen.contains(" 25 "), "{screen}");
    }
}
