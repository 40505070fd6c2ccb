//! A `rate_limits` list: each policy's actions, `hits_addend`, `apply_on_stream_done`,
//! and the matchers of `header_value_match` and `query_parameter_value_match` (which a
//! route's `match` shares).

use super::super::matchers::{
    HeaderMatcher, HeaderTest, QueryParameterMatcher, StringMatcher, full_match_regex,
};
use super::super::model::{Action, ActionKind, HitsAddend, MetadataSource, RateLimitPolicy};
use super::super::yaml::Node;
use super::Parser;

/// The fields of a `RateLimit` (one policy).
const POLICY_FIELDS: &[&str] = &[
    "stage",
    "disable_key",
    "actions",
    "limit",
    "hits_addend",
    "apply_on_stream_done",
];

impl Parser<'_> {
    pub(super) fn policies(&mut self, list: Option<&Node>) -> Vec<RateLimitPolicy> {
        list.map(Node::items)
            .unwrap_or_default()
            .iter()
            .map(|policy| self.policy(policy))
            .collect()
    }

    fn policy(&mut self, node: &Node) -> RateLimitPolicy {
        for field in node.unknown_fields(POLICY_FIELDS) {
            let place = self.place(node);
            self.unsupported(
                place,
                format!("unknown field `{field}` in a `rate_limits` entry"),
            );
        }
        let hits_addend = node.get("hits_addend").map(|h| {
            if let Some(number) = h.u64("number") {
                return HitsAddend::Number(number);
            }
            let format = h.str("format").unwrap_or_default().trim();
            let header = |prefix: &str| {
                format
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_suffix(")%"))
                    .filter(|name| !name.contains(['%', '(', ')']))
                    .map(str::to_ascii_lowercase)
            };
            if let Some(name) = header("%REQ(") {
                HitsAddend::RequestHeader(name)
            } else if let Some(name) = header("%RESP(") {
                HitsAddend::ResponseHeader(name)
            } else {
                let place = self.place(h);
                self.unsupported(
                    place,
                    format!("`hits_addend` format `{format}`: not evaluated"),
                );
                HitsAddend::Format(format.to_owned())
            }
        });
        let actions = node.get("actions").map(Node::items).unwrap_or_default();
        RateLimitPolicy {
            place: self.place(node),
            stage: node.u64("stage").unwrap_or(0),
            disable_key: node
                .str("disable_key")
                .filter(|k| !k.is_empty())
                .map(str::to_owned),
            actions: actions.iter().map(|a| self.action(a)).collect(),
            hits_addend,
            apply_on_stream_done: node.bool("apply_on_stream_done").unwrap_or(false),
            limit_override: node.get("limit").is_some(),
            negative_hits: node
                .get("hits_addend")
                .and_then(|h| h.bool("is_negative_hits"))
                .unwrap_or(false),
        }
    }

    fn action(&mut self, node: &Node) -> Action {
        let place = self.place(node);
        let entries = node.entries();
        let kind = match entries {
            [(name, body)] => self.action_kind(name, body),
            [] => ActionKind::Unsupported("(an empty action)".to_owned()),
            _ => ActionKind::Unsupported(format!(
                "(several actions in one: {})",
                entries
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        if let ActionKind::Unsupported(name) = &kind {
            self.unsupported(
                place.clone(),
                format!("rate limit action `{name}`: not evaluated"),
            );
        }
        Action { place, kind }
    }

    fn action_kind(&mut self, name: &str, body: &Node) -> ActionKind {
        let text = |field: &str| body.str(field).unwrap_or_default().to_owned();
        let or = |value: String, default: &str| {
            if value.is_empty() {
                default.to_owned()
            } else {
                value
            }
        };
        let snake = to_snake(name);
        match snake.as_str() {
            "source_cluster" => ActionKind::SourceCluster,
            "destination_cluster" => ActionKind::DestinationCluster,
            "remote_address" => ActionKind::RemoteAddress,
            "request_headers" => ActionKind::RequestHeaders {
                header_name: text("header_name").to_ascii_lowercase(),
                descriptor_key: text("descriptor_key"),
                skip_if_absent: body.bool("skip_if_absent").unwrap_or(false),
            },
            "query_parameters" => ActionKind::QueryParameters {
                name: text("query_parameter_name"),
                descriptor_key: text("descriptor_key"),
                skip_if_absent: body.bool("skip_if_absent").unwrap_or(false),
            },
            "masked_remote_address" => ActionKind::MaskedRemoteAddress {
                v4_prefix_len: prefix_len(body.u64("v4_prefix_mask_len"), 32),
                v6_prefix_len: prefix_len(body.u64("v6_prefix_mask_len"), 128),
            },
            "generic_key" => {
                let value = text("descriptor_value");
                if value.contains('%') {
                    let place = self.place(body);
                    self.unsupported(
                        place,
                        "`generic_key` value with `%`: used as written, as Envoy does while its \
                         runtime flag for formatted descriptor values is off (the default)",
                    );
                }
                ActionKind::GenericKey {
                    descriptor_key: or(text("descriptor_key"), "generic_key"),
                    descriptor_value: value,
                }
            }
            "header_value_match" => ActionKind::HeaderValueMatch {
                descriptor_key: or(text("descriptor_key"), "header_match"),
                descriptor_value: text("descriptor_value"),
                expect_match: body.bool("expect_match").unwrap_or(true),
                headers: self.header_matchers(body.get("headers")),
            },
            "query_parameter_value_match" => ActionKind::QueryParameterValueMatch {
                descriptor_key: or(text("descriptor_key"), "query_match"),
                descriptor_value: text("descriptor_value"),
                expect_match: body.bool("expect_match").unwrap_or(true),
                parameters: self.query_matchers(body.get("query_parameters")),
            },
            "metadata" | "dynamic_metadata" => {
                let key = body.get("metadata_key");
                let source = match body.str("source") {
                    Some("ROUTE_ENTRY") | Some("1") => MetadataSource::RouteEntry,
                    Some("CLUSTER_ENTRY" | "CLUSTER_LOCALITY_ENTRY" | "2" | "3") => {
                        MetadataSource::Cluster
                    }
                    _ => MetadataSource::Dynamic,
                };
                ActionKind::Metadata {
                    descriptor_key: text("descriptor_key"),
                    filter: key
                        .and_then(|k| k.str("key"))
                        .unwrap_or_default()
                        .to_owned(),
                    path: key
                        .and_then(|k| k.get("path"))
                        .map(Node::items)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|segment| segment.str("key"))
                        .map(str::to_owned)
                        .collect(),
                    default_value: text("default_value"),
                    source,
                    skip_if_absent: snake == "metadata"
                        && body.bool("skip_if_absent").unwrap_or(false),
                }
            }
            _ => ActionKind::Unsupported(name.to_owned()),
        }
    }

    pub(super) fn header_matchers(&mut self, list: Option<&Node>) -> Vec<HeaderMatcher> {
        let mut out = Vec::new();
        for node in list.map(Node::items).unwrap_or_default() {
            let test = if let Some(m) = node.get("string_match") {
                self.string_matcher(m).map(HeaderTest::String)
            } else if let Some(exact) = node.str("exact_match") {
                Some(HeaderTest::String(StringMatcher::Exact(
                    exact.to_owned(),
                    false,
                )))
            } else if let Some(prefix) = node.str("prefix_match") {
                Some(HeaderTest::String(StringMatcher::Prefix(
                    prefix.to_owned(),
                    false,
                )))
            } else if let Some(suffix) = node.str("suffix_match") {
                Some(HeaderTest::String(StringMatcher::Suffix(
                    suffix.to_owned(),
                    false,
                )))
            } else if let Some(contains) = node.str("contains_match") {
                Some(HeaderTest::String(StringMatcher::Contains(
                    contains.to_owned(),
                    false,
                )))
            } else if let Some(regex) = node.get("safe_regex_match") {
                self.regex(regex)
                    .map(|r| HeaderTest::String(StringMatcher::Regex(r)))
            } else if let Some(range) = node.get("range_match") {
                let bound = |f: &str| range.str(f).and_then(|t| t.parse::<i64>().ok());
                Some(HeaderTest::Range(
                    bound("start").unwrap_or(0),
                    bound("end").unwrap_or(0),
                ))
            } else if node.get("present_match").is_some() {
                Some(HeaderTest::Present(
                    node.bool("present_match").unwrap_or(false),
                ))
            } else {
                Some(HeaderTest::Present(true))
            };
            let Some(test) = test else { continue };
            out.push(HeaderMatcher {
                name: node.str("name").unwrap_or_default().to_ascii_lowercase(),
                test,
                invert: node.bool("invert_match").unwrap_or(false),
                treat_missing_as_empty: node.bool("treat_missing_header_as_empty").unwrap_or(false),
            });
        }
        out
    }

    pub(super) fn query_matchers(&mut self, list: Option<&Node>) -> Vec<QueryParameterMatcher> {
        let mut out = Vec::new();
        for node in list.map(Node::items).unwrap_or_default() {
            let matcher = match node.get("string_match") {
                Some(m) => match self.string_matcher(m) {
                    Some(m) => Some(m),
                    None => continue,
                },
                None => None,
            };
            out.push(QueryParameterMatcher {
                name: node.str("name").unwrap_or_default().to_owned(),
                matcher,
            });
        }
        out
    }

    /// A `StringMatcher`; `None` (recorded as unsupported) for one not evaluated.
    fn string_matcher(&mut self, node: &Node) -> Option<StringMatcher> {
        let ignore_case = node.bool("ignore_case").unwrap_or(false);
        let owned = |s: &str| s.to_owned();
        if let Some(v) = node.str("exact") {
            return Some(StringMatcher::Exact(owned(v), ignore_case));
        }
        if let Some(v) = node.str("prefix") {
            return Some(StringMatcher::Prefix(owned(v), ignore_case));
        }
        if let Some(v) = node.str("suffix") {
            return Some(StringMatcher::Suffix(owned(v), ignore_case));
        }
        if let Some(v) = node.str("contains") {
            return Some(StringMatcher::Contains(owned(v), ignore_case));
        }
        if let Some(regex) = node.get("safe_regex") {
            return self.regex(regex).map(StringMatcher::Regex);
        }
        let place = self.place(node);
        self.unsupported(place, "a string matcher other than exact, prefix, suffix, contains or safe_regex: not evaluated, the matcher is left out");
        None
    }

    fn regex(&mut self, node: &Node) -> Option<regex::Regex> {
        match full_match_regex(node.str("regex").unwrap_or_default()) {
            Ok(regex) => Some(regex),
            Err(problem) => {
                let place = self.place(node);
                self.unsupported(place, problem);
                None
            }
        }
    }
}

fn prefix_len(value: Option<u64>, default: u8) -> u8 {
    value
        .and_then(|v| u8::try_from(v).ok())
        .filter(|v| *v <= default)
        .unwrap_or(default)
}

/// `requestHeaders` → `request_headers`.
fn to_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
