//! Where something of a limits config was declared: its file (or control-plane resource) and
//! line, for what explains a decision or lints a config and must point at the YAML.

use std::fmt;
use std::sync::Arc;

/// A file (as given: a path, or a control plane's resource name) and a 1-based line, when
/// known.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Place {
    pub file: Arc<str>,
    pub line: Option<usize>,
}

impl Place {
    pub fn new(file: Arc<str>, line: Option<usize>) -> Self {
        Self { file, line }
    }
}

/// `file:line`, or the file alone when the line is unknown.
impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => f.write_str(&self.file),
        }
    }
}
