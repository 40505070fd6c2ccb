//! Rate-limit configuration: the envoyproxy/ratelimit YAML format (plus
//! additive extensions such as `unit_multiplier`), validated with file, line
//! and path in every error, and compiled into one lookup tree per domain.
//!
//! The YAML model (`raw`), every field's expected shape checked first with all problems
//! reported (`shape`); errors with file, line and place (`error`, `locate`); bounded
//! reading (`read`: regular files only, a byte cap, a YAML depth cap); the compiled tree and
//! its matching (`compile`, `limits`, `glob`); `Rule`/`Unit` (a rule's `limit` and, from our
//! `rate_limits` extension, its `more_limits`); the `penalty` extension (`penalty`); the
//! `guarantee` extension (`guarantee`); where each node, rule and domain was declared
//! (`place`) and a read-only view of the tree with the walk of one descriptor
//! (`limits::tree`), for `explain` and the Envoy lint; which files a directory means, as
//! upstream's runtime walks it (`walk`); loading and merging domains (`load`); hot reload
//! (`watch`).

mod compile;
mod error;
mod glob;
mod guarantee;
mod limits;
mod load;
mod locate;
mod penalty;
mod place;
pub(crate) mod raw;
mod read;
mod rule;
mod shape;
#[cfg(test)]
mod test_files;
mod unit;
mod walk;
mod watch;

pub use error::{ConfigError, ConfigErrors};
pub(crate) use glob::Glob;
pub use guarantee::Guarantee;
pub use limits::tree::{MatchKind, NodeView, Step, Trace, TraceEnd, ValuePattern};
pub use limits::yaml::DOCUMENT_SEPARATOR;
pub use limits::{BucketOrderError, DomainLimits, Found, LimitsConfig};
pub(crate) use load::load_raw;
pub use load::{LoadOptions, load_path, load_sources, load_str};
pub use place::Place;
pub use read::{MAX_YAML_DEPTH, ReadError, ReadLimits, read_text};
pub(crate) use rule::window_ms;
pub use rule::{Rule, RuleLimit};
pub use unit::Unit;
pub use watch::watch;
