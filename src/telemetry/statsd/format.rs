//! The lines upstream's stats sinks write: statsd as lyft/gostats writes it (tags serialized
//! into the name, `name.__key=value`), DogStatsD as upstream's `godogstats` sink writes it
//! (the same tags taken out of the name into `|#key:value`, and its mogrifiers applied).

use std::sync::LazyLock;

use regex::Regex;

use super::mogrifier::Mogrifier;

/// Which line protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Statsd,
    DogStatsd,
}

/// upstream's `utils.SanitizeStatName`: `:` and `|` become `_`, and so do the dots of an IPv4
/// address (a descriptor value), so the stat's segments stay the config's.
pub fn sanitize(name: &str) -> String {
    static IPV4: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}").ok());
    let replaced = name.replace([':', '|'], "_");
    match IPV4.as_ref() {
        Some(ipv4) => ipv4
            .replace_all(&replaced, |found: &regex::Captures<'_>| {
                found
                    .get(0)
                    .map_or_else(String::new, |ip| ip.as_str().replace('.', "_"))
            })
            .into_owned(),
        None => replaced,
    }
}

/// gostats' tags: sorted by key, empty keys or values left out, `.`, `:` and `|` in a value
/// turned into `_`.
pub fn tag_set(tags: &[(String, String)]) -> Vec<(String, String)> {
    let mut set: Vec<(String, String)> = tags
        .iter()
        .filter(|(key, value)| !key.is_empty() && !value.is_empty())
        .map(|(key, value)| (key.clone(), value.replace(['.', ':', '|'], "_")))
        .collect();
    set.sort();
    set
}

/// One counter's line: `delta` more since the last one sent.
pub fn counter_line(
    format: Format,
    name: &str,
    tags: &[(String, String)],
    mogrifiers: &[Mogrifier],
    delta: u64,
    out: &mut String,
) {
    use std::fmt::Write;
    match format {
        Format::Statsd => {
            out.push_str(name);
            for (key, value) in tags {
                let _ = write!(out, ".__{key}={value}");
            }
            let _ = writeln!(out, ":{delta}|c");
        }
        Format::DogStatsd => {
            let (name, extra) = match mogrifiers.iter().find_map(|m| m.apply(name)) {
                Some((name, extra)) => (name, extra),
                None => (name.to_owned(), Vec::new()),
            };
            let _ = write!(out, "{name}:{delta}|c");
            let mut all = tags.iter().map(|(key, value)| format!("{key}:{value}"));
            let mut extra = extra.into_iter();
            let first = all.next().or_else(|| extra.next());
            if let Some(first) = first {
                let _ = write!(out, "|#{first}");
                for tag in all.chain(extra) {
                    let _ = write!(out, ",{tag}");
                }
            }
            out.push('\n');
        }
    }
}
