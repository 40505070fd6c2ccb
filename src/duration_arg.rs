//! One value parser for every duration setting: `10s`-style text (humantime) within bounds.
//!
//! A zero interval spins a loop (a zero `tokio::time::interval` panics, a zero sync interval
//! sends hundreds of statements a second) and a zero timeout fails every call, so each
//! duration flag declares the range that makes sense for it and clap refuses anything
//! outside at start, naming the flag: `invalid value '0s' for '--replay-interval <..>'`.

use std::time::Duration;

use clap::builder::TypedValueParser;

/// Parses a duration and refuses it outside `min..=max`.
#[derive(Debug, Clone, Copy)]
pub struct DurationRange {
    min: Duration,
    max: Duration,
}

impl DurationRange {
    pub const fn new(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }

    /// The check alone, for values that do not come from the command line.
    pub fn check(&self, value: Duration) -> Result<Duration, String> {
        if value < self.min || value > self.max {
            return Err(format!(
                "must be between {} and {}",
                humantime::format_duration(self.min),
                humantime::format_duration(self.max)
            ));
        }
        Ok(value)
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
mod tests {
    use super::*;

    #[test]
    fn refuses_zero_and_the_absurd_and_keeps_the_rest() {
        let range = DurationRange::new(millis(1), hours(24));
        assert_eq!(range.parse("100ms"), Ok(millis(100)));
        assert_eq!(range.parse("24h"), Ok(hours(24)));
        assert!(range.parse("0s").is_err());
        assert!(range.parse("25h").is_err());
        assert!(range.parse("soon").is_err());
    }

    #[test]
    fn clap_names_the_flag_and_the_range() {
        #[derive(clap::Parser, Debug)]
        struct Args {
            #[arg(long, value_parser = DurationRange::new(millis(1), hours(1)).parser())]
            every: Duration,
        }
        let error = <Args as clap::Parser>::try_parse_from(["t", "--every", "0s"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("--every"), "{error}");
        assert!(error.contains("'0s'"), "{error}");
        assert!(error.contains("must be between 1ms and 1h"), "{error}");
    }
}
