//! A blocking client of etcd's v3 JSON gateway (HTTP/1.1 on the client
//! port: `/v3/kv/range`, `/v3/kv/put`, `/v3/kv/txn`, `/v3/watch`,
//! `/v3/lease/grant`, `/v3/lease/keepalive`; keys and values base64,
//! 64-bit numbers as JSON strings).
//!
//! Written here rather than taken from a crate: the maintained etcd
//! clients (etcd-client, etcd-rs) are gRPC over tonic and bring tokio, a
//! runtime with threads, and some hundred crates; what walnut needs is
//! a few calls a few times a second, and the gateway is part of every etcd
//! 3.4 and later. Plain `http://` only (no TLS to etcd). The calls block
//! with timeouts; they run in the fleet agent (`agent.rs`), a process of
//! its own, and in `walnut fleet`, never in the master or a worker.

use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a connect or a unary call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(v: &Value) -> Vec<u8> {
    v.as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// A 64-bit number as the gateway writes it (a string), or a plain number.
pub fn num(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn other(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

/// One key's value and the revision that last wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

fn kv_of(v: &Value) -> Kv {
    Kv {
        key: unb64(&v["key"]),
        value: unb64(&v["value"]),
        mod_revision: num(&v["mod_revision"]),
    }
}

/// The end of the range of every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The etcd endpoints, tried in turn (`http://host:port`, comma-separated).
#[derive(Debug, Clone)]
pub struct Etcd {
    endpoints: Vec<String>,
    /// The endpoint that answered last (tried first).
    current: usize,
}

impl Etcd {
    /// Endpoints from `URL[,URL...]`; `http://` may be left out.
    pub fn new(urls: &str) -> Result<Etcd, String> {
        let mut endpoints = Vec::new();
        for u in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            if u.starts_with("https://") {
                return Err(format!("etcd endpoint '{u}': https is not supported"));
            }
            let hp = u.strip_prefix("http://").unwrap_or(u).trim_end_matches('/');
            if !hp.contains(':') {
                return Err(format!("etcd endpoint '{u}': expected host:port"));
            }
            endpoints.push(hp.to_string());
        }
        if endpoints.is_empty() {
            return Err("no etcd endpoint given".into());
        }
        Ok(Etcd {
            endpoints,
            current: 0,
        })
    }

    fn connect_one(hp: &str, read_timeout: Duration) -> io::Result<TcpStream> {
        let addr = hp
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| other(format!("{hp}: no address")))?;
        let s = TcpStream::connect_timeout(&addr, CALL_TIMEOUT)?;
        s.set_read_timeout(Some(read_timeout))?;
        s.set_write_timeout(Some(CALL_TIMEOUT))?;
        s.set_nodelay(true)?;
        Ok(s)
    }

    /// Sends `body` to `path` on the first endpoint that takes it.
    fn send(&mut self, path: &str, body: &Value, read_timeout: Duration) -> io::Result<TcpStream> {
        let body = body.to_string();
        let mut last = other("no endpoint");
        for k in 0..self.endpoints.len() {
            let i = (self.current + k) % self.endpoints.len();
            let hp = &self.endpoints[i];
            let req = format!(
                "POST {path} HTTP/1.1\r\nHost: {hp}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            match Etcd::connect_one(hp, read_timeout).and_then(|mut s| {
                s.write_all(req.as_bytes())?;
                Ok(s)
            }) {
                Ok(s) => {
                    self.current = i;
                    return Ok(s);
                }
                Err(e) => last = other(format!("etcd {hp}: {e}")),
            }
        }
        Err(last)
    }

    /// A unary call: its one JSON reply (an error reply is an error).
    fn call(&mut self, path: &str, body: &Value) -> io::Result<Value> {
        let s = self.send(path, body, CALL_TIMEOUT)?;
        let mut stream = Stream::new(s);
        let v = stream
            .next_value()?
            .ok_or_else(|| other(format!("etcd {path}: no reply in time")))?;
        if let Some(e) = v.get("error").or_else(|| v.get("message")) {
            return Err(other(format!("etcd {path}: {e}")));
        }
        Ok(v)
    }

    /// The value of `key`, if any, and the store's revision.
    pub fn get(&mut self, key: &[u8]) -> io::Result<(Option<Kv>, i64)> {
        let v = self.call("/v3/kv/range", &json!({ "key": b64(key) }))?;
        let kv = v["kvs"].as_array().and_then(|a| a.first()).map(kv_of);
        Ok((kv, num(&v["header"]["revision"])))
    }

    /// Every key under `prefix`, in key order.
    pub fn list(&mut self, prefix: &[u8]) -> io::Result<Vec<Kv>> {
        let v = self.call(
            "/v3/kv/range",
            &json!({ "key": b64(prefix), "range_end": b64(&prefix_end(prefix)) }),
        )?;
        Ok(v["kvs"]
            .as_array()
            .map(|a| a.iter().map(kv_of).collect())
            .unwrap_or_default())
    }

    /// Every key under `prefix` as the store was at `revision` (an error
    /// once that revision was compacted away).
    pub fn list_at(&mut self, prefix: &[u8], revision: i64) -> io::Result<Vec<Kv>> {
        let v = self.call(
            "/v3/kv/range",
            &json!({
                "key": b64(prefix),
                "range_end": b64(&prefix_end(prefix)),
                "revision": revision.to_string(),
            }),
        )?;
        Ok(v["kvs"]
            .as_array()
            .map(|a| a.iter().map(kv_of).collect())
            .unwrap_or_default())
    }

    /// Writes every `(key, value)` of `puts` in one transaction, if `key`
    /// was last written at `mod_revision` (0: it does not exist): the
    /// revision written, or `None` when `key` changed meanwhile.
    pub fn put_all_if(
        &mut self,
        key: &[u8],
        mod_revision: i64,
        puts: &[(&[u8], &[u8])],
    ) -> io::Result<Option<i64>> {
        let success: Vec<Value> = puts
            .iter()
            .map(|(k, v)| json!({ "request_put": { "key": b64(k), "value": b64(v) } }))
            .collect();
        let body = json!({
            "compare": [{
                "key": b64(key),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": mod_revision.to_string(),
            }],
            "success": success,
        });
        let v = self.call("/v3/kv/txn", &body)?;
        Ok(v["succeeded"]
            .as_bool()
            .unwrap_or(false)
            .then(|| num(&v["header"]["revision"])))
    }

    /// Writes `key`, bound to `lease` when not 0; the revision written.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> io::Result<i64> {
        let mut body = json!({ "key": b64(key), "value": b64(value) });
        if lease != 0 {
            body["lease"] = json!(lease.to_string());
        }
        let v = self.call("/v3/kv/put", &body)?;
        Ok(num(&v["header"]["revision"]))
    }

    /// A new lease of `ttl` seconds: its id.
    pub fn grant(&mut self, ttl: u64) -> io::Result<i64> {
        let v = self.call("/v3/lease/grant", &json!({ "TTL": ttl.to_string() }))?;
        match num(&v["ID"]) {
            0 => Err(other("etcd lease grant: no id")),
            id => Ok(id),
        }
    }

    /// Renews `lease`: the seconds it has left, 0 once it has ended.
    pub fn keepalive(&mut self, lease: i64) -> io::Result<i64> {
        let v = self.call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))?;
        Ok(num(&v["result"]["TTL"]))
    }

    /// Ends `lease` and the keys bound to it.
    pub fn revoke(&mut self, lease: i64) -> io::Result<()> {
        self.call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .map(|_| ())
    }

    /// Watches every key that starts with `prefix` from `start_revision`;
    /// `next` on the returned stream waits at most `tick` before it gives
    /// `None`.
    pub fn watch(
        &mut self,
        prefix: &[u8],
        start_revision: i64,
        tick: Duration,
    ) -> io::Result<Stream> {
        let body = json!({ "create_request": {
            "key": b64(prefix),
            "range_end": b64(&prefix_end(prefix)),
            "start_revision": start_revision.to_string(),
        }});
        let s = self.send("/v3/watch", &body, tick)?;
        let mut stream = Stream::new(s);
        stream.interruptible = true;
        Ok(stream)
    }
}

