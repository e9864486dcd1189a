//! `walnut --top ADDR`: a live terminal view of a running walnut, read from
//! its admin port once a second: requests/s, errors/s and recent p50/p99
//! latency per pool.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
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

/// How long a port may take to speak first: the admin port never does,
/// the stats port sends its JSON at once.
const SPEAKS_FIRST: Duration = Duration::from_millis(100);

fn fetch(addr: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(SPEAKS_FIRST))?;
    let mut first = [0u8; 16];
    match s.peek(&mut first) {
        Ok(n) => return Err(not_admin(addr, &first[..n])),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        Err(e) => return Err(e),
    }
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

/// What to say of a port that spoke before it was asked anything.
fn not_admin(addr: &str, first: &[u8]) -> std::io::Error {
    let what = if first.starts_with(b"{") {
        "is a stats port (it sends twemproxy's JSON on connect)"
    } else {
        "is not a walnut admin port (it spoke first)"
    };
    std::io::Error::other(format!(
        "{addr} {what}; --top reads the admin port: 127.0.0.1:22223 beside the default stats port, else the address walnut logs at start (\"admin listening on ...\")"
    ))
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

/// Smallest terminal the view is drawn in; below it a one-line notice is.
const MIN_COLS: usize = 40;
const MIN_ROWS: usize = 4;

/// The terminal's size when stdout is one (asked again before every
/// screen, so a resized window is followed within a second).
fn terminal_size() -> Option<(usize, usize)> {
    // SAFETY: isatty and ioctl(TIOCGWINSZ) only read the descriptor's state
    // into the zeroed winsize they are given.
    unsafe {
        if libc::isatty(libc::STDOUT_FILENO) != 1 {
            return None;
        }
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) != 0 || ws.ws_col == 0 {
            return None;
        }
        Some((usize::from(ws.ws_col), usize::from(ws.ws_row)))
    }
}

/// `screen` cut to a `cols` x `rows` terminal: long lines end at the edge,
/// pools that do not fit are counted on the last line, and a terminal
/// smaller than the header gets one line saying so instead.
pub fn fit(screen: &str, cols: usize, rows: usize) -> String {
    if cols < MIN_COLS || rows < MIN_ROWS {
        let msg = format!("terminal {cols}x{rows}, needs {MIN_COLS}x{MIN_ROWS}");
        return msg.chars().take(cols.max(1)).collect::<String>() + "\n";
    }
    let lines: Vec<&str> = screen.lines().collect();
    let mut out = String::new();
    let shown = if lines.len() > rows {
        rows - 1
    } else {
        lines.len()
    };
    for line in &lines[..shown] {
        out.extend(line.chars().take(cols));
        out.push('\n');
    }
    if shown < lines.len() {
        let more = format!(
            "... {} more pools (enlarge the terminal)",
            lines.len() - shown
        );
        out.extend(more.chars().take(cols));
        out.push('\n');
    }
    out
}

/// Refresh every second until interrupted (or `iterations` screens). On a
/// terminal each screen replaces the last and fits the window; into a pipe
/// the screens follow one another as plain text, and a reader that goes
/// away (`walnut --top | head`) ends the view quietly with status 0.
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
                let out = match terminal_size() {
                    Some((cols, rows)) => format!("\x1b[H\x1b[2J{}", fit(&screen, cols, rows)),
                    None => format!("{screen}\n"),
                };
                let mut stdout = std::io::stdout().lock();
                if let Err(e) = stdout
                    .write_all(out.as_bytes())
                    .and_then(|_| stdout.flush())
                {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return 0;
                    }
                    eprintln!("walnut: --top: cannot write the view: {e}");
                    return 1;
                }
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

    #[test]
    fn fits_the_terminal() {
        let rows: Vec<PoolRow> = (0..10)
            .map(|i| PoolRow {
                name: format!("pool-with-a-rather-long-name-{i}"),
                ..PoolRow::default()
            })
            .collect();
        let screen = render("127.0.0.1:22223", &[], &rows, 1.0);
        // Wide and tall enough: unchanged.
        assert_eq!(fit(&screen, 200, 50), screen);
        // Narrow: every line cut at the edge.
        let narrow = fit(&screen, 45, 50);
        assert!(narrow.lines().all(|l| l.chars().count() <= 45), "{narrow}");
        assert_eq!(narrow.lines().count(), screen.lines().count());
        // Short: the pools that do not fit are counted on the last line.
        let short = fit(&screen, 80, 8);
        assert_eq!(short.lines().count(), 8, "{short}");
        assert!(
            short
                .lines()
                .last()
                .unwrap()
                .starts_with("... 6 more pools"),
            "{short}"
        );
        // Too small for the header: one line saying so, within the width.
        let tiny = fit(&screen, 30, 10);
        assert_eq!(tiny, "terminal 30x10, needs 40x4\n");
        assert_eq!(fit(&screen, 80, 3), "terminal 80x3, needs 40x4\n");
        assert_eq!(fit(&screen, 5, 1), "termi\n");
    }
}
