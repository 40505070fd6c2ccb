//! envoyproxy/ratelimit's environment variables for the switches we share with it
//! (`SHADOW_MODE`, `QUOTA_MODE`, ...), so a deployment moved over with its environment
//! unchanged keeps its behaviour. Our `RLS_*` flags stay the documented way: a switch is on
//! when either names it.

use std::ffi::OsString;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UpstreamEnvError {
    #[error(
        "{name}={value:?} is not a boolean (as envoyproxy/ratelimit reads it: 1, t, T, TRUE, \
         true, True, 0, f, F, FALSE, false or False)"
    )]
    NotBool { name: &'static str, value: String },
    #[error("{name} is not valid UTF-8")]
    NotUnicode { name: &'static str },
}

/// The boolean in the environment variable `name`, read as upstream's `envconfig` reads it
/// (Go's `strconv.ParseBool`); unset or empty is `false`. Anything else is refused rather
/// than guessed, as upstream refuses to start on it.
pub fn flag(name: &'static str) -> Result<bool, UpstreamEnvError> {
    parse(name, std::env::var_os(name))
}

fn parse(name: &'static str, value: Option<OsString>) -> Result<bool, UpstreamEnvError> {
    let Some(value) = value else {
        return Ok(false);
    };
    let value = value
        .into_string()
        .map_err(|_| UpstreamEnvError::NotUnicode { name })?;
    match value.as_str() {
        "" => Ok(false),
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(UpstreamEnvError::NotBool {
            name,
            value: value.chars().take(64).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: Option<&str>) -> Result<bool, UpstreamEnvError> {
        parse("QUOTA_MODE", value.map(OsString::from))
    }

    #[test]
    fn reads_go_booleans() {
        assert_eq!(read(None), Ok(false));
        assert_eq!(read(Some("")), Ok(false));
        for on in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(read(Some(on)), Ok(true), "{on}");
        }
        for off in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(read(Some(off)), Ok(false), "{off}");
        }
        assert!(matches!(
            read(Some("yes")),
            Err(UpstreamEnvError::NotBool { .. })
        ));
    }
}
