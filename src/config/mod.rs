//! Configuration: a twemproxy 0.5 YAML file, validated.
//!
//! Loading runs in stages: the YAML text becomes raw sections with line
//! numbers ([`yaml`]), each section is validated with every problem
//! collected ([`pool_section`], [`process`]), and the result is an immutable
//! [`Config`]. Every top-level key names a pool, except the reserved
//! `_walnut` section which holds settings of the process as a whole.
//!
//! twemproxy's keys and defaults are kept exactly; the optional pool keys
//! walnut adds (`max_value_size`, `allow_flush`, `keyless_server`, ...)
//! are listed in [`POOL_KEYS`] after twemproxy's.

mod addr;
pub mod diff;
mod error;
mod failover;
mod pool;
mod pool_keys;
mod pool_section;
mod process;
mod routing;
pub mod runtime;
mod scalar;
mod security;
pub mod show;
mod yaml;

pub use addr::{ListenAddr, ServerAddr, ServerConfig, KETAMA_DEFAULT_PORT};
pub use error::{ConfigError, ConfigErrors};
pub use failover::{Failover, ReadFrom, FAILOVER_KEYS};
pub use pool::{PoolConfig, POOL_KEYS};
pub use process::{
    parse_admin, CpuAffinity, ListenerMode, ProcessConfig, Workers, DEFAULT_ADMIN,
    DEFAULT_REPLY_HOLD_US, DEFAULT_SLOWLOG_US, LOG_LEVEL_MAX, PROCESS_KEYS, PROCESS_SECTION,
};
pub use routing::{PrefixRoute, RouteTarget, Routing, Shadow, Zones, ROUTING_KEYS};
pub use scalar::{parse_micros, parse_millis, parse_size};
pub use security::{AclUser, ListenTls, Security, ServerTls, SECURITY_KEYS};

use scalar::Report;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// Process-wide settings (`_walnut` section, or defaults).
    pub process: ProcessConfig,
    /// Pools in file order.
    pub pools: Vec<PoolConfig>,
    /// Things accepted (as twemproxy accepts them) that look like mistakes.
    pub warnings: Vec<ConfigError>,
    /// FNV-1a 64 of the text it was read from: admin `status` reports the
    /// configuration running, which the file on disk may no longer be.
    pub checksum: u64,
}

impl Config {
    /// Reads and validates the file at `path`. Listen host names are
    /// resolved, as twemproxy does when it reads its configuration.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError::new(
                path,
                0,
                format!("cannot read the configuration file: {e}"),
            )])
        })?;
        Config::validate(&text, path, true)
    }

    /// Validates `text`, read from `path`, as `load` does (listen host
    /// names resolved).
    pub fn from_file_text(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
        Config::validate(text, path, true)
    }

    /// Validates `text` as if read from `path` (used in messages only).
    /// Performs no I/O: listen host names are not resolved.
    pub fn from_str(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
        Config::validate(text, path, false)
    }

    fn validate(text: &str, path: &Path, resolve: bool) -> Result<Config, ConfigErrors> {
        let (sections, mut errors) = yaml::parse_sections(text, path);
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        let mut warnings = Vec::new();
        let mut process = None;
        let mut pools = Vec::new();
        let mut names: HashMap<&str, usize> = HashMap::new();
        for section in &sections {
            let name = section.name.text.as_str();
            if let Some(first) = names.get(name) {
                errors.push(
                    ConfigError::new(
                        path,
                        section.name.line,
                        format!("is defined twice (first on line {first})"),
                    )
                    .in_pool(name),
                );
                continue;
            }
            names.insert(name, section.name.line);
            let mut report = Report {
                file: path,
                resolve,
                pool: name,
                errors: Vec::new(),
                warnings: Vec::new(),
            };
            if name == PROCESS_SECTION {
                process = Some(process::validate_process(&mut report, section));
            } else if let Some(pool) = pool_section::validate_pool(&mut report, section) {
                pools.push(pool);
            }
            errors.append(&mut report.errors);
            warnings.append(&mut report.warnings);
        }
        if names.keys().all(|n| *n == PROCESS_SECTION) {
            errors.push(ConfigError::new(path, 0, "has no pools"));
        }
        check_listen_unique(path, &sections, &pools, &mut errors);
        routing::resolve(path, &mut pools, &mut errors);
        if !errors.is_empty() {
            errors.sort_by_key(|e| e.line);
            return Err(ConfigErrors(errors));
        }
        Ok(Config {
            path: path.to_path_buf(),
            process: process.unwrap_or_default(),
            pools,
            warnings,
            checksum: crate::hash::fnv::fnv1a64(text.as_bytes()),
        })
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// Two pools may not listen on the same address (twemproxy compares the
/// text as written; the parsed address is compared too).
fn check_listen_unique(
    path: &Path,
    sections: &[yaml::RawSection],
    pools: &[PoolConfig],
    errors: &mut Vec<ConfigError>,
) {
    let mut seen: HashMap<&ListenAddr, &PoolConfig> = HashMap::new();
    for pool in pools {
        if let Some(first) = seen.get(&pool.listen) {
            let line = sections
                .iter()
                .filter(|s| s.name.text == pool.name)
                .flat_map(|s| s.entries.iter())
                .find(|e| e.key.text == "listen")
                .map_or(pool.line, |e| e.key.line);
            errors.push(
                ConfigError::new(
                    path,
                    line,
                    format!(
                        "listens on the same address '{}' as pool '{}'",
                        pool.listen, first.name
                    ),
                )
                .in_pool(&pool.name),
            );
        } else {
            seen.insert(&pool.listen, pool);
        }
    }
}

#[cfg(test)]
mod tests;
