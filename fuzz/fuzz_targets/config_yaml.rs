//! Fuzzes configuration validation: `Config::from_str` on arbitrary text
//! never panics, and a configuration it accepts has at least one pool,
//! every pool at least one server, and validates the same way twice.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use walnut::config::Config;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("fuzz.yml");
    let first = Config::from_str(&text, path);
    if let Ok(cfg) = &first {
        assert!(!cfg.pools.is_empty());
        for pool in &cfg.pools {
            assert!(
                !pool.servers.is_empty(),
                "pool {} has no servers",
                pool.name
            );
        }
    }
    let again = Config::from_str(&text, path);
    assert_eq!(first.is_ok(), again.is_ok());
});
