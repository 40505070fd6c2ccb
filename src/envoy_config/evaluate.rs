//! One `rate_limits` policy evaluated on a request, action by action, as Envoy's
//! `RateLimitPolicy::populateDescriptors` does: each action adds an entry, adds none (a
//! `skip_if_absent` miss), or stops the descriptor from being sent; then `hits_addend`.

use std::net::IpAddr;

use super::model::{Action, ActionKind, Cluster, HitsAddend, MetadataSource, RateLimitPolicy};
use super::request::HttpRequest;
use super::yaml::Node;
use crate::config::Place;

/// Envoy refuses a `hits_addend` above this (and drops the descriptor).
const MAX_HITS_ADDEND: f64 = 1e9;

/// What the actions see besides the request.
pub struct Context<'a> {
    pub request: &'a HttpRequest,
    /// Envoy's trusted client address.
    pub client: IpAddr,
    /// `node.cluster`.
    pub local_cluster: &'a str,
    /// The route's cluster and metadata (`None`: no route entry).
    pub cluster: Option<&'a Cluster>,
    pub route_metadata: Option<&'a Node>,
    /// The response's headers, for `%RESP(...)%` of a descriptor sent at stream done.
    pub response_headers: &'a [(String, String)],
    /// Evaluating the call made once the stream is done.
    pub on_stream_done: bool,
}

/// One descriptor entry and the action that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: String,
    pub action: String,
    pub place: Place,
}

/// A descriptor Envoy sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<Entry>,
    /// The descriptor's `hits_addend`, when the policy sets one.
    pub hits_addend: Option<u64>,
    /// The policy has a `limit` override read from dynamic metadata, which is not known here.
    pub limit_override: bool,
    /// `is_negative_hits`: the hits are given back.
    pub refund: bool,
    /// Actions that added no entry (`skip_if_absent`), said for the explanation.
    pub skipped: Vec<String>,
}

/// What one policy gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent(Descriptor),
    /// No descriptor: an action (at `place`) stopped it, for the reason given.
    NotSent {
        place: Place,
        why: String,
    },
    /// Not evaluated (an unsupported action or value): not predicted.
    Unknown {
        place: Place,
        why: String,
    },
}

/// Evaluates `policy` in `cx`.
pub fn evaluate(policy: &RateLimitPolicy, cx: &Context<'_>) -> Outcome {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for action in &policy.actions {
        match entry(action, cx) {
            Step::Entry(key, value) => {
                // As Envoy: an entry with an empty key is left out.
                if !key.is_empty() {
                    entries.push(Entry {
                        key,
                        value,
                        action: action.kind.name().to_owned(),
                        place: action.place.clone(),
                    });
                }
            }
            Step::Skip(why) => skipped.push(why),
            Step::Stop(why) => {
                return Outcome::NotSent {
                    place: action.place.clone(),
                    why,
                };
            }
            Step::Unknown(why) => {
                return Outcome::Unknown {
                    place: action.place.clone(),
                    why,
                };
            }
        }
    }
    let hits_addend = match hits_addend(policy.hits_addend.as_ref(), cx) {
        Ok(hits) => hits,
        Err(Outcome::NotSent { why, .. }) => {
            return Outcome::NotSent {
                place: policy.place.clone(),
                why,
            };
        }
        Err(other) => return other,
    };
    Outcome::Sent(Descriptor {
        entries,
        hits_addend,
        limit_override: policy.limit_override,
        refund: policy.negative_hits,
        skipped,
    })
}

enum Step {
    Entry(String, String),
    Skip(String),
    Stop(String),
    Unknown(String),
}

