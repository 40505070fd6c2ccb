//! Counter inspection on the admin port (Fastly's ratecounter view): "why was this client
//! limited?"
//!
//! - `GET /counters?domain=D&descriptor=k1=v1,k2=v2`: the rule the descriptor matches, its
//!   counter's current and previous cells (regional, global, own), the sliding count and
//!   what is left, the estimated rate over the last 10 s and 60 s, strict mode and the
//!   penalty box. The descriptor is its entries in order, `key=value` separated by `,`
//!   (URL-encoded as any query; a key cannot hold `=` or `,`, a value cannot hold `,`).
//! - `GET /counters/top?n=N`: the busiest counters (by estimated rate over 10 s) and those
//!   nearest their limit (sliding count ÷ limit), at most `N` each (default 10, at most
//!   the sketch's 64), from the engine's sampled heavy-hitters sketch: bounded work, never
//!   a walk of the table.
//!
//! Both read only: nothing is counted, created or read from an origin. Request values (the
//! descriptor's values, and the counter's identifier made of them) are answered as
//! [`super::ValueDisplay`] says: hashed unless the operator asked to show them. The query's
//! values are input the operator supplies; the answer does not echo them unless shown.

use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AdminState;
use gcounter_engine::{CellView, CounterState, InspectedCounter, SKETCH_CAPACITY};

/// Longest query string accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 4_096;
/// Most descriptor entries in one query (upstream's requests rarely pass 5).
pub const MAX_ENTRIES: usize = 16;
/// `/counters/top` lists this many per ordering unless `n` says otherwise.
const DEFAULT_TOP: usize = 10;

/// The counter a descriptor counts on: the rule matching lives in `rls`, which the admin
/// port does not know (`serve` plugs it in, as for `POST /json`).
pub trait CounterLookup: Send + Sync {
    fn find(&self, domain: &str, entries: &[(String, String)]) -> Result<InspectedCounter, String>;
}

/// The RLQS Envoys reporting on a counter and each one's share, for `/counters`: the quota
/// board lives in `rlqs`, which the admin port does not know.
pub trait QuotaShares: Send + Sync {
    fn shares(&self, counter: &gcounter_engine::cell_key::CounterKey) -> Vec<EnvoyShare>;
}

/// One RLQS stream's bucket on a counter.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvoyShare {
    /// The stream, numbered in the order streams opened.
    pub stream: u64,
    /// Requests a second it reported (allowed and denied), smoothed.
    pub demand: f64,
    /// Requests a second it was last assigned.
    pub share: f64,
}

#[derive(Debug, PartialEq, Eq)]
struct CounterQuery {
    domain: String,
    entries: Vec<(String, String)>,
}

/// Parse `domain=..&descriptor=k=v,k2=v2`; the problem in words otherwise.
fn parse_counter_query(query: &str) -> Result<CounterQuery, String> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!("the query is longer than {MAX_QUERY_BYTES} bytes"));
    }
    let (mut domain, mut descriptor) = (None, None);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let slot = match &*name {
            "domain" => &mut domain,
            "descriptor" => &mut descriptor,
            other => return Err(format!("unknown parameter `{other}` (domain, descriptor)")),
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(format!("`{name}` given twice"));
        }
    }
    let domain = domain.filter(|d| !d.is_empty()).ok_or("missing `domain`")?;
    let descriptor = descriptor
        .filter(|d| !d.is_empty())
        .ok_or("missing `descriptor` (`key=value,key2=value2`)")?;
    let mut entries = Vec::new();
    // The errors name an entry by its position: its text may be a value the answer must not
    // repeat (see `ValueDisplay`).
    for (position, entry) in descriptor.split(',').enumerate() {
        if entries.len() == MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} descriptor entries"));
        }
        let number = position + 1;
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("descriptor entry {number} is not `key=value`"))?;
        if key.is_empty() {
            return Err(format!("descriptor entry {number} has an empty key"));
        }
        entries.push((key.to_owned(), value.to_owned()));
    }
    Ok(CounterQuery { domain, entries })
}

/// Parse `n=N` (1..=64); the problem in words otherwise.
fn parse_top_query(query: &str) -> Result<usize, String> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!("the query is longer than {MAX_QUERY_BYTES} bytes"));
    }
    let mut n = DEFAULT_TOP;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*name {
            "n" => {
                n = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=SKETCH_CAPACITY).contains(n))
                    .ok_or_else(|| format!("`n` must be 1 to {SKETCH_CAPACITY}"))?;
            }
            other => return Err(format!("unknown parameter `{other}` (n)")),
        }
    }
    Ok(n)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

fn problem(status: StatusCode, text: impl std::fmt::Display) -> Response {
    json_response(status, &json!({ "error": text.to_string() }))
}

