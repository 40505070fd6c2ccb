//! upstream's DogStatsD mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`): each named one is a regular
//! expression on the stat's name (`DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`), the name it becomes
//! (`_NAME`, with `$1`… of the match) and tags (`_TAGS`, `key:$2,...`); the first that matches
//! a name applies.

use regex::Regex;

use crate::environment::Environment;

/// One mogrifier.
#[derive(Debug, Clone)]
pub struct Mogrifier {
    pattern: Regex,
    name: String,
    tags: Vec<(String, String)>,
}

/// A mogrifier that cannot be used: the text names its variable.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {problem}")]
pub struct MogrifierError {
    pub variable: String,
    pub problem: String,
}

/// The longest pattern read: a regular expression is compiled once, but bounded all the same.
const MAX_PATTERN_BYTES: usize = 4_096;

impl Mogrifier {
    /// The mogrifiers `names` names, read from `env` as upstream reads them.
    pub fn from_env(names: &[String], env: &Environment) -> Result<Vec<Self>, MogrifierError> {
        names.iter().map(|name| Self::one(name, env)).collect()
    }

    fn one(name: &str, env: &Environment) -> Result<Self, MogrifierError> {
        let variable = |part: &str| format!("DOG_STATSD_MOGRIFIER_{name}_{part}");
        let get = |part: &str| env.get(&variable(part)).filter(|v| !v.is_empty());
        let refuse = |part: &str, problem: String| MogrifierError {
            variable: variable(part),
            problem,
        };
        let pattern =
            get("PATTERN").ok_or_else(|| refuse("PATTERN", "required for a mogrifier".into()))?;
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(refuse(
                "PATTERN",
                format!("longer than {MAX_PATTERN_BYTES} bytes"),
            ));
        }
        let pattern = Regex::new(pattern)
            .map_err(|e| refuse("PATTERN", format!("not a regular expression: {e}")))?;
        let renamed = get("NAME")
            .ok_or_else(|| refuse("NAME", "required for a mogrifier".into()))?
            .to_owned();
        let tags = match get("TAGS") {
            None => Vec::new(),
            Some(text) => crate::upstream_env::parse_go_map(text)
                .ok_or_else(|| refuse("TAGS", format!("{text:?} is not key:value pairs")))?,
        };
        if let Some((key, _)) = tags.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err(refuse(
                "TAGS",
                format!("tag {key:?} has an empty key or value"),
            ));
        }
        Ok(Self {
            pattern,
            name: renamed,
            tags,
        })
    }

    /// The name and tags `name` becomes, if this mogrifier matches it.
    pub fn apply(&self, name: &str) -> Option<(String, Vec<String>)> {
        let found = self.pattern.captures(name)?;
        let groups: Vec<&str> = found
            .iter()
            .map(|group| group.map_or("", |g| g.as_str()))
            .collect();
        let expand = |template: &str| expand(template, &groups);
        let tags = self
            .tags
            .iter()
            .map(|(key, value)| format!("{key}:{}", expand(value)))
            .collect();
        Some((expand(&self.name), tags))
    }
}

/// `$0`, `$1`, … replaced by the match's groups (a `$n` past them stays as written), as
/// upstream's `makePatternHandler`.
fn expand(template: &str, groups: &[&str]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(digit) = chars.next_if(char::is_ascii_digit) {
            digits.push(digit);
        }
        match digits.parse::<usize>().ok().and_then(|i| groups.get(i)) {
            Some(group) => out.push_str(group),
            None => {
                out.push('$');
                out.push_str(&digits);
            }
        }
    }
    out
}
