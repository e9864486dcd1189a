//! Requests on the admin port: an inline text line (`CMD args\r\n`, as
//! typed into `nc`), a RESP array (as `redis-cli` sends), or an HTTP GET.
//! Replies are framed to match the request.

/// Largest request accepted (a longer one closes the connection).
pub const MAX_REQUEST: usize = 16 * 1024;

/// How the client spoke, so the reply can answer in kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Plain text lines, ending with `END`.
    Inline,
    /// RESP: bulk strings, `+OK`, `-ERR`.
    Resp,
    /// HTTP/1.x; the connection closes after the reply.
    Http,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Framing of the request.
    pub framing: Framing,
    /// Words (for HTTP: `GET` and the path).
    pub args: Vec<String>,
}

/// Outcome of parsing the start of `buf`.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A request and the bytes it used.
    Done(Request, usize),
    /// More bytes needed.
    Incomplete,
    /// Unparseable; close the connection after this error.
    Invalid(&'static str),
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn num(bytes: &[u8]) -> Option<usize> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Parse one request from the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    if buf.starts_with(b"GET ") || buf.starts_with(b"HEAD ") {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            return incomplete(buf);
        };
        let line_end = find_crlf(buf, 0).unwrap_or(end);
        let line = String::from_utf8_lossy(&buf[..line_end]);
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or("GET").to_string();
        let path = words.next().unwrap_or("/").to_string();
        return Parsed::Done(
            Request {
                framing: Framing::Http,
                args: vec![method, path],
            },
            end + 4,
        );
    }
    if buf[0] == b'*' {
        return parse_resp(buf);
    }
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return incomplete(buf);
    };
    let line = String::from_utf8_lossy(&buf[..nl]);
    let args = line.split_whitespace().map(str::to_string).collect();
    Parsed::Done(
        Request {
            framing: Framing::Inline,
            args,
        },
        nl + 1,
    )
}

fn incomplete(buf: &[u8]) -> Parsed {
    if buf.len() > MAX_REQUEST {
        Parsed::Invalid("request too long")
    } else {
        Parsed::Incomplete
    }
}

fn parse_resp(buf: &[u8]) -> Parsed {
    let Some(e) = find_crlf(buf, 0) else {
        return incomplete(buf);
    };
    let Some(n) = num(&buf[1..e]) else {
        return Parsed::Invalid("bad array length");
    };
    if n > 64 {
        return Parsed::Invalid("too many arguments");
    }
    let mut pos = e + 2;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        if pos >= buf.len() {
            return incomplete(buf);
        }
        if buf[pos] != b'$' {
            return Parsed::Invalid("expected a bulk string");
        }
        let Some(e) = find_crlf(buf, pos) else {
            return incomplete(buf);
        };
        let Some(len) = num(&buf[pos + 1..e]) else {
            return Parsed::Invalid("bad bulk length");
        };
        if len > MAX_REQUEST {
            return Parsed::Invalid("request too long");
        }
        let start = e + 2;
        if buf.len() < start + len + 2 {
            return incomplete(buf);
        }
        args.push(String::from_utf8_lossy(&buf[start..start + len]).into_owned());
        pos = start + len + 2;
    }
    Parsed::Done(
        Request {
            framing: Framing::Resp,
            args,
        },
        pos,
    )
}

/// A command's answer, before framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Text (lines separated by `\n`).
    Text(String),
    /// Success without a body.
    Ok,
    /// Failure.
    Err(String),
    /// An HTTP body with its content type.
    Http(u16, &'static str, String),
}

/// Frame a reply for the client.
pub fn frame(reply: &Reply, framing: Framing, head_only: bool) -> Vec<u8> {
    match (framing, reply) {
        (Framing::Http, Reply::Http(code, ctype, body)) => http(*code, ctype, body, head_only),
        (Framing::Http, Reply::Text(t)) => http(200, "text/plain; charset=utf-8", t, head_only),
        (Framing::Http, Reply::Ok) => http(200, "text/plain", "OK\n", head_only),
        (Framing::Http, Reply::Err(e)) => http(404, "text/plain", &format!("{e}\n"), head_only),
        (Framing::Resp, Reply::Ok) => b"+OK\r\n".to_vec(),
        (Framing::Resp, Reply::Err(e)) => format!("-ERR {}\r\n", one_line(e)).into_bytes(),
        (Framing::Resp, Reply::Text(t) | Reply::Http(_, _, t)) => {
            let mut out = format!("${}\r\n", t.len()).into_bytes();
            out.extend_from_slice(t.as_bytes());
            out.extend_from_slice(b"\r\n");
            out
        }
        // Every reply of the line protocol ends with END, a one-line one
        // too, so a script reads every command's reply the same way.
        (Framing::Inline, Reply::Ok) => b"OK\r\nEND\r\n".to_vec(),
        (Framing::Inline, Reply::Err(e)) => format!("ERR {}\r\nEND\r\n", one_line(e)).into_bytes(),
        (Framing::Inline, Reply::Text(t) | Reply::Http(_, _, t)) => {
            let mut out = String::with_capacity(t.len() + 16);
            for line in t.lines() {
                out.push_str(line);
                out.push_str("\r\n");
            }
            out.push_str("END\r\n");
            out.into_bytes()
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

fn http(code: u16, ctype: &str, body: &str, head_only: bool) -> Vec<u8> {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_resp_http() {
        let Parsed::Done(r, n) = parse(b"slowlog get 5\r\nstatus\r\n") else {
            panic!()
        };
        assert_eq!((r.framing, n), (Framing::Inline, 15));
        assert_eq!(r.args, ["slowlog", "get", "5"]);
        let Parsed::Done(r, n) = parse(b"*2\r\n$6\r\nconfig\r\n$4\r\nshow\r\n") else {
            panic!()
        };
        assert_eq!((r.framing, n), (Framing::Resp, 26));
        assert_eq!(r.args, ["config", "show"]);
        assert_eq!(parse(b"*2\r\n$6\r\nconfig\r\n$4\r\nsh"), Parsed::Incomplete);
        let Parsed::Done(r, _) = parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") else {
            panic!()
        };
        assert_eq!(r.args, ["GET", "/metrics"]);
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\n"), Parsed::Incomplete);
        assert!(matches!(parse(b"*x\r\n"), Parsed::Invalid(_)));
        assert!(matches!(parse(b"*1\r\n:1\r\n"), Parsed::Invalid(_)));
        assert!(matches!(
            parse(&vec![b'a'; MAX_REQUEST + 1]),
            Parsed::Invalid(_)
        ));
    }

    #[test]
    fn framing() {
        let t = Reply::Text("a\nb".into());
        assert_eq!(frame(&t, Framing::Inline, false), b"a\r\nb\r\nEND\r\n");
        assert_eq!(frame(&t, Framing::Resp, false), b"$3\r\na\nb\r\n");
        assert_eq!(frame(&Reply::Ok, Framing::Resp, false), b"+OK\r\n");
        assert_eq!(
            frame(&Reply::Err("x\ny".into()), Framing::Inline, false),
            b"ERR x y\r\nEND\r\n"
        );
        assert_eq!(frame(&Reply::Ok, Framing::Inline, false), b"OK\r\nEND\r\n");
        let h = frame(
            &Reply::Http(200, "text/plain", "hi".into()),
            Framing::Http,
            false,
        );
        assert!(h.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(h.ends_with(b"\r\n\r\nhi"));
    }
}
