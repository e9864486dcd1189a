//! `walnut fleet apply|status`: publish a fleet's configuration (after
//! every `-t` check) and list its members.

use super::etcd::{num, Etcd};
use clap::{Parser, Subcommand};
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `walnut fleet ...`
#[derive(Parser, Debug)]
#[command(
    name = "walnut fleet",
    about = "Manage a fleet of walnuts configured from etcd"
)]
pub struct FleetCli {
    /// etcd endpoints, comma-separated (http://host:port).
    #[arg(long = "etcd", value_name = "URL[,URL]", global = true)]
    etcd: Option<String>,
    /// The fleet's name.
    #[arg(long = "fleet", value_name = "NAME", global = true)]
    fleet: Option<String>,
    #[command(subcommand)]
    cmd: FleetCmd,
}

#[derive(Subcommand, Debug)]
enum FleetCmd {
    /// Check FILE as `walnut -t` does and, if valid, publish it as the
    /// fleet's configuration.
    Apply {
        /// The configuration file (twemproxy YAML).
        file: PathBuf,
        /// Then wait up to SECS for every member to apply it (exit 2 if
        /// some did not).
        #[arg(long = "wait", value_name = "SECS")]
        wait: Option<f64>,
    },
    /// List the fleet's members and what each applied.
    Status {
        /// Print the members as JSON.
        #[arg(long = "json")]
        json: bool,
    },
}

/// Runs `walnut fleet` with `args` (after the word `fleet`); the exit code.
pub fn main(args: &[String]) -> i32 {
    let cli = match FleetCli::try_parse_from(
        std::iter::once("walnut fleet".to_string()).chain(args.iter().cloned()),
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    let (Some(urls), Some(fleet)) = (cli.etcd.as_deref(), cli.fleet.as_deref()) else {
        eprintln!("walnut fleet: --etcd URL and --fleet NAME are required");
        return 1;
    };
    if !super::valid_name(fleet) {
        eprintln!("walnut fleet: invalid fleet name '{fleet}'");
        return 1;
    }
    let mut etcd = match Etcd::new(urls) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("walnut fleet: {e}");
            return 1;
        }
    };
    match cli.cmd {
        FleetCmd::Apply { file, wait } => apply(&mut etcd, fleet, &file, wait),
        FleetCmd::Status { json } => status(&mut etcd, fleet, json),
    }
}

