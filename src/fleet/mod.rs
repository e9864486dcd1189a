//! A fleet: instances that take one configuration from etcd (`--etcd URL
//! --fleet NAME`) instead of a file, and register there as members.
//!
//! Keys, under `/walnut/fleet/NAME/`:
//! - `config`: the YAML text `-c` would read; its `mod_revision` is the
//!   configuration's revision. Written by `walnut fleet apply` (`cmd.rs`)
//!   only after every `-t` check passed.
//! - `config-lineage`: the configurations before `config` whose
//!   migrations may not have ended (JSON, newest first), written by
//!   `walnut fleet apply` in the same transaction as `config`, so both
//!   carry the same `mod_revision`. A member that starts while a
//!   migration runs takes its earlier placements from there
//!   ([`Joined`]), as the members that reloaded hold them in memory.
//! - `members/ID`: one JSON record per running instance, bound to its
//!   lease (`agent.rs`), so it disappears when the instance does.
//!
//! The master speaks no etcd: the fleet agent, a process of its own
//! (forked by the master like a migrator, `master/fleet.rs`), watches the
//! configuration, writes each valid text to the instance's last-good file
//! (`DIR/NAME-ID.yml`, a first comment line naming the revision) and sends
//! the master SIGHUP; the master reloads that file as it would `-c`. The
//! master reports what it applied in `DIR/NAME-ID.state` (JSON, rewritten
//! when it changes), which the agent publishes; the agent writes the
//! members it sees to `DIR/NAME-ID.members` for the admin port's `fleet`,
//! and the lineage of each revision it receives to `DIR/NAME-ID.lineage`
//! (read by the master when it starts, [`Joined`]).

pub mod agent;
pub mod cmd;
pub mod etcd;
pub mod page;

use std::path::{Path, PathBuf};

/// Where an instance keeps its fleet files unless `--fleet-dir` says.
pub const DEFAULT_DIR: &str = "/var/lib/walnut";
/// Seconds a member's lease lasts without renewal (`--fleet-ttl`).
pub const DEFAULT_TTL: u64 = 5;

/// How long a request may wait for the fleet unless `--fleet-hold` says
/// (ms): the lease TTL, the longest a barrier waits for a member that
/// died, plus this (reloads and an agent pass).
pub const HOLD_SLACK_MS: u64 = 1000;

/// An instance's fleet settings (from the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetOpts {
    /// `--etcd`: endpoints, comma-separated.
    pub etcd: String,
    /// `--fleet`: the fleet's name.
    pub name: String,
    /// `--fleet-id`: this instance's member id.
    pub id: String,
    /// `--fleet-dir`: the directory of its last-good configuration.
    pub dir: PathBuf,
    /// `--fleet-ttl`: its lease, in seconds.
    pub ttl: u64,
    /// `--fleet-hold`: how long a request may wait for the fleet's
    /// barrier or for the member to be in step again (ms; 0: refused at
    /// once), see `worker/fleet_hold.rs`.
    pub hold_ms: u64,
}

/// The prefix of every key of a fleet (its configuration, lineage and
/// members: what the fleet agent watches).
pub fn fleet_prefix(fleet: &str) -> Vec<u8> {
    format!("/walnut/fleet/{fleet}/").into_bytes()
}

/// The key of a fleet's configuration.
pub fn config_key(fleet: &str) -> Vec<u8> {
    format!("/walnut/fleet/{fleet}/config").into_bytes()
}

/// The key of a fleet's lineage (starts with [`config_key`], so one range
/// read returns both as of one revision).
pub fn lineage_key(fleet: &str) -> Vec<u8> {
    format!("/walnut/fleet/{fleet}/config-lineage").into_bytes()
}

/// The lineage value: each earlier configuration's revision and text,
/// newest first.
pub fn lineage_text(earlier: &[(i64, String)]) -> String {
    let list: Vec<serde_json::Value> = earlier
        .iter()
        .map(|(r, t)| serde_json::json!({ "revision": r, "config": t }))
        .collect();
    serde_json::json!({ "earlier": list }).to_string()
}

