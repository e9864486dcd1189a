//! Configuration errors and warnings, each tied to a file, a line and a pool.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file the problem is in, as it was given.
    pub file: PathBuf,
    /// 1-based line of the offending text (0 when it concerns the whole file).
    pub line: usize,
    /// The pool the problem is in, if any.
    pub pool: Option<String>,
    /// The server entry (as written) the problem is about, if any.
    pub server: Option<String>,
    /// What is wrong, in words.
    pub message: String,
}

impl ConfigError {
    /// A problem at `line` of `file`, outside any pool.
    pub fn new(file: &Path, line: usize, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line,
            pool: None,
            server: None,
            message: message.into(),
        }
    }

    /// The same problem, attributed to `pool`.
    #[must_use]
    pub fn in_pool(mut self, pool: &str) -> Self {
        self.pool = Some(pool.to_string());
        self
    }

    /// The same problem, attributed to the server entry `server`.
    #[must_use]
    pub fn at_server(mut self, server: &str) -> Self {
        self.server = Some(server.to_string());
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        write!(f, ": ")?;
        if let Some(pool) = &self.pool {
            write!(f, "pool '{pool}': ")?;
        }
        if let Some(server) = &self.server {
            write!(f, "server '{server}': ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in a configuration file, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Number of problems.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is no problem.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_line_pool_server() {
        let e = ConfigError::new(
            Path::new("nutcracker.yml"),
            12,
            "'hash' has invalid value 'xyz'",
        )
        .in_pool("alpha");
        assert_eq!(
            e.to_string(),
            "nutcracker.yml:12: pool 'alpha': 'hash' has invalid value 'xyz'"
        );
        let e = ConfigError::new(Path::new("a.yml"), 3, "bad weight")
            .in_pool("p")
            .at_server("h:1:0");
        assert_eq!(
            e.to_string(),
            "a.yml:3: pool 'p': server 'h:1:0': bad weight"
        );
        let e = ConfigError::new(Path::new("a.yml"), 0, "no pools");
        assert_eq!(e.to_string(), "a.yml: no pools");
    }

    #[test]
    fn errors_print_one_per_line() {
        let errs = ConfigErrors(vec![
            ConfigError::new(Path::new("a"), 1, "x"),
            ConfigError::new(Path::new("a"), 2, "y"),
        ]);
        assert_eq!(errs.to_string(), "a:1: x\na:2: y");
        assert_eq!(errs.len(), 2);
    }
}
