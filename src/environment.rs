//! Where a setting comes from: the process environment, read once, and the one precedence
//! rule every setting follows.
//!
//! # The environment
//!
//! [`Environment`] is a snapshot of the process environment, taken once in `cli::main` (a
//! map in tests). Everything that reads a variable reads it from the snapshot: upstream's
//! variables ([`crate::upstream_env`]), the no-argument start, `serve`'s settings and
//! `check-config`'s switches. Nothing reads `std::env` elsewhere.
//!
//! Our own `RLS_*` variables are read by clap (`env = "RLS_…"` on each flag). clap copies a
//! variable's value when the command is built, and `cli::main` builds it right after taking
//! the snapshot, before any thread starts; nothing in the process sets variables, so clap and
//! the snapshot see the same environment. Keeping clap's own reading keeps what only clap
//! does well: `--help` names each variable, a variable satisfies a required flag, and two of
//! our settings that contradict each other are refused whether they come from flags or
//! variables. clap records where each value came from ([`clap::ArgMatches::value_source`]);
//! [`Origins`] keeps that record for the settings code.
//!
//! # Precedence
//!
//! One rule for every setting: the command-line flag, else our `RLS_*` variable, else
//! upstream's variable, else the default. "Set" means present: `RLS_SHADOW_MODE=false` beats
//! `SHADOW_MODE=true`. When both ours and upstream's are set to different values, ours wins
//! and a warning says so (a base manifest that sets upstream's variable, overridden by ours,
//! is a normal way to migrate: refusing it would break that). Two of our own settings that
//! contradict each other are refused (exit 2).

use std::collections::HashMap;
use std::fmt;

use clap::ArgMatches;
use clap::parser::ValueSource;

/// A snapshot of the environment: variable names and values. A variable whose name or value
/// is not valid UTF-8 is left out (unset), as `std::env::var` would refuse it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: HashMap<String, String>,
}

impl Environment {
    /// The process's environment, now.
    pub fn capture() -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect();
        Self { vars }
    }

    /// An environment holding exactly `pairs` (tests, embedders).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `name`, if present (an empty value is present).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Whether `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }
}

/// Where one setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The command line.
    Flag,
    /// Our variable (`RLS_…`).
    Ours(String),
    /// Upstream's variable(s), e.g. `SHADOW_MODE` or `HOST and PORT`; `set: false` when
    /// they were unset and the no-argument start applied upstream's default.
    Upstream { variables: String, set: bool },
    /// Upstream's behaviour, which no variable of upstream's sets, given by the no-argument
    /// start (`fixed windows`).
    Behaviour(String),
    /// The flag's default.
    Default,
}

impl Origin {
    /// Whether the setting was given (by any source, not the default).
    pub fn is_set(&self) -> bool {
        !matches!(self, Self::Default)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag => f.write_str("flag"),
            Self::Ours(variable) => f.write_str(variable),
            Self::Upstream {
                variables,
                set: true,
            } => write!(f, "upstream's {variables}"),
            Self::Upstream {
                variables,
                set: false,
            } => write!(f, "upstream's default ({variables} unset)"),
            Self::Behaviour(what) => write!(f, "the no-argument start (upstream's {what})"),
            Self::Default => f.write_str("default"),
        }
    }
}

/// Where each setting of one (sub)command came from, by clap's argument id
/// (`shadow_mode`), with its value as the start log shows it (secrets redacted).
#[derive(Debug, Clone, Default)]
pub struct Origins {
    by_id: HashMap<String, Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    origin: Origin,
    /// `--flag` (or the argument's name).
    flag: String,
    /// The value, redacted where it may hold a secret; `None`: nothing to show.
    value: Option<String>,
    /// The value is the flag's default.
    is_default: bool,
}

