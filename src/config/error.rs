//! Configuration errors: every problem of every file, each with its place.

use std::fmt::{self, Write as _};

/// One problem in one configuration file.
///
/// Displays as `FILE:LINE: PLACE: PROBLEM`; `:LINE` is left out when unknown
/// and `PLACE: ` when the problem is about the whole file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Render(self))]
pub struct ConfigError {
    /// The file as given (path or source name).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// A path in the document such as `descriptors[0].rate_limit.unit`; empty
    /// for the whole file.
    pub place: String,
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn new(
        file: impl Into<String>,
        line: Option<usize>,
        place: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        ConfigError {
            file: file.into(),
            line,
            place: place.into(),
            problem: problem.into(),
        }
    }
}

struct Render<'a>(&'a ConfigError);

impl fmt::Display for Render<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write_one_line(f, &e.file)?;
        if let Some(line) = e.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if !e.place.is_empty() {
            write_one_line(f, &e.place)?;
            f.write_str(": ")?;
        }
        write_one_line(f, &e.problem)
    }
}

/// Escapes control characters so that each error stays on one line whatever
/// bytes the file held.
fn write_one_line(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    for c in s.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_debug())?;
        } else {
            f.write_char(c)?;
        }
    }
    Ok(())
}

/// All problems found while loading a configuration (never empty when
/// returned by a loader). Displays one error per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Lines(&self.0))]
pub struct ConfigErrors(Vec<ConfigError>);

impl ConfigErrors {
    pub(crate) fn new(errors: Vec<ConfigError>) -> Self {
        ConfigErrors(errors)
    }

    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }

    pub fn into_vec(self) -> Vec<ConfigError> {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

struct Lines<'a>(&'a [ConfigError]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_char('\n')?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
