//! Which keys of a request a migrating pool pulls over first
//! (`PoolRt::moved_pulls`), on a pool built from config text, without
//! sockets.

use super::*;
use crate::config::{Config, PoolConfig};
use crate::proto::{Limits, Parse};

fn pool(servers: &[u16]) -> PoolConfig {
    let mut text =
        "p:\n  listen: 127.0.0.1:39999\n  redis: true\n  migration: true\n  servers:\n".to_string();
    for port in servers {
        text.push_str(&format!("   - 127.0.0.1:{port}:1\n"));
    }
    Config::from_str(&text, std::path::Path::new("t.yml"))
        .expect("config parses")
        .pools
        .remove(0)
}

/// A Redis command of `args`.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

fn pulled(p: &mut PoolRt, args: &[&str]) -> Vec<Vec<u8>> {
    let bytes = command(args);
    let Ok(Parse::Done(req)) = Protocol::Redis.parse_request(&bytes, &Limits::default()) else {
        panic!("{args:?} parses");
    };
    let now = Instant::now();
    p.moved_pulls(&req, &bytes, now)
        .iter()
        .map(|pull| pull.key().to_vec())
        .collect()
}

#[test]
fn every_moved_key_a_command_names_is_pulled_once() {
    let new = pool(&[30001, 30002, 30003]);
    let mut p = PoolRt::new(&new, &[pool(&[30001, 30002])]);
    let keys: Vec<String> = (0..200).map(|k| format!("key:{k}")).collect();
    let moved = keys
        .iter()
        .find(|k| !pulled(&mut p, &["GET", k]).is_empty())
        .expect("a key that moved");
    let stayed = keys
        .iter()
        .find(|k| pulled(&mut p, &["GET", k]).is_empty())
        .expect("a key that stayed");
    assert_eq!(pulled(&mut p, &["GET", moved]), vec![moved.as_bytes()]);
    // Every key named, each once, whichever key routes the command.
    let mset = ["MSET", stayed, "1", moved, "2", moved, "3"];
    assert_eq!(pulled(&mut p, &mset), vec![moved.as_bytes()]);
    assert_eq!(
        pulled(&mut p, &["RENAME", stayed, moved]),
        vec![moved.as_bytes()]
    );
    assert_eq!(pulled(&mut p, &["SET", stayed, "v"]), Vec::<Vec<u8>>::new());
    assert_eq!(pulled(&mut p, &["PING"]), Vec::<Vec<u8>>::new(), "no key");
    // The same servers and no earlier placement: not migrating.
    let mut calm = PoolRt::new(&new, &[]);
    assert_eq!(pulled(&mut calm, &["GET", moved]), Vec::<Vec<u8>>::new());
}