impl Origins {
    /// The origins clap recorded in `matches` for `command`'s arguments (`command` built, so
    /// that it holds the global flags too). `upstream` maps a long flag (`http-addr`) to the
    /// upstream variables the no-argument start set it from, and whether one was set: such a
    /// flag is on the generated command line, but its origin is upstream's.
    pub fn from_matches(
        command: &clap::Command,
        matches: &ArgMatches,
        upstream: &[(String, String, bool)],
    ) -> Self {
        let mut by_id = HashMap::new();
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if !matches.try_contains_id(id).unwrap_or(false) {
                continue;
            }
            let long = arg.get_long().unwrap_or(id);
            let origin = match matches.value_source(id) {
                Some(ValueSource::CommandLine) => {
                    match upstream.iter().find(|(flag, ..)| flag == long) {
                        Some((_, what, _)) if crate::upstream_env::is_behaviour(long) => {
                            Origin::Behaviour(what.clone())
                        }
                        Some((_, variables, set)) => Origin::Upstream {
                            variables: variables.clone(),
                            set: *set,
                        },
                        None => Origin::Flag,
                    }
                }
                Some(ValueSource::EnvVariable) => Origin::Ours(
                    arg.get_env()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                ),
                _ => Origin::Default,
            };
            let (value, is_default) = shown_value(arg, matches);
            let entry = Entry {
                origin,
                flag: format!("--{long}"),
                value,
                is_default,
            };
            by_id.insert(id.to_owned(), entry);
        }
        Self { by_id }
    }

    /// The origin of the argument `id` (its default when unknown).
    pub fn of(&self, id: &str) -> Origin {
        self.by_id
            .get(id)
            .map_or(Origin::Default, |entry| entry.origin.clone())
    }

    /// Records that the switch `id` is `value`, from `origin` (upstream's variable applied,
    /// or a test standing for one of our variables).
    pub fn set_switch(&mut self, id: &str, flag: &str, value: bool, origin: Origin) {
        self.by_id.insert(
            id.to_owned(),
            Entry {
                origin,
                flag: flag.to_owned(),
                value: Some(value.to_string()),
                is_default: !value,
            },
        );
    }

    /// One line per setting that was given (by any source) and differs from its default:
    /// `--flag=value from source`, sorted by flag.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .by_id
            .values()
            .filter(|entry| entry.origin.is_set() && !entry.is_default)
            .map(|entry| match &entry.value {
                Some(value) => format!("{}={value} from {}", entry.flag, entry.origin),
                None => format!("{} from {}", entry.flag, entry.origin),
            })
            .collect();
        lines.sort();
        lines
    }
}

/// The value of `arg` as the log may show it, and whether it is the default. A flag whose
/// variable's value `--help` hides (URLs with passwords, credentials, headers) is redacted:
/// URLs keep all but their password, anything else is `***`.
fn shown_value(arg: &clap::Arg, matches: &ArgMatches) -> (Option<String>, bool) {
    let id = arg.get_id().as_str();
    if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        let on = matches.get_flag(id);
        return (Some(on.to_string()), !on);
    }
    let Some(raw) = matches.get_raw(id) else {
        return (None, true);
    };
    let raw: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let is_default = raw == defaults;
    let shown: Vec<String> = if arg.is_hide_env_values_set() {
        raw.iter()
            .map(|value| {
                if value.contains("://") {
                    gcounter_engine::redact::redact_url(value)
                } else {
                    "***".to_owned()
                }
            })
            .collect()
    } else {
        raw
    };
    (Some(shown.join(",")), is_default)
}

/// A switch (a boolean flag) with its upstream variable, resolved by the precedence rule.
#[derive(Debug, Clone, Copy)]
pub struct Switch {
    /// clap's id of our flag (`shadow_mode`).
    pub id: &'static str,
    /// Our flag, as written (`--shadow-mode`).
    pub flag: &'static str,
    /// Upstream's variable (`SHADOW_MODE`).
    pub upstream: &'static str,
}

/// The outcome of [`resolve_switch`]: the value and, when it is worth a log line, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub value: bool,
    pub origin: Origin,
    /// Ours and upstream's both set and different: ours won; the text says so.
    pub warning: Option<String>,
}

/// `switch`'s value: ours (`value`, from `origin`) when set, else upstream's variable when
/// set, else the default (`value`). Upstream's value is read as upstream reads it (Go's
/// `strconv.ParseBool`; empty is unset); one it cannot read is an error naming it.
pub fn resolve_switch(
    switch: &Switch,
    value: bool,
    origin: Origin,
    env: &Environment,
) -> Result<Resolved, crate::upstream_env::UpstreamEnvError> {
    let upstream = crate::upstream_env::boolean(env, switch.upstream)?;
    Ok(match (origin.is_set(), upstream) {
        (false, Some(theirs)) => Resolved {
            value: theirs,
            origin: Origin::Upstream {
                variables: switch.upstream.to_owned(),
                set: true,
            },
            warning: None,
        },
        (true, Some(theirs)) if theirs != value => Resolved {
            warning: Some(format!(
                "{} is {value} from {origin}, which wins over upstream's {}={}",
                switch.flag,
                switch.upstream,
                env.get(switch.upstream).unwrap_or_default()
            )),
            value,
            origin,
        },
        _ => Resolved {
            value,
            origin,
            warning: None,
        },
    })
}

#[cfg(test)]
mod tests;
