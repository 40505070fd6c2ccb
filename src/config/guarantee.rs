//! `guarantee` (our extension): which way a limit may err when counts travel between
//! processes and regions. `never_below` (the default) refuses nobody the true counts had
//! room for and may go over while counts travel; `never_above` never admits more than one
//! process deciding alone would (docs/bounded-counter.md).
//!
//! `never_above` is offered on one process (the embedded default), where every decision is
//! exact, and across the processes of a region, which spend rights taken from Redis (the
//! engine's `rights`); the global counters do not hold it yet, so a service running with
//! them refuses such a limit (`Sharing`) instead of ignoring it.

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

/// A tier that shares a limit's counts beyond this process, which `never_above` is not
/// built on yet: a config with such a limit is refused while the service runs with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// `--database-url`: the regions share counts through the global counters.
    GlobalCounters,
}

impl Sharing {
    /// Why a `never_above` limit is refused with this tier.
    pub(crate) fn refusal(self) -> String {
        match self {
            Sharing::GlobalCounters => "`guarantee: never_above` is offered on one process and \
                 across the processes of one region (Redis), not across regions: the service \
                 runs with the global counters (`--database-url`), where counts travel between \
                 regions and could admit above the limit; remove the key (the default is \
                 `never_below`) or run without `--database-url`"
                .to_owned(),
        }
    }
}

#[cfg(test)]
mod tests;