fn cell_json(cell: Option<CellView>, sequence: Option<u64>) -> Value {
    match cell {
        Some(cell) => json!({
            "sequence": sequence,
            "regional": cell.regional,
            "global": cell.global,
            "own": cell.own,
            "total": cell.total(),
        }),
        None => Value::Null,
    }
}

/// What every answer says of a counter's state.
fn state_json(state: &CounterState, limit: u64) -> Value {
    let sequence = state.now_ms / state.duration_ms.max(1);
    let effective = state.effective();
    json!({
        "window_ms": state.duration_ms,
        "elapsed_ms": state.elapsed_ms,
        "current": cell_json(state.current, Some(sequence)),
        "previous": cell_json(state.previous, sequence.checked_sub(1)),
        "sliding_count": effective,
        "remaining": limit.saturating_sub(effective),
        "rate_10s": state.estimated_rate(10_000),
        "rate_60s": state.estimated_rate(60_000),
        "strict_mode": state.strict,
        "penalty": state.penalty_until_ms.map(|until| json!({
            "until_ms": until,
            "left_ms": until.saturating_sub(state.now_ms),
        })),
    })
}

pub(super) async fn counter(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(lookup) = &state.counters else {
        return problem(StatusCode::NOT_FOUND, "counter inspection is not wired in");
    };
    let query = match parse_counter_query(query.as_deref().unwrap_or_default()) {
        Ok(query) => query,
        Err(text) => return problem(StatusCode::BAD_REQUEST, text),
    };
    let found = match lookup.find(&query.domain, &query.entries) {
        Ok(found) => found,
        Err(text) => return problem(StatusCode::NOT_FOUND, text),
    };
    let counter_state = state.engine.inspection().inspect(&found.counter.borrowed());
    let values = &state.values;
    let entries: Vec<Value> = query
        .entries
        .iter()
        .map(|(key, value)| json!({ "key": key, "value": values.show(value) }))
        .collect();
    let mut body = json!({
        "values": values.name(),
        "now_ms": counter_state.now_ms,
        "domain": query.domain,
        "descriptor": entries,
        "rule": {
            "path": &*found.rule_path,
            "config": found.rule,
            "limit": found.limit,
            "penalty_ms": found.penalty_ms,
        },
        "counter": {
            "namespace": &**found.counter.namespace(),
            "identifier": values.show(&found.counter.identifier),
        },
    });
    if let (Some(body), Value::Object(more)) = (
        body.as_object_mut(),
        state_json(&counter_state, found.limit),
    ) {
        body.extend(more);
    }
    if let (Some(body), Some(quota)) = (body.as_object_mut(), &state.quota_shares) {
        let shares: Vec<Value> = quota
            .shares(&found.counter)
            .into_iter()
            .map(|share| {
                json!({
                    "stream": share.stream,
                    "demand_per_second": share.demand,
                    "share_per_second": share.share,
                })
            })
            .collect();
        body.insert("rlqs".into(), Value::Array(shares));
    }
    json_response(StatusCode::OK, &body)
}

pub(super) async fn top(State(state): State<AdminState>, RawQuery(query): RawQuery) -> Response {
    let n = match parse_top_query(query.as_deref().unwrap_or_default()) {
        Ok(n) => n,
        Err(text) => return problem(StatusCode::BAD_REQUEST, text),
    };
    // At most SKETCH_CAPACITY counters, two cell lookups each.
    let mut rows: Vec<(f64, f64, Value)> = state
        .engine
        .inspection()
        .heavy_hitters()
        .into_iter()
        .map(|hitter| {
            let counter = hitter.counter.borrowed();
            let counter_state = state.engine.inspection().inspect(&counter);
            let rate = counter_state.estimated_rate(10_000);
            let nearness = if hitter.limit == 0 {
                f64::INFINITY
            } else {
                counter_state.effective() as f64 / hitter.limit as f64
            };
            let mut row = json!({
                "domain": &**hitter.counter.workspace(),
                "namespace": &**hitter.counter.namespace(),
                "identifier": state.values.show(&hitter.counter.identifier),
                "limit": hitter.limit,
                "nearness": if nearness.is_finite() { json!(nearness) } else { json!("limit 0") },
                "sampled_decisions": hitter.sampled,
                "sampled_error": hitter.error,
            });
            if let (Some(row), Value::Object(more)) = (
                row.as_object_mut(),
                state_json(&counter_state, hitter.limit),
            ) {
                row.extend(more);
            }
            (rate, nearness, row)
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let by_rate: Vec<Value> = rows.iter().take(n).map(|row| row.2.clone()).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let by_nearness: Vec<Value> = rows.iter().take(n).map(|row| row.2.clone()).collect();
    json_response(
        StatusCode::OK,
        &json!({
            "values": state.values.name(),
            "tracked": rows.len(),
            "by_rate": by_rate,
            "by_nearness": by_nearness,
        }),
    )
}

#[cfg(test)]
mod tests;