/// What a watch reported.
#[derive(Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// The watch is set up.
    Created,
    /// The key was written (its new value and revision) or deleted (empty).
    Changed(Kv),
    /// The revision asked for was compacted away: read the key again.
    Compacted,
}

/// The events in one watch reply.
pub fn watch_events(v: &Value) -> Vec<WatchEvent> {
    let r = &v["result"];
    let mut out = Vec::new();
    if r["created"].as_bool() == Some(true) {
        out.push(WatchEvent::Created);
    }
    if num(&r["compact_revision"]) != 0 {
        out.push(WatchEvent::Compacted);
    }
    if let Some(evs) = r["events"].as_array() {
        for e in evs {
            let mut kv = kv_of(&e["kv"]);
            if e["type"].as_str() == Some("DELETE") {
                kv.value.clear();
            }
            out.push(WatchEvent::Changed(kv));
        }
    }
    out
}

/// A reply body read as it comes: the HTTP head, then JSON values one
/// after another (a unary reply has one; a stream, one per message),
/// chunked or not.
pub struct Stream {
    sock: TcpStream,
    raw: Vec<u8>,
    head_done: bool,
    chunked: bool,
    /// Bytes of the current chunk still to come (chunked bodies).
    chunk_left: usize,
    body: Vec<u8>,
    eof: bool,
    /// A watch: a signal ends the wait (`next_value` gives `None`); a
    /// unary call's read goes on.
    interruptible: bool,
}

impl Stream {
    fn new(sock: TcpStream) -> Stream {
        Stream {
            sock,
            raw: Vec::new(),
            head_done: false,
            chunked: false,
            chunk_left: 0,
            body: Vec::new(),
            eof: false,
            interruptible: false,
        }
    }