/// The earlier configurations a lineage value lists (none if unreadable).
pub fn parse_lineage(value: &[u8]) -> Vec<(i64, String)> {
    let v: serde_json::Value = serde_json::from_slice(value).unwrap_or_default();
    v["earlier"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| Some((etcd::num(&e["revision"]), e["config"].as_str()?.into())))
                .collect()
        })
        .unwrap_or_default()
}

/// The configuration and its lineage from one range read of
/// [`config_key`]'s prefix: the lineage only if the same transaction wrote
/// it (a configuration written by other means than `walnut fleet apply`
/// has none).
pub fn split_config(fleet: &str, kvs: &[etcd::Kv]) -> (Option<etcd::Kv>, Vec<(i64, String)>) {
    let config = kvs.iter().find(|kv| kv.key == config_key(fleet)).cloned();
    let earlier = match (&config, kvs.iter().find(|kv| kv.key == lineage_key(fleet))) {
        (Some(c), Some(l)) if l.mod_revision == c.mod_revision => parse_lineage(&l.value),
        _ => Vec::new(),
    };
    (config, earlier)
}

/// The pools whose migration to `revision` is known to have ended: some
/// member running `revision` reports the pool `done` (its migrator made a
/// full pass after the fleet's barrier, so every key is where `revision`
/// puts it) or `steady` (it had no earlier placement for the pool, which a
/// member only lacks when the migration had ended or there was none).
pub fn settled_pools(members: &[serde_json::Value], revision: i64) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in members
        .iter()
        .filter(|m| etcd::num(&m["revision"]) == revision)
    {
        if let Some(pools) = m["pools"].as_object() {
            for (p, phase) in pools {
                if matches!(phase.as_str(), Some("done" | "steady")) && !out.contains(p) {
                    out.push(p.clone());
                }
            }
        }
    }
    out
}

/// What a member starting from a revision takes as its pools' earlier
/// configurations (kept in `--fleet-dir` beside the last-good file, so a
/// restart while etcd is down has it too).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Joined {
    /// The configuration revision this is the lineage of.
    pub revision: i64,
    /// Earlier configurations' texts, newest first.
    pub earlier: Vec<String>,
    /// Pools whose migration is known to have ended (no earlier placement).
    pub settled: Vec<String>,
}

impl Joined {
    /// From etcd: the configuration prefix read at `revision` and the
    /// member records.
    pub fn from_etcd(fleet: &str, kvs: &[etcd::Kv], members: &[etcd::Kv]) -> Joined {
        let (config, earlier) = split_config(fleet, kvs);
        let revision = config.map_or(0, |c| c.mod_revision);
        let members: Vec<serde_json::Value> = members
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        Joined {
            revision,
            earlier: earlier.into_iter().map(|(_, t)| t).collect(),
            settled: settled_pools(&members, revision),
        }
    }

    /// As a file's text.
    pub fn to_text(&self) -> String {
        serde_json::json!({
            "revision": self.revision,
            "earlier": self.earlier,
            "settled": self.settled,
        })
        .to_string()
    }

    /// From a file's text (None if unreadable).
    pub fn from_text(text: &str) -> Option<Joined> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let strings = |v: &serde_json::Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(String::from))
                .collect()
        };
        Some(Joined {
            revision: etcd::num(&v["revision"]),
            earlier: strings(&v["earlier"])?,
            settled: strings(&v["settled"])?,
        })
    }

    /// The lineage of `config` (the configuration at `self.revision`): each
    /// pool's earlier configurations whose placement differs, unless its
    /// migration is known to have ended.
    pub fn lineage(
        &self,
        config: &crate::config::Config,
    ) -> Result<crate::migrate::Lineage, crate::config::ConfigErrors> {
        let mut l = crate::migrate::Lineage::import(&self.earlier, config)?;
        for p in &self.settled {
            l.finished(p);
        }
        Ok(l)
    }
}

/// The prefix of a fleet's member records.
pub fn members_prefix(fleet: &str) -> Vec<u8> {
    format!("/walnut/fleet/{fleet}/members/").into_bytes()
}

