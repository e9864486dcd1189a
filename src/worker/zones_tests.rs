//! A zone pool's decisions without sockets: the pool built from
//! configuration text (two memcached pools, one server each, as zones),
//! asked where a request's key goes zone by zone.

use super::*;
use crate::config::Config;
use crate::proto::{Limits, Parse, Protocol};
use std::path::Path;

/// The zone pool over pools `a` (server 0) and `b` (server 1); `extra`
/// adds keys to it.
fn pool(extra: &str) -> PoolRt {
    let yaml = format!(
        "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n\
         b:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1\n\
         z:\n  listen: 127.0.0.1:22123\n{extra}"
    );
    let c = Config::from_str(&yaml, Path::new("t.yml")).expect("config parses");
    let z = c.pools.iter().find(|p| p.name == "z").expect("zone pool");
    PoolRt::new(z, &[])
}

fn mc(bytes: &[u8]) -> Request {
    match Protocol::Memcache.parse_request(bytes, &Limits::default()) {
        Ok(Parse::Done(r)) => r,
        other => panic!("{other:?}"),
    }
}

const ZONES: &str = "  zones:\n   - a\n   - b\n";

#[test]
fn a_single_key_request_goes_to_its_owner_in_each_zone_local_first() {
    let mut p = pool(ZONES);
    let now = Instant::now();
    let get = b"get k\r\n";
    assert_eq!(
        p.zone_owners(ZoneStep::Read, &mc(get), get, now),
        Owners::Read(vec![0, 1])
    );
    let set = b"set k 0 0 1\r\nv\r\n";
    assert_eq!(
        p.zone_owners(ZoneStep::AsyncWrite, &mc(set), set, now),
        Owners::ZoneWrite(vec![0, 1])
    );
    assert_eq!(
        p.zone_owners(ZoneStep::SyncWrite, &mc(set), set, now),
        Owners::Write(vec![0, 1])
    );
    // The local zone's server ejected: the other zone alone owns the key.
    p.servers[0].ejected_until = Some(now + std::time::Duration::from_secs(30));
    p.rebuild(now);
    assert_eq!(
        p.zone_owners(ZoneStep::Read, &mc(get), get, now),
        Owners::Read(vec![1])
    );
}