fn apply(etcd: &mut Etcd, fleet: &str, file: &std::path::Path, wait: Option<f64>) -> i32 {
    let (code, report) = crate::cli::test_conf_report(file);
    if code != 0 {
        eprint!("{report}");
        eprintln!(
            "walnut fleet: '{}' refused, the fleet keeps its configuration",
            file.display()
        );
        return 1;
    }
    let text = match std::fs::read(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("walnut fleet: {}: {e}", file.display());
            return 1;
        }
    };
    let rev = match publish(etcd, fleet, &text) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("walnut fleet: {e}");
            return 1;
        }
    };
    println!("fleet {fleet}: configuration revision {rev} published");
    let Some(secs) = wait else {
        return 0;
    };
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        let members = match members(etcd, fleet) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("walnut fleet: {e}");
                Vec::new()
            }
        };
        let behind: Vec<&Value> = members
            .iter()
            .filter(|m| num(&m["revision"]) < rev)
            .collect();
        if behind.is_empty() {
            println!(
                "fleet {fleet}: {} members applied revision {rev}",
                members.len()
            );
            return 0;
        }
        if Instant::now() >= deadline {
            for m in behind {
                println!(
                    "fleet {fleet}: member {} still at revision {}",
                    m["id"].as_str().unwrap_or("?"),
                    num(&m["revision"])
                );
            }
            return 2;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes `text` as the fleet's configuration and, in the same
/// transaction, its lineage: the configuration it replaces, then the
/// earlier ones unless every `migration: true` pool of the one it replaces
/// is known to have ended its migration (`super::settled_pools`). A
/// configuration written meanwhile by another `apply` makes it start over.
fn publish(etcd: &mut Etcd, fleet: &str, text: &[u8]) -> std::io::Result<i64> {
    let key = super::config_key(fleet);
    for _ in 0..10 {
        let kvs = etcd.list(&key)?;
        let (current, earlier) = super::split_config(fleet, &kvs);
        let mut lineage = Vec::new();
        let at = current.as_ref().map_or(0, |c| c.mod_revision);
        if let Some(cur) = current.filter(|c| !c.value.is_empty()) {
            let yaml = String::from_utf8_lossy(&cur.value).into_owned();
            let path = std::path::Path::new("(the fleet's configuration)");
            if let Ok(cfg) = crate::config::Config::from_str(&yaml, path) {
                let members: Vec<Value> = members(etcd, fleet)?;
                let settled = super::settled_pools(&members, cur.mod_revision);
                let ended = cfg
                    .pools
                    .iter()
                    .filter(|p| p.migration)
                    .all(|p| settled.contains(&p.name));
                lineage.push((cur.mod_revision, yaml));
                if !ended {
                    lineage.extend(earlier);
                }
            }
        }
        let value = super::lineage_text(&lineage);
        let puts: [(&[u8], &[u8]); 2] =
            [(&key, text), (&super::lineage_key(fleet), value.as_bytes())];
        if let Some(rev) = etcd.put_all_if(&key, at, &puts)? {
            return Ok(rev);
        }
    }
    Err(std::io::Error::other(
        "the configuration kept changing while it was written; apply again",
    ))
}

fn members(etcd: &mut Etcd, fleet: &str) -> std::io::Result<Vec<Value>> {
    Ok(etcd
        .list(&super::members_prefix(fleet))?
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect())
}

/// One line per member, as `walnut fleet status` and the admin port's
/// `fleet` print them.
pub fn member_lines(members: &[Value]) -> Vec<String> {
    members
        .iter()
        .map(|m| {
            let pools = m["pools"]
                .as_object()
                .map(|p| {
                    p.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("?")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            let listen = m["listen"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            format!(
                "member {} host={} revision={} version={} listen={} admin={} stats={} pid={} pools={}",
                m["id"].as_str().unwrap_or("?"),
                m["host"].as_str().unwrap_or("?"),
                num(&m["revision"]),
                m["version"].as_str().unwrap_or("?"),
                if listen.is_empty() { "-" } else { &listen },
                m["admin"].as_str().unwrap_or("-"),
                m["stats"].as_str().unwrap_or("-"),
                num(&m["pid"]),
                if pools.is_empty() { "-" } else { &pools },
            )
        })
        .collect()
}

fn status(etcd: &mut Etcd, fleet: &str, json: bool) -> i32 {
    let (config, members) = match etcd
        .get(&super::config_key(fleet))
        .and_then(|(kv, _)| Ok((kv, members(etcd, fleet)?)))
    {
        Ok(x) => x,
        Err(e) => {
            eprintln!("walnut fleet: {e}");
            return 1;
        }
    };
    let rev = config.as_ref().map_or(0, |kv| kv.mod_revision);
    if json {
        let doc = serde_json::json!({ "fleet": fleet, "revision": rev, "members": members });
        println!("{doc}");
        return 0;
    }
    println!(
        "fleet {fleet}: configuration revision {rev}, {} members",
        members.len()
    );
    for l in member_lines(&members) {
        println!("{l}");
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_line() {
        let m: Value = serde_json::from_str(
            r#"{"id":"a","host":"h","revision":"7","version":"0.1.0","listen":["127.0.0.1:1"],
                "admin":"127.0.0.1:2","stats":"127.0.0.1:3","pid":9,"pools":{"p":"running"}}"#,
        )
        .unwrap();
        assert_eq!(
            member_lines(&[m]),
            vec!["member a host=h revision=7 version=0.1.0 listen=127.0.0.1:1 admin=127.0.0.1:2 stats=127.0.0.1:3 pid=9 pools=p=running"]
        );
    }
}