/// A fleet or member name: letters, digits, `-`, `_`, `.`, `:`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

impl FleetOpts {
    /// The last-good configuration file.
    pub fn cache_path(&self) -> PathBuf {
        self.dir.join(format!("{}-{}.yml", self.name, self.id))
    }

    /// What the master applied (written by the master).
    pub fn state_path(&self) -> PathBuf {
        self.dir.join(format!("{}-{}.state", self.name, self.id))
    }

    /// The members the agent saw last (written by the agent).
    pub fn members_path(&self) -> PathBuf {
        self.dir.join(format!("{}-{}.members", self.name, self.id))
    }

    /// The lineage of the last-good configuration ([`Joined`], written
    /// before it by `fetch_initial` and the agent, read by the master when
    /// it starts).
    pub fn lineage_path(&self) -> PathBuf {
        self.dir.join(format!("{}-{}.lineage", self.name, self.id))
    }

    /// The latest revision whose barrier the fleet passed (written by the
    /// agent, read by the master).
    pub fn go_path(&self) -> PathBuf {
        self.dir.join(format!("{}-{}.go", self.name, self.id))
    }
}

const HEADER: &str = "# walnut fleet ";

/// The last-good file's text: a comment naming fleet and revision, then
/// the configuration as etcd holds it.
pub fn cache_text(fleet: &str, revision: i64, yaml: &str) -> String {
    format!("{HEADER}{fleet} revision {revision}\n{yaml}")
}

