//! `guarantee` (our extension): which way a limit may err when counts travel between
//! processes and regions. `never_below` (the default) refuses nobody the true counts had
//! room for and may go over while counts travel; `never_above` never admits more than one
//! process deciding alone would (docs/bounded-counter.md).
//!
//! On one process (the embedded default) every decision is exact; where other processes
//! decide the same counters (Redis, the global counters) each admission spends a right taken
//! from the store they share (the engine's `rights`).

use std::fmt;
use std::time::Duration;

use super::error::ConfigError;
use super::limits::DomainLimits;
use super::rule::RuleLimit;

/// A limit's guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guarantee {
    /// Nobody is refused while the true count has room; an excess while counts travel.
    #[default]
    NeverBelow,
    /// Never more admitted than one process deciding alone would admit.
    NeverAbove,
}

impl Guarantee {
    /// The spelling in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Guarantee::NeverBelow => "never_below",
            Guarantee::NeverAbove => "never_above",
        }
    }

    /// Reads `guarantee: never_above`; the problem in words otherwise.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "never_below" => Ok(Guarantee::NeverBelow),
            "never_above" => Ok(Guarantee::NeverAbove),
            other => Err(format!(
                "unknown guarantee `{other}`; expected `never_below` (the default) or \
                 `never_above`"
            )),
        }
    }
}

/// Every `never_above` limit of `domains` whose window is not longer than twice `clock_skew`
/// (`--clock-skew`, where decisions spend rights: Redis or the global counters): such a
/// limit refuses its requests within the skew of each window's start and end, which leaves
/// nothing of its window, so it would refuse every request. Zero: nothing to check.
pub(super) fn windows_within_the_clock_margin(
    domains: &[DomainLimits],
    clock_skew: Duration,
) -> Vec<ConfigError> {
    let margin_ms = u64::try_from(clock_skew.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_mul(2);
    if margin_ms == 0 {
        return Vec::new();
    }
    let never_above = domains
        .iter()
        .flat_map(DomainLimits::rules)
        .filter(|rule| rule.is_never_above());
    let mut errors = Vec::new();
    for rule in never_above {
        let within = rule
            .limits()
            .filter_map(RuleLimit::window_ms)
            .filter(|&window_ms| window_ms <= margin_ms);
        for window_ms in within {
            errors.push(ConfigError::new(
                rule.place.file.as_ref(),
                rule.place.line,
                rule.path.as_ref(),
                format!(
                    "`guarantee: never_above` on a window of {} would refuse every request: \
                     with --clock-skew {} a process refuses them within that much of each \
                     window's start and end; make the window longer than twice the skew, or \
                     lower --clock-skew",
                    humantime::format_duration(Duration::from_millis(window_ms)),
                    humantime::format_duration(clock_skew),
                ),
            ));
        }
    }
    errors
}

impl fmt::Display for Guarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
