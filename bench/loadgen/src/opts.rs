//! Command line of `mcload`.

use std::net::SocketAddr;

/// Help text.
pub const USAGE: &str = "usage: mcload --addr HOST:PORT [--conns N] [--duration SECS] \
[--requests N] [--get-ratio F] [--mget K] [--value-size B] [--keyspace N] [--pipeline D] [--prefill]";

/// Parsed options.
pub struct Opts {
    pub addr: SocketAddr,
    pub conns: usize,
    pub duration: f64,
    pub requests: u64,
    pub get_ratio: f64,
    pub mget: usize,
    pub value_size: usize,
    pub keyspace: u64,
    pub pipeline: usize,
    pub prefill: bool,
}

impl Opts {
    /// Parse `--flag value` pairs.
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Opts, String> {
        let mut o = Opts {
            addr: "127.0.0.1:11211".parse().map_err(|_| "bad default")?,
            conns: 50,
            duration: 3.0,
            requests: 0,
            get_ratio: 0.9,
            mget: 1,
            value_size: 100,
            keyspace: 10_000,
            pipeline: 1,
            prefill: false,
        };
        while let Some(flag) = args.next() {
            if flag == "--prefill" {
                o.prefill = true;
                continue;
            }
            let v = args.next().ok_or(format!("{flag} needs a value"))?;
            let bad = |_| format!("bad value for {flag}: {v}");
            match flag.as_str() {
                "--addr" => o.addr = v.parse().map_err(|_| format!("bad address {v}"))?,
                "--conns" => o.conns = v.parse().map_err(bad)?,
                "--duration" => o.duration = v.parse().map_err(|_| format!("bad duration {v}"))?,
                "--requests" => o.requests = v.parse().map_err(bad)?,
                "--get-ratio" => o.get_ratio = v.parse().map_err(|_| format!("bad ratio {v}"))?,
                "--mget" => o.mget = v.parse().map_err(bad)?,
                "--value-size" => o.value_size = v.parse().map_err(bad)?,
                "--keyspace" => o.keyspace = v.parse().map_err(bad)?,
                "--pipeline" => o.pipeline = v.parse().map_err(bad)?,
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        if o.conns == 0 || o.mget == 0 || o.keyspace == 0 || o.pipeline == 0 {
            return Err("conns, mget, keyspace and pipeline must be > 0".into());
        }
        Ok(o)
    }
}
