//! Envoy's matchers as its router and rate limit actions evaluate them: `StringMatcher`,
//! `HeaderMatcher` (`Http::HeaderUtility`), query parameter matchers
//! (`Router::ConfigUtility`) and a route's `match`.
//!
//! A matcher this project does not evaluate is recorded as unsupported by the parser and
//! evaluates as [`Unknown`](Matched::Unknown), which the caller reports.

use regex::{Regex, RegexBuilder};

use super::request::HttpRequest;

/// A compiled regex is bounded: Envoy's own RE2 refuses programs over a size too.
const MAX_REGEX_BYTES: usize = 1 << 20;

/// `envoy.type.matcher.v3.StringMatcher`.
#[derive(Debug, Clone)]
pub enum StringMatcher {
    Exact(String, bool),
    Prefix(String, bool),
    Suffix(String, bool),
    Contains(String, bool),
    /// Anchored at both ends: RE2's full match, as Envoy uses it.
    Regex(Regex),
}

impl StringMatcher {
    pub fn matches(&self, value: &str) -> bool {
        let lower = |s: &str| s.to_ascii_lowercase();
        match self {
            StringMatcher::Exact(want, false) => value == want,
            StringMatcher::Exact(want, true) => value.eq_ignore_ascii_case(want),
            StringMatcher::Prefix(want, false) => value.starts_with(want.as_str()),
            StringMatcher::Prefix(want, true) => lower(value).starts_with(&lower(want)),
            StringMatcher::Suffix(want, false) => value.ends_with(want.as_str()),
            StringMatcher::Suffix(want, true) => lower(value).ends_with(&lower(want)),
            StringMatcher::Contains(want, false) => value.contains(want.as_str()),
            StringMatcher::Contains(want, true) => lower(value).contains(&lower(want)),
            StringMatcher::Regex(regex) => regex.is_match(value),
        }
    }
}

/// A regex as Envoy's `safe_regex` means it: the whole value must match.
pub fn full_match_regex(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("regex `{pattern}`: {e}"))
}

/// What a `HeaderMatcher` tests once the header's value is known.
#[derive(Debug, Clone)]
pub enum HeaderTest {
    String(StringMatcher),
    /// `range_match`: an integer in `[start, end)`.
    Range(i64, i64),
    /// `present_match` (and a matcher with no test: presence).
    Present(bool),
}

/// `envoy.config.route.v3.HeaderMatcher`.
#[derive(Debug, Clone)]
pub struct HeaderMatcher {
    /// Lower-case, as Envoy keys its header maps.
    pub name: String,
    pub test: HeaderTest,
    pub invert: bool,
    pub treat_missing_as_empty: bool,
}

impl HeaderMatcher {
    /// As `HeaderUtility::matchHeaders` for one matcher: a missing header does not match
    /// (whatever `invert_match` says) unless it is treated as empty; several values of one
    /// header are joined with `,`.
    pub fn matches(&self, request: &HttpRequest) -> bool {
        let value = request.header_joined(&self.name);
        if let HeaderTest::Present(present) = self.test {
            return (value.is_some() == present) != self.invert;
        }
        let value = match value {
            Some(value) => value,
            None if self.treat_missing_as_empty => String::new(),
            None => return false,
        };
        let matched = match &self.test {
            HeaderTest::String(matcher) => matcher.matches(&value),
            HeaderTest::Range(start, end) => {
                value.parse::<i64>().is_ok_and(|v| *start <= v && v < *end)
            }
            HeaderTest::Present(_) => true,
        };
        matched != self.invert
    }
}

/// `envoy.config.route.v3.QueryParameterMatcher`: the first value of the parameter.
#[derive(Debug, Clone)]
pub struct QueryParameterMatcher {
    pub name: String,
    /// `None`: presence is enough (`present_match`).
    pub matcher: Option<StringMatcher>,
}

impl QueryParameterMatcher {
    pub fn matches(&self, request: &HttpRequest) -> bool {
        match request.query_first(&self.name) {
            None => false,
            Some(value) => self.matcher.as_ref().is_none_or(|m| m.matches(&value)),
        }
    }
}

/// A route's `match`.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    pub path: PathMatch,
    pub case_sensitive: bool,
    pub headers: Vec<HeaderMatcher>,
    pub query_parameters: Vec<QueryParameterMatcher>,
    /// Other conditions (`grpc`, `runtime_fraction`, ...): not evaluated.
    pub unsupported: Vec<String>,
}

#[derive(Debug, Clone)]
pub enum PathMatch {
    Prefix(String),
    Exact(String),
    Regex(Regex),
    /// `path_separated_prefix`: the prefix, then the end of the path or `/`.
    SeparatedPrefix(String),
    /// A path matcher this project does not evaluate (`path_match_policy`, `connect_matcher`).
    Unsupported(String),
}

/// Whether a route matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    Yes,
    No,
    /// Everything evaluated matched, but these conditions were not evaluated.
    Unknown(Vec<String>),
}

impl RouteMatch {
    pub fn matches(&self, request: &HttpRequest) -> Matched {
        let path = request.path_without_query();
        let path_ok = match &self.path {
            PathMatch::Prefix(prefix) if self.case_sensitive => path.starts_with(prefix.as_str()),
            PathMatch::Prefix(prefix) => path
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix)),
            PathMatch::Exact(exact) if self.case_sensitive => path == exact,
            PathMatch::Exact(exact) => path.eq_ignore_ascii_case(exact),
            PathMatch::Regex(regex) => regex.is_match(path),
            PathMatch::SeparatedPrefix(prefix) => {
                let head = path.get(..prefix.len());
                let head_ok = if self.case_sensitive {
                    head == Some(prefix.as_str())
                } else {
                    head.is_some_and(|h| h.eq_ignore_ascii_case(prefix))
                };
                head_ok && matches!(path.as_bytes().get(prefix.len()), None | Some(b'/'))
            }
            PathMatch::Unsupported(_) => true,
        };
        if !path_ok
            || !self.headers.iter().all(|h| h.matches(request))
            || !self.query_parameters.iter().all(|q| q.matches(request))
        {
            return Matched::No;
        }
        let mut unknown = self.unsupported.clone();
        if let PathMatch::Unsupported(what) = &self.path {
            unknown.push(what.clone());
        }
        if unknown.is_empty() {
            Matched::Yes
        } else {
            Matched::Unknown(unknown)
        }
    }

    /// The match as the config writes it, to name a route without a `name`.
    pub fn label(&self) -> String {
        match &self.path {
            PathMatch::Prefix(p) => format!("prefix {p}"),
            PathMatch::Exact(p) => format!("path {p}"),
            PathMatch::Regex(r) => {
                let pattern = r.as_str();
                let inner = pattern
                    .strip_prefix("^(?:")
                    .and_then(|p| p.strip_suffix(")$"))
                    .unwrap_or(pattern);
                format!("safe_regex {inner}")
            }
            PathMatch::SeparatedPrefix(p) => format!("path_separated_prefix {p}"),
            PathMatch::Unsupported(what) => what.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
