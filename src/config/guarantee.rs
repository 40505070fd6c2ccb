//! `guarantee` (our extension): which way a limit may err when counts travel between
//! processes and regions. `never_below` (the default) refuses nobody the true counts had
//! room for and may go over while counts travel; `never_above` never admits more than one
//! process deciding alone would (docs/bounded-counter.md).
//!
//! On one process (the embedded default) every decision is exact; where other processes
//! decide the same counters (Redis, the global counters) each admission spends a right taken
//! from the store they share (the engine's `rights`).

use std::fmt;

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

impl fmt::Display for Guarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