fn entry(action: &Action, cx: &Context<'_>) -> Step {
    let request = cx.request;
    match &action.kind {
        ActionKind::SourceCluster => Step::Entry("source_cluster".into(), cx.local_cluster.into()),
        ActionKind::DestinationCluster => match cx.cluster {
            Some(Cluster::Named(name)) => Step::Entry("destination_cluster".into(), name.clone()),
            Some(Cluster::FromHeader(header)) => match request.header(header) {
                Some(name) => Step::Entry("destination_cluster".into(), name.to_owned()),
                None => Step::Stop(format!("no `{header}` header: the route has no cluster")),
            },
            Some(Cluster::Weighted(names)) => Step::Unknown(format!(
                "`destination_cluster` of weighted clusters: one of {} at random",
                names.join(", ")
            )),
            Some(Cluster::Other) | None => {
                Step::Unknown("`destination_cluster`: the route's cluster is not known here".into())
            }
        },
        ActionKind::RequestHeaders {
            header_name,
            descriptor_key,
            skip_if_absent,
        } => match request.header(header_name) {
            Some(value) => Step::Entry(descriptor_key.clone(), value.to_owned()),
            None if *skip_if_absent => {
                Step::Skip(format!("no `{header_name}` header (skip_if_absent)"))
            }
            None => Step::Stop(format!("no `{header_name}` header")),
        },
        ActionKind::QueryParameters {
            name,
            descriptor_key,
            skip_if_absent,
        } => match request.query_first(name) {
            Some(value) => Step::Entry(descriptor_key.clone(), value),
            None if *skip_if_absent => {
                Step::Skip(format!("no `{name}` query parameter (skip_if_absent)"))
            }
            None => Step::Stop(format!("no `{name}` query parameter")),
        },
        ActionKind::RemoteAddress => Step::Entry("remote_address".into(), cx.client.to_string()),
        ActionKind::MaskedRemoteAddress {
            v4_prefix_len,
            v6_prefix_len,
        } => Step::Entry(
            "masked_remote_address".into(),
            masked(cx.client, *v4_prefix_len, *v6_prefix_len),
        ),
        ActionKind::GenericKey {
            descriptor_key,
            descriptor_value,
        } => Step::Entry(descriptor_key.clone(), descriptor_value.clone()),
        ActionKind::HeaderValueMatch {
            descriptor_key,
            descriptor_value,
            expect_match,
            headers,
        } => {
            let matched = headers.iter().all(|h| h.matches(request));
            if matched == *expect_match {
                Step::Entry(descriptor_key.clone(), descriptor_value.clone())
            } else {
                Step::Stop(format!(
                    "the headers {} (expect_match: {expect_match})",
                    if matched { "match" } else { "do not match" }
                ))
            }
        }
        ActionKind::QueryParameterValueMatch {
            descriptor_key,
            descriptor_value,
            expect_match,
            parameters,
        } => {
            let matched = parameters.iter().all(|q| q.matches(request));
            if matched == *expect_match {
                Step::Entry(descriptor_key.clone(), descriptor_value.clone())
            } else {
                Step::Stop(format!(
                    "the query parameters {} (expect_match: {expect_match})",
                    if matched { "match" } else { "do not match" }
                ))
            }
        }
        ActionKind::Metadata {
            descriptor_key,
            filter,
            path,
            default_value,
            source,
            skip_if_absent,
        } => {
            let found = match source {
                MetadataSource::RouteEntry => route_metadata(cx.route_metadata, filter, path),
                // Set at run time by other filters (or the cluster's): taken as absent.
                MetadataSource::Dynamic | MetadataSource::Cluster => None,
            };
            let shown = format!("{filter}:{}", path.join(":"));
            match found {
                Some(value) if !value.is_empty() => Step::Entry(descriptor_key.clone(), value),
                _ if !default_value.is_empty() => {
                    Step::Entry(descriptor_key.clone(), default_value.clone())
                }
                _ if *source != MetadataSource::RouteEntry => Step::Unknown(format!(
                    "metadata `{shown}` is set at run time, not known here"
                )),
                _ if *skip_if_absent => {
                    Step::Skip(format!("no metadata `{shown}` (skip_if_absent)"))
                }
                _ => Step::Stop(format!("no metadata `{shown}`")),
            }
        }
        ActionKind::Unsupported(name) => Step::Unknown(format!("action `{name}` is not evaluated")),
    }
}

/// A string under `filter` then `path` in a route's `filter_metadata`.
fn route_metadata(metadata: Option<&Node>, filter: &str, path: &[String]) -> Option<String> {
    let mut node = metadata?.get(filter)?;
    for key in path {
        node = node
            .entries()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)?;
    }
    node.text().map(str::to_owned)
}

/// The address masked to its prefix, as Envoy's `CidrRange::asString` writes it.
pub fn masked(address: IpAddr, v4_len: u8, v6_len: u8) -> String {
    match address {
        IpAddr::V4(v4) => {
            let len = v4_len.min(32);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            let network = std::net::Ipv4Addr::from(u32::from(v4) & mask);
            format!("{network}/{len}")
        }
        IpAddr::V6(v6) => {
            let len = v6_len.min(128);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            let network = std::net::Ipv6Addr::from(u128::from(v6) & mask);
            format!("{network}/{len}")
        }
    }
}

/// The descriptor's `hits_addend`, or why it is not sent. As Envoy: a format's value must be
/// a number from 0 to 10⁹ (a fraction is cut), else the descriptor is dropped.
fn hits_addend(hits: Option<&HitsAddend>, cx: &Context<'_>) -> Result<Option<u64>, Outcome> {
    let not_sent = |why: String| Outcome::NotSent {
        place: Place::default(),
        why,
    };
    let text = match hits {
        None => return Ok(None),
        Some(HitsAddend::Number(n)) => return Ok(Some(*n)),
        Some(HitsAddend::RequestHeader(name)) => cx.request.header(name).map(str::to_owned),
        Some(HitsAddend::ResponseHeader(name)) if cx.on_stream_done => cx
            .response_headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone()),
        Some(HitsAddend::ResponseHeader(name)) => {
            return Err(not_sent(format!(
                "`hits_addend` reads the response header `{name}`, which a request-time call \
                 does not have"
            )));
        }
        Some(HitsAddend::Format(format)) => {
            return Err(Outcome::Unknown {
                place: Place::default(),
                why: format!("`hits_addend` format `{format}` is not evaluated"),
            });
        }
    };
    let Some(text) = text else {
        return Err(not_sent("`hits_addend`: its header is absent".into()));
    };
    match text.trim().parse::<f64>() {
        Ok(value) if (0.0..=MAX_HITS_ADDEND).contains(&value) => Ok(Some(value as u64)),
        _ => Err(not_sent(format!(
            "`hits_addend` `{text}` is not a number from 0 to 1000000000"
        ))),
    }
}

#[cfg(test)]
mod tests;