/// The revision a last-good file's first line names (0 if none).
pub fn revision_in(text: &str) -> i64 {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix(HEADER))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Writes `text` to `path` whole or not at all (temporary file, fsync,
/// rename).
pub fn write_atomic(path: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Writes the lineage file (before the last-good configuration it goes
/// with: a lineage whose revision is not the configuration's is not used).
pub fn write_joined(opts: &FleetOpts, joined: &Joined) {
    if !joined.earlier.is_empty() {
        crate::log_notice!(
            "fleet '{}': revision {} has {} earlier configuration(s) whose migration may still run{}",
            opts.name,
            joined.revision,
            joined.earlier.len(),
            if joined.settled.is_empty() {
                String::new()
            } else {
                format!(" (ended for {})", joined.settled.join(", "))
            }
        );
    }
    let path = opts.lineage_path();
    if let Err(e) = write_atomic(&path, joined.to_text().as_bytes()) {
        crate::log_error!(
            "fleet '{}': cannot write {}: {e}",
            opts.name,
            path.display()
        );
        let _ = std::fs::remove_file(&path);
    }
}

/// The configuration text `--etcd` starts from: etcd's if it answers (and
/// the text is valid; it is then written to the last-good file), else the
/// last-good file. The path to load.
pub fn fetch_initial(opts: &FleetOpts) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| format!("fleet directory {}: {e}", opts.dir.display()))?;
    let path = opts.cache_path();
    let mut client = etcd::Etcd::new(&opts.etcd)?;
    let read = client.list(&config_key(&opts.name)).and_then(|kvs| {
        let members = client.list(&members_prefix(&opts.name))?;
        Ok((split_config(&opts.name, &kvs).0, kvs, members))
    });
    match read {
        Ok((Some(kv), kvs, members)) if !kv.value.is_empty() => {
            let yaml = String::from_utf8_lossy(&kv.value).into_owned();
            match crate::config::Config::from_str(&yaml, &path) {
                Ok(_) => {
                    let joined = Joined::from_etcd(&opts.name, &kvs, &members);
                    write_joined(opts, &joined);
                    write_atomic(
                        &path,
                        cache_text(&opts.name, kv.mod_revision, &yaml).as_bytes(),
                    )
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                    return Ok(path);
                }
                Err(errs) => crate::log_error!(
                    "fleet '{}': configuration at revision {} is invalid, not applied: {}",
                    opts.name,
                    kv.mod_revision,
                    errs.iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            }
        }
        Ok(_) => crate::log_error!("fleet '{}': etcd holds no configuration", opts.name),
        Err(e) => crate::log_error!("fleet '{}': {e}", opts.name),
    }
    if path.exists() {
        crate::log_warn!(
            "fleet '{}': starting from the last good configuration {}",
            opts.name,
            path.display()
        );
        Ok(path)
    } else {
        Err(format!(
            "fleet '{}': no configuration from etcd and no last good one in {}",
            opts.name,
            path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_round_trip() {
        let t = cache_text("f1", 42, "alpha:\n  listen: 127.0.0.1:1\n");
        assert_eq!(revision_in(&t), 42);
        assert_eq!(revision_in("alpha:\n"), 0);
        assert!(t.ends_with("alpha:\n  listen: 127.0.0.1:1\n"));
    }

    #[test]
    fn lineage_of_the_configuration_read() {
        let kv = |k: Vec<u8>, v: &str, r: i64| etcd::Kv {
            key: k,
            value: v.as_bytes().to_vec(),
            mod_revision: r,
        };
        let l = lineage_text(&[(7, "a:\n".into()), (4, "b:\n".into())]);
        assert_eq!(
            parse_lineage(l.as_bytes()),
            vec![(7, "a:\n".to_string()), (4, "b:\n".to_string())]
        );
        let kvs = [kv(config_key("f"), "c:\n", 9), kv(lineage_key("f"), &l, 9)];
        let (c, earlier) = split_config("f", &kvs);
        assert_eq!(c.unwrap().mod_revision, 9);
        assert_eq!(earlier.len(), 2);
        // Written by another transaction (a configuration put by other
        // means since): not this configuration's lineage.
        let kvs = [kv(config_key("f"), "c:\n", 10), kv(lineage_key("f"), &l, 9)];
        assert!(split_config("f", &kvs).1.is_empty());
        assert!(lineage_key("f").starts_with(&config_key("f")));
    }

    #[test]
    fn settled_pools_and_the_lineage_file() {
        let members: Vec<serde_json::Value> = serde_json::from_str(
            r#"[{"revision":"9","pools":{"p":"running","q":"done","r":"steady"}},
                {"revision":"8","pools":{"p":"done","s":"steady"}},
                {"revision":"9","pools":{"p":"switching"}}]"#,
        )
        .unwrap();
        assert_eq!(settled_pools(&members, 9), vec!["q", "r"]);
        let j = Joined {
            revision: 9,
            earlier: vec!["a:\n".into()],
            settled: vec!["q".into()],
        };
        assert_eq!(Joined::from_text(&j.to_text()), Some(j));
        assert_eq!(Joined::from_text("{}"), None);
    }

    #[test]
    fn a_member_starting_mid_migration_has_the_earlier_placements() {
        let text = |servers: &[u16]| {
            let mut t =
                "p:\n  listen: 127.0.0.1:39998\n  migration: true\n  servers:\n".to_string();
            for s in servers {
                t.push_str(&format!("   - 127.0.0.1:{s}:1\n"));
            }
            t.push_str("q:\n  listen: 127.0.0.1:39997\n  servers:\n   - 127.0.0.1:30009:1\n");
            t
        };
        let path = std::path::Path::new("t.yml");
        let now = crate::config::Config::from_str(&text(&[30001, 30002, 30003]), path).unwrap();
        let mut j = Joined {
            revision: 5,
            earlier: vec![text(&[30001, 30002]), text(&[30001])],
            settled: Vec::new(),
        };
        let l = j.lineage(&now).unwrap();
        assert_eq!(l.of("p").len(), 2);
        assert!(l.of("q").is_empty());
        j.settled = vec!["p".into()];
        assert!(j.lineage(&now).unwrap().is_empty());
        // Only the placement that differs counts.
        j.settled.clear();
        j.earlier = vec![text(&[30001, 30002, 30003])];
        assert!(j.lineage(&now).unwrap().is_empty());
    }

    #[test]
    fn names() {
        assert!(valid_name("web-1.a:2"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(""));
    }
}
