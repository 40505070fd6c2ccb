//! One value parser for every duration setting: `10s`-style text (humantime) within bounds.
//!
//! A zero interval spins a loop (a zero `tokio::time::interval` panics, a zero sync interval
//! sends hundreds of statements a second) and a zero timeout fails every call, so each
//! duration flag declares the range that makes sense for it and clap refuses anything
//! outside at start, naming the flag: `invalid value '0s' for '--replay-interval <..>'`.

use std::time::Duration;

use clap::builder::TypedValueParser;

use crate::bounded_arg::Bounds;

/// Parses a duration and refuses it outside `min..=max`.
pub type DurationRange = Bounds<Duration>;

impl DurationRange {
    /// The check alone, for values that do not come from the command line.
    pub fn check(&self, value: Duration) -> Result<Duration, String> {
        self.within(value, humantime::format_duration)
    }

    fn parse(&self, text: &str) -> Result<Duration, String> {
        let value = humantime::parse_duration(text).map_err(|e| e.to_string())?;
        self.check(value)
    }

    /// The clap value parser: its error names the flag, the value and the range.
    pub fn parser(self) -> impl TypedValueParser<Value = Duration> {
        move |text: &str| self.parse(text)
    }
}

/// Milliseconds to hours: most of our timeouts and cadences.
pub const fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Whole hours, for upper bounds.
pub const fn hours(h: u64) -> Duration {
    Duration::from_secs(h * 3_600)
}

#[cfg(test)]
mod tests;
