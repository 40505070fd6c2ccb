//! Rate-limit configuration: the envoyproxy/ratelimit YAML format (plus
//! additive extensions such as `unit_multiplier`), validated with file, line
//! and path in every error, and compiled into one lookup tree per domain.

mod compile;
mod error;
mod glob;
mod limits;
mod load;
mod locate;
mod penalty;
pub(crate) mod raw;
mod read;
mod rule;
#[cfg(test)]
mod test_files;
mod unit;
mod walk;
mod watch;

pub use error::{ConfigError, ConfigErrors};
pub use limits::{DomainLimits, Found, LimitsConfig};
pub(crate) use load::load_raw;
pub use load::{LoadOptions, load_path, load_sources, load_str};
pub use read::{MAX_YAML_DEPTH, ReadError, ReadLimits, read_text};
pub(crate) use rule::window_ms;
pub use rule::{Rule, RuleLimit};
pub use unit::Unit;
pub use watch::watch;
