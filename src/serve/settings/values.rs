//! The settings that are values checked on their own: a region name that fits the global
//! table's column, and a duration that may not be zero.

use super::*;

/// The longest region name the global counters table holds.
pub const MAX_REGION_BYTES: usize = 48;

/// This process's region: 1 to [`MAX_REGION_BYTES`] bytes (the global table's column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region(String);

impl Region {
    pub fn new(name: impl Into<String>) -> anyhow::Result<Self> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_REGION_BYTES {
            anyhow::bail!(
                "--region must be 1 to {MAX_REGION_BYTES} bytes, got {} bytes",
                name.len()
            );
        }
        Ok(Self(name))
    }

    /// The region of a process without global counters.
    pub fn local() -> Self {
        Self("local".to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A duration that is not zero (an interval, a deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NonZeroDuration(Duration);

impl NonZeroDuration {
    pub fn new(duration: Duration) -> Option<Self> {
        (!duration.is_zero()).then_some(Self(duration))
    }

    pub const fn get(self) -> Duration {
        self.0
    }

    /// For a flag whose value parser already refuses zero; the error names the flag anyway.
    pub(super) fn flag(name: &str, duration: Duration) -> anyhow::Result<Self> {
        Self::new(duration).ok_or_else(|| anyhow::anyhow!("--{name} must not be zero"))
    }
}
