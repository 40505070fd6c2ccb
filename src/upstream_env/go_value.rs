//! Values as upstream's settings loader (`kelseyhightower/envconfig`) reads them, by their Go
//! type: a value upstream would refuse at start (its loader panics) is refused here too, with
//! the variable's name, whatever the variable then means here.

use std::time::Duration;

/// The Go type of one of upstream's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoKind {
    /// `string`: any value.
    Text,
    /// `bool`: `strconv.ParseBool`.
    Bool,
    /// `int`, `int64`: `strconv.ParseInt(value, 0, 64)`.
    Int,
    /// `float32`, `float64`: `strconv.ParseFloat`.
    Float,
    /// `time.Duration`: `time.ParseDuration`.
    Duration,
    /// `[]string`: comma-separated, any items.
    List,
    /// `map[string]string`: `key:value` pairs, comma-separated.
    Map,
}

impl GoKind {
    /// The kind of a Go type as `settings.go` writes it.
    pub fn of_go_type(go: &str) -> Option<Self> {
        Some(match go {
            "string" => Self::Text,
            "bool" => Self::Bool,
            "int" | "int64" => Self::Int,
            "float32" | "float64" => Self::Float,
            "time.Duration" => Self::Duration,
            "[]string" => Self::List,
            "map[string]string" => Self::Map,
            _ => return None,
        })
    }

    /// `Err(why)` when upstream's loader would refuse `value`.
    pub fn check(self, value: &str) -> Result<(), String> {
        let ok = match self {
            Self::Text | Self::List => true,
            Self::Bool => parse_bool(value).is_some(),
            Self::Int => parse_int(value).is_some(),
            Self::Float => value.parse::<f64>().is_ok(),
            Self::Duration => parse_duration(value).is_some(),
            Self::Map => parse_map(value).is_some(),
        };
        if ok {
            return Ok(());
        }
        Err(match self {
            Self::Bool => format!("{value:?} is not a boolean (true/false, 1/0, t/f)"),
            Self::Int => format!("{value:?} is not an integer"),
            Self::Float => format!("{value:?} is not a number"),
            Self::Duration => {
                format!("{value:?} is not a duration (a number and a unit: 300ms, 10s, 1h)")
            }
            Self::Map => format!("{value:?} is not a list of key:value pairs (a:1,b:2)"),
            Self::Text | Self::List => String::new(),
        })
    }
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseInt(value, 0, 64)`: a sign, then decimal, or `0x`, `0o`, `0b`, `0`
/// (octal) prefixed digits, `_` allowed between digits as in Go's literals.
pub fn parse_int(value: &str) -> Option<i64> {
    let (negative, digits) = match value.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, value.strip_prefix('+').unwrap_or(value)),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(hex) = lower.strip_prefix("0x") {
        (16, hex.replace('_', ""))
    } else if let Some(octal) = lower.strip_prefix("0o") {
        (8, octal.replace('_', ""))
    } else if let Some(binary) = lower.strip_prefix("0b") {
        (2, binary.replace('_', ""))
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower.replace('_', ""))
    } else {
        (10, lower.replace('_', ""))
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(&body, radix).ok()?;
    let signed = if negative { -magnitude } else { magnitude };
    i64::try_from(signed).ok()
}

/// Go's `time.ParseDuration`: `0`, or a sign and one or more decimal numbers each with a unit
/// (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`): `1h30m`, `1.5s`, `150us`. The magnitude and
/// whether it was negative.
pub fn parse_duration(value: &str) -> Option<(bool, Duration)> {
    let (negative, mut rest) = match value.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, value.strip_prefix('+').unwrap_or(value)),
    };
    if rest == "0" {
        return Some((negative, Duration::ZERO));
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let nanos_per_unit = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3_600e9,
            _ => return None,
        };
        total += number.parse::<f64>().ok()? * nanos_per_unit;
        rest = tail;
    }
    // Go's durations are i64 nanoseconds: about 292 years.
    if !total.is_finite() || total > i64::MAX as f64 {
        return None;
    }
    Some((negative, Duration::from_nanos(total as u64)))
}

/// envconfig's `map[string]string`: `key:value` items separated by commas (an empty value is
/// an empty map).
pub fn parse_map(value: &str) -> Option<Vec<(String, String)>> {
    if value.is_empty() {
        return Some(Vec::new());
    }
    value
        .split(',')
        .map(|item| {
            let mut parts = item.split(':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(key), Some(value), None) => Some((key.to_owned(), value.to_owned())),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
