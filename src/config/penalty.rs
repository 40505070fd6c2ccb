//! `penalty` (our extension, after Fastly Edge Rate Limiting's penalty box): how long a
//! client that went over a rule stays denied, whatever its window says meanwhile.

use std::time::Duration;

/// The shortest penalty: below a second the window's own `Retry-After` already says it.
pub const MIN_PENALTY: Duration = Duration::from_secs(1);
/// The longest: a day. Entries live this long in every process's box and in Redis.
pub const MAX_PENALTY: Duration = Duration::from_secs(24 * 60 * 60);

/// Reads `penalty: 5m` (humantime: `30s`, `5m`, `1h 30m`) into milliseconds, within
/// [`MIN_PENALTY`]..=[`MAX_PENALTY`]; the problem in words otherwise.
pub fn parse(text: &str) -> Result<u64, String> {
    let duration = humantime::parse_duration(text.trim()).map_err(|error| {
        format!("`penalty: {text}` is not a duration (e.g. `30s`, `5m`): {error}")
    })?;
    if !(MIN_PENALTY..=MAX_PENALTY).contains(&duration) {
        return Err(format!(
            "`penalty: {text}` is out of range: from {} to {}",
            humantime::format_duration(MIN_PENALTY),
            humantime::format_duration(MAX_PENALTY)
        ));
    }
    Ok(duration.as_millis() as u64)
}

#[cfg(test)]
mod tests;