    /// The next JSON value; `None` when none came within the read timeout,
    /// or when a signal interrupted a watch's wait (the fleet agent's
    /// wake-up: its caller has something else to do at once). An error once the
    /// connection ended or the reply is not HTTP 200.
    pub fn next_value(&mut self) -> io::Result<Option<Value>> {
        loop {
            self.decode()?;
            if let Some(v) = self.take_value()? {
                return Ok(Some(v));
            }
            if self.eof {
                return Err(other("etcd closed the connection"));
            }
            let mut buf = [0u8; 16384];
            match self.sock.read(&mut buf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.raw.extend_from_slice(&buf[..n]),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    if self.interruptible {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn take_value(&mut self) -> io::Result<Option<Value>> {
        let start = self
            .body
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(self.body.len());
        if start == self.body.len() {
            self.body.clear();
            return Ok(None);
        }
        let mut it = serde_json::Deserializer::from_slice(&self.body[start..]).into_iter::<Value>();
        match it.next() {
            Some(Ok(v)) => {
                let used = start + it.byte_offset();
                self.body.drain(..used);
                Ok(Some(v))
            }
            Some(Err(e)) if e.is_eof() => Ok(None),
            Some(Err(e)) => Err(other(format!("etcd reply: {e}"))),
            None => Ok(None),
        }
    }

    /// Moves what `raw` holds of the body into `body`.
    fn decode(&mut self) -> io::Result<()> {
        if !self.head_done {
            let Some(end) = memchr::memmem::find(&self.raw, b"\r\n\r\n") else {
                return Ok(());
            };
            let head = String::from_utf8_lossy(&self.raw[..end]).to_ascii_lowercase();
            let status = head.split_whitespace().nth(1).unwrap_or("");
            self.chunked = head.contains("transfer-encoding: chunked");
            self.raw.drain(..end + 4);
            self.head_done = true;
            if status != "200" {
                // The error body is read whole, for the message.
                let _ = self.sock.set_read_timeout(Some(CALL_TIMEOUT));
                let mut rest = Vec::new();
                let _ = (&self.sock).take(65536).read_to_end(&mut rest);
                self.raw.extend_from_slice(&rest);
                return Err(other(format!(
                    "etcd: HTTP {status}: {}",
                    String::from_utf8_lossy(&self.raw).trim()
                )));
            }
        }
        if !self.chunked {
            self.body.append(&mut self.raw);
            return Ok(());
        }
        loop {
            if self.chunk_left > 0 {
                let n = self.chunk_left.min(self.raw.len());
                self.body.extend(self.raw.drain(..n));
                self.chunk_left -= n;
                if self.chunk_left > 0 {
                    return Ok(());
                }
                // The chunk's CRLF is taken with the next size line.
            }
            let Some(eol) = memchr::memmem::find(&self.raw, b"\r\n") else {
                return Ok(());
            };
            let line = String::from_utf8_lossy(&self.raw[..eol]).to_string();
            self.raw.drain(..eol + 2);
            let size = line.split(';').next().unwrap_or("").trim();
            if size.is_empty() {
                continue; // the CRLF after a chunk's data
            }
            let n = usize::from_str_radix(size, 16)
                .map_err(|_| other(format!("etcd: bad chunk size '{size}'")))?;
            if n == 0 {
                self.eof = true;
                return Ok(());
            }
            self.chunk_left = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn endpoints_parse() {
        let e = Etcd::new("http://127.0.0.1:2379, 127.0.0.1:2380/").unwrap();
        assert_eq!(e.endpoints, vec!["127.0.0.1:2379", "127.0.0.1:2380"]);
        assert!(Etcd::new("https://x:1").is_err());
        assert!(Etcd::new("x").is_err());
        assert!(Etcd::new("").is_err());
    }

    #[test]
    fn watch_reply_events() {
        let v: Value = serde_json::from_str(
            r#"{"result":{"header":{"revision":"9"},"events":[
                {"kv":{"key":"YQ==","value":"Yg==","mod_revision":"9"}},
                {"type":"DELETE","kv":{"key":"YQ==","mod_revision":"10"}}]}}"#,
        )
        .unwrap();
        let evs = watch_events(&v);
        assert_eq!(
            evs[0],
            WatchEvent::Changed(Kv {
                key: b"a".to_vec(),
                value: b"b".to_vec(),
                mod_revision: 9
            })
        );
        assert!(matches!(&evs[1], WatchEvent::Changed(kv) if kv.value.is_empty()));
        let created: Value = serde_json::from_str(r#"{"result":{"created":true}}"#).unwrap();
        assert_eq!(watch_events(&created), vec![WatchEvent::Created]);
    }

    #[test]
    fn chunked_stream_of_values() {
        // A local socket pair carries a chunked reply split mid-value.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut w = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (r, _) = l.accept().unwrap();
        r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut s = Stream::new(r);
        w.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{\"a\":1}\n\r\n4\r\n{\"b\"",
        )
        .unwrap();
        assert_eq!(s.next_value().unwrap(), Some(json!({"a": 1})));
        assert_eq!(s.next_value().unwrap(), None);
        w.write_all(b"\r\n3\r\n:2}\r\n0\r\n\r\n").unwrap();
        assert_eq!(s.next_value().unwrap(), Some(json!({"b": 2})));
        assert!(s.next_value().is_err());
    }
}
