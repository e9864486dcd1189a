//! A fleet: instances that take one configuration from etcd (`--etcd URL
//! --fleet NAME`) instead of a file, and register there as members.
//!
//! Keys, under `/walnut/fleet/NAME/`:
//! - `config`: the YAML text `-c` would read; its `mod_revision` is the
//!   configuration's revision. Written by `walnut fleet apply` (`cmd.rs`)
//!   only after every `-t` check passed.
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
//! members it sees to `DIR/NAME-ID.members` for the admin port's `fleet`.

pub mod agent;
pub mod cmd;
pub mod etcd;
pub mod page;

use std::path::{Path, PathBuf};

/// Where an instance keeps its fleet files unless `--fleet-dir` says.
pub const DEFAULT_DIR: &str = "/var/lib/walnut";
/// Seconds a member's lease lasts without renewal (`--fleet-ttl`).
pub const DEFAULT_TTL: u64 = 5;

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
}

/// The key of a fleet's configuration.
pub fn config_key(fleet: &str) -> Vec<u8> {
    format!("/walnut/fleet/{fleet}/config").into_bytes()
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

/// The configuration text `--etcd` starts from: etcd's if it answers (and
/// the text is valid; it is then written to the last-good file), else the
/// last-good file. The path to load.
pub fn fetch_initial(opts: &FleetOpts) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| format!("fleet directory {}: {e}", opts.dir.display()))?;
    let path = opts.cache_path();
    let mut client = etcd::Etcd::new(&opts.etcd)?;
    match client.get(&config_key(&opts.name)) {
        Ok((Some(kv), _)) if !kv.value.is_empty() => {
            let yaml = String::from_utf8_lossy(&kv.value).into_owned();
            match crate::config::Config::from_str(&yaml, &path) {
                Ok(_) => {
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
    fn names() {
        assert!(valid_name("web-1.a:2"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(""));
    }
}
