//! Reading samples out of a Prometheus / OpenMetrics text exposition.

/// The value of the sample `name{labels}` in `text`, whatever the order of the
/// labels; `labels` must be all of the sample's labels. None if absent.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (sample_name, sample_labels, value) = parse_line(line)?;
            if sample_name != name || sample_labels.len() != labels.len() {
                return None;
            }
            let all_match = labels
                .iter()
                .all(|(k, v)| sample_labels.iter().any(|(sk, sv)| sk == k && sv == v));
            all_match.then_some(value)
        })
}

/// Label pairs of one sample, values unescaped.
type Labels = Vec<(String, String)>;

/// `name{k="v",...} value [timestamp]`.
fn parse_line(line: &str) -> Option<(&str, Labels, f64)> {
    let line = line.trim();
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let (labels, rest) = parse_labels(&line[open + 1..])?;
            (&line[..open], labels, rest)
        }
        None => {
            let space = line.find(' ')?;
            (&line[..space], Vec::new(), &line[space..])
        }
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// Labels up to the closing `}`; returns them and the text after it.
fn parse_labels(mut s: &str) -> Option<(Labels, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches(',');
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                other => value.push(other),
            }
        };
        labels.push((key, value));
        s = &s[end + 1..];
    }
}

/// `rls_requests_total{outcome}`, the requests answered with `outcome` (`ok`,
/// `over_limit`, `invalid_argument`, ...).
pub fn requests(text: &str, outcome: &str) -> Option<f64> {
    sample(text, "rls_requests_total", &[("outcome", outcome)])
}

/// `rls_descriptor_decisions_total{domain, rule, outcome}`, the decisions of one rule's
/// series (`rule` is its series name, as upstream names its stats) with `outcome`
/// (`within_limit`, `over_limit`, `shadow_over_limit`, ...).
pub fn decisions(text: &str, domain: &str, rule: &str, outcome: &str) -> Option<f64> {
    sample(
        text,
        "rls_descriptor_decisions_total",
        &[("domain", domain), ("rule", rule), ("outcome", outcome)],
    )
}

/// Like [`sample`], with 0 for a series not (yet) exported, of a metric that is: its family
/// must be declared in `text` (`# TYPE`), so a renamed or removed metric fails the caller
/// instead of reading as 0. The registry lists a family once it has a series: where "none
/// yet" is a valid answer, read [`sample`] and say so.
pub fn count(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    assert!(
        has_family(text, name),
        "no metric {name} on /metrics (no `# TYPE` line for its family): renamed or removed?"
    );
    sample(text, name, labels).unwrap_or(0.0)
}

/// Whether `text` declares the family the sample `name` belongs to (`rls_requests` for
/// `rls_requests_total`, `x` for `x_bucket`, `x_count`, `x_sum`).
pub fn has_family(text: &str, name: &str) -> bool {
    let family = ["_total", "_bucket", "_count", "_sum", "_created"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name);
    text.lines().any(|line| {
        let mut words = line.split_whitespace();
        words.next() == Some("#")
            && words.next() == Some("TYPE")
            && words
                .next()
                .is_some_and(|declared| declared == family || declared == name)
    })
}

#[cfg(test)]
mod tests;
