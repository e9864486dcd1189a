//! Checks key placement against vectors recorded from a real nutcracker
//! (see tools/gen_placement_vectors.py and tests/vectors/placement/).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use walnut::hash::{ketama_server_name, Distribution, HashKind, Placement, RingServer};

fn vector_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/placement");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("vector directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex key"))
        .collect()
}

/// The ketama name of a configured server: its name, else host[:port].
fn ring_name(server: &Value) -> Vec<u8> {
    match server["name"].as_str() {
        Some(name) => name.as_bytes().to_vec(),
        None => {
            let host = server["host"].as_str().expect("host");
            let port = server["port"].as_u64().expect("port") as u16;
            ketama_server_name(host, port).into_bytes()
        }
    }
}

/// Checks one pool; returns (keys checked, mismatches).
fn check_pool(pool: &Value, keys: &[Vec<u8>], file: &Path) -> (usize, Vec<String>) {
    let hash = HashKind::from_name(pool["hash"].as_str().expect("hash")).expect("known hash");
    let dist = Distribution::from_name(pool["distribution"].as_str().expect("dist"))
        .expect("known distribution");
    let tag = pool["hash_tag"].as_str().map(|t| {
        let b = t.as_bytes();
        [b[0], b[1]]
    });
    let servers = pool["servers"].as_array().expect("servers");
    let names: Vec<Vec<u8>> = servers.iter().map(ring_name).collect();
    let ring: Vec<RingServer<'_>> = servers
        .iter()
        .zip(&names)
        .map(|(s, name)| RingServer {
            name,
            weight: s["weight"].as_u64().expect("weight") as u32,
            live: s["live"].as_bool().unwrap_or(true),
        })
        .collect();
    let placement = Placement::new(hash, dist, tag, &ring);
    let expect = pool["servers_for_keys"]
        .as_array()
        .expect("servers_for_keys");
    assert_eq!(expect.len(), keys.len(), "{}: key count", file.display());
    let mut bad = Vec::new();
    for (key, want) in keys.iter().zip(expect) {
        let want = want.as_u64().map(|w| w as usize);
        let got = placement.server_for(key);
        if got != want {
            bad.push(format!(
                "{} pool {}: key {} -> {:?}, nutcracker {:?}",
                file.display(),
                pool["pool"],
                String::from_utf8_lossy(key),
                got,
                want
            ));
        }
    }
    (keys.len(), bad)
}

#[test]
fn placement_matches_nutcracker() {
    let files = vector_files();
    assert!(!files.is_empty(), "no placement vectors found");
    let (mut pools, mut checked) = (0usize, 0usize);
    let mut bad = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("read vectors");
        let doc: Value = serde_json::from_str(&text).expect("parse vectors");
        let keys: Vec<Vec<u8>> = doc["keys_hex"]
            .as_array()
            .expect("keys_hex")
            .iter()
            .map(|k| hex(k.as_str().expect("hex string")))
            .collect();
        for pool in doc["pools"].as_array().expect("pools") {
            let (n, mut b) = check_pool(pool, &keys, file);
            if !b.is_empty() {
                println!(
                    "{} {} {} {} named={} tag={}: {} of {} keys differ",
                    pool["pool"],
                    pool["hash"],
                    pool["distribution"],
                    pool["servers"].as_array().map_or(0, |s| s.len()),
                    pool["named"],
                    pool["hash_tag"],
                    b.len(),
                    n
                );
            }
            pools += 1;
            checked += n;
            bad.append(&mut b);
        }
    }
    println!(
        "{} files, {} pools, {} keys checked, {} mismatches",
        files.len(),
        pools,
        checked,
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} mismatches, first ones:\n{}",
        bad.len(),
        bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}
