//! The scalar values of a configuration file, parsed in one place for
//! pools and the `_walnut` section alike (twemproxy's rules: `true`/`false`
//! exactly, decimal numbers that wrap as its atoi does, sizes with k/m/g,
//! durations), and the report that collects their errors with file and
//! line.

use super::addr::{overflows, parse_uint};
use super::error::ConfigError;
use super::yaml::{RawValue, Scalar};
use std::path::Path;

/// Collects errors and warnings for one pool.
pub(crate) struct Report<'a> {
    pub file: &'a Path,
    /// Check that listen host names resolve (as twemproxy does on load).
    pub resolve: bool,
    pub pool: &'a str,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigError>,
}

impl Report<'_> {
    pub fn make(&self, line: usize, msg: String) -> ConfigError {
        ConfigError::new(self.file, line, msg).in_pool(self.pool)
    }
    pub fn error(&mut self, line: usize, msg: impl Into<String>) {
        let e = self.make(line, msg.into());
        self.errors.push(e);
    }
    pub fn warn(&mut self, line: usize, msg: impl Into<String>) {
        let e = self.make(line, msg.into());
        self.warnings.push(e);
    }
}

/// Parses `true`/`false` exactly, as twemproxy does.
pub(crate) fn parse_bool(r: &mut Report, key: &str, v: &Scalar) -> Option<bool> {
    match v.text.as_str() {
        "true" => Some(true),
        "false" => Some(false),
        other => {
            r.error(
                v.line,
                format!("'{key}' has invalid value '{other}': expected true or false"),
            );
            None
        }
    }
}

/// Parses a non-negative decimal number, as twemproxy does.
pub(crate) fn parse_num(r: &mut Report, key: &str, v: &Scalar) -> Option<u32> {
    let n = parse_uint(&v.text);
    if let (Some(n), true) = (n, overflows(&v.text)) {
        r.warn(
            v.line,
            format!(
                "'{key}' value '{}' is too large and wraps to {n} (as in twemproxy)",
                v.text
            ),
        );
    }
    if n.is_none() {
        r.error(
            v.line,
            format!(
                "'{key}' has invalid value '{}': expected a whole number from 0 to 2147483647",
                v.text
            ),
        );
    }
    n
}

/// Parses a byte size: a number with an optional k, m or g suffix (powers of 1024).
pub fn parse_size(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let (digits, mult) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1usize << 10),
        Some(b'm') => (&lower[..lower.len() - 1], 1 << 20),
        Some(b'g') => (&lower[..lower.len() - 1], 1 << 30),
        _ => (lower.as_str(), 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<usize>().ok()?.checked_mul(mult)
}

/// Parses a duration in ms: a number, optionally followed by `ms` or `s`.
pub fn parse_millis(s: &str) -> Option<u64> {
    if let Some(n) = s.strip_suffix("ms") {
        return parse_uint(n).map(u64::from);
    }
    if let Some(n) = s.strip_suffix('s') {
        return parse_uint(n).map(|n| u64::from(n) * 1000);
    }
    parse_uint(s).map(u64::from)
}

/// Parses a duration in µs: a number, optionally followed by `us`, `ms`
/// or `s`.
pub fn parse_micros(s: &str) -> Option<u64> {
    if let Some(n) = s.strip_suffix("us") {
        return parse_uint(n).map(u64::from);
    }
    parse_millis(s)
        .filter(|_| s.ends_with('s'))
        .map(|ms| ms * 1000)
        .or_else(|| parse_uint(s).map(u64::from))
}

/// The single value of key `k`, if it has one.
pub(crate) fn scalar_of<'a>(
    get: &impl Fn(&str) -> Option<(&'a Scalar, &'a RawValue)>,
    k: &str,
) -> Option<&'a Scalar> {
    match get(k) {
        Some((_, RawValue::Scalar(s))) => Some(s),
        _ => None,
    }
}

/// A YAML scalar: plain when it cannot be mistaken for anything else,
/// double-quoted (with `\` and `"` escaped) otherwise.
pub(crate) fn yaml_scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-/:[]".contains(&b))
        && !text.starts_with(['-', '[', ':'])
        && !matches!(text, "true" | "false" | "null" | "~" | "yes" | "no");
    if plain {
        return text.to_string();
    }
    let mut q = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}
