//! A running service's side of an explanation: the limits it runs (`/rlconfig`), and the
//! answer it gives each descriptor now, asked through `POST /json` with every descriptor's
//! `hitsAddend` at 0, which checks without consuming (the decision is counted in the
//! service's metrics like any other).

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde::Serialize;
use serde_json::{Value, json};

use super::http::AdminUrl;
use super::report::Explanation;
use crate::rls::units;

/// What the service answers for the whole request.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceReport {
    pub url: String,
    /// One line: what a request sent now would get.
    pub summary: String,
    /// The rule that would refuse it, if one would.
    pub refused_by: Option<String>,
    pub notes: Vec<String>,
}

/// One descriptor's status now.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceStatus {
    /// The code of the check (`OK`, `OVER_LIMIT`).
    pub code: String,
    /// The limit reported, its unit and rule name.
    pub limit: Option<u32>,
    pub unit: Option<String>,
    pub name: Option<String>,
    pub remaining: u64,
    /// Hits counted in the window: the limit less what is left.
    pub count: Option<u64>,
    pub reset: Option<String>,
    /// What a request with this descriptor's cost would get now.
    pub would: String,
}

impl ServiceStatus {
    pub fn text(&self) -> String {
        match self.limit {
            None => format!("{}, not limited", self.code),
            Some(limit) => format!(
                "{} at {} of {limit} per {} ({} left{}); a request now: {}",
                self.code,
                self.count.unwrap_or_default(),
                self.unit.as_deref().unwrap_or("?"),
                self.remaining,
                self.reset
                    .as_deref()
                    .map(|r| format!(", resets in {r}"))
                    .unwrap_or_default(),
                self.would
            ),
        }
    }
}

/// The limits the service runs, as `/rlconfig` lists them.
pub async fn rlconfig(url: &AdminUrl) -> Result<String, String> {
    match url.call("GET", "/rlconfig", None).await? {
        (200, text) => Ok(text),
        (status, text) => Err(format!(
            "{}/rlconfig: HTTP {status}: {}",
            url.shown,
            text.trim()
        )),
    }
}

/// The limits the service runs, in the config's format: one `(name, YAML)` source per domain
/// (`/rlconfig?format=yaml`), and the name they are shown under.
pub async fn limits_yaml(url: &AdminUrl) -> Result<(Vec<(String, String)>, String), String> {
    let name = format!("{}/rlconfig", url.shown);
    let text = match url.call("GET", "/rlconfig?format=yaml", None).await? {
        (200, text) => text,
        (status, text) => {
            return Err(format!(
                "{name}?format=yaml: HTTP {status}: {}",
                text.trim()
            ));
        }
    };
    let mut sources = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line == crate::config::DOCUMENT_SEPARATOR {
            sources.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.is_empty() {
        sources.push(current);
    }
    let named = sources
        .into_iter()
        .enumerate()
        .map(|(i, yaml)| (format!("{name}#{}", i + 1), yaml))
        .collect();
    Ok((named, name))
}

/// Asks the service about every descriptor of `request` without consuming, and adds what it
/// says to `explanation`.
pub async fn peek(
    url: &AdminUrl,
    request: &RateLimitRequest,
    explanation: &mut Explanation,
    mut notes: Vec<String>,
) -> Result<(), String> {
    let body = peek_body(request);
    let (status, text) = url.call("POST", "/json", Some(body.to_string())).await?;
    if status != 200 && status != 429 {
        return Err(format!(
            "{}/json: HTTP {status}: {}",
            url.shown,
            text.trim()
        ));
    }
    let answer: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}/json: not a JSON answer: {e}", url.shown))?;
    let statuses = answer
        .get("statuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut refused_by = None;
    let mut shadow_over = Vec::new();
    for (descriptor, status) in explanation.descriptors.iter_mut().zip(&statuses) {
        let parsed = parse_status(status, descriptor.cost, descriptor.refund);
        let shadow = descriptor.rule.as_ref().is_some_and(|r| r.shadow_mode);
        if parsed.would.starts_with("OVER_LIMIT") {
            let label = descriptor
                .rule
                .as_ref()
                .map(|r| r.label.clone())
                .or_else(|| parsed.name.clone())
                .unwrap_or_else(|| "the descriptor's own limit".to_owned());
            if shadow {
                shadow_over.push(label);
            } else if refused_by.is_none() {
                refused_by = Some(label);
            }
        }
        descriptor.service = Some(parsed);
    }
    if statuses.len() != explanation.descriptors.len() {
        notes.push(format!(
            "the service answered {} statuses for {} descriptors",
            statuses.len(),
            explanation.descriptors.len()
        ));
    }
    for label in shadow_over {
        notes.push(format!(
            "rule `{label}` is over its limit in shadow mode: counted, not enforced"
        ));
    }
    let summary = match &refused_by {
        Some(rule) => format!("a request sent now would be refused (OVER_LIMIT) by rule `{rule}`"),
        None => "a request sent now would pass (OK)".to_owned(),
    };
    explanation.service = Some(ServiceReport {
        url: url.shown.clone(),
        summary,
        refused_by,
        notes,
    });
    Ok(())
}

/// The request in upstream's JSON form with every descriptor's `hitsAddend` at 0 (a check
/// that adds nothing) and no refund.
fn peek_body(request: &RateLimitRequest) -> Value {
    let descriptors: Vec<Value> = request
        .descriptors
        .iter()
        .map(|d| {
            let entries: Vec<Value> = d
                .entries
                .iter()
                .map(|e| json!({"key": e.key, "value": e.value}))
                .collect();
            let mut descriptor = serde_json::Map::new();
            descriptor.insert("entries".into(), Value::Array(entries));
            descriptor.insert("hitsAddend".into(), json!(0));
            if let Some(limit) = &d.limit {
                let unit = units::from_proto(limit.unit).map_or("UNKNOWN", |u| u.as_proto_name());
                descriptor.insert(
                    "limit".into(),
                    json!({"requestsPerUnit": limit.requests_per_unit, "unit": unit}),
                );
            }
            Value::Object(descriptor)
        })
        .collect();
    json!({"domain": request.domain, "descriptors": descriptors})
}

fn parse_status(status: &Value, cost: u64, refund: bool) -> ServiceStatus {
    let code = status
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("OK")
        .to_owned();
    let limit = status.get("currentLimit");
    let number = |v: Option<&Value>| -> Option<u64> {
        let v = v?;
        v.as_u64().or_else(|| v.as_str()?.parse().ok())
    };
    let requests = limit
        .and_then(|l| number(l.get("requestsPerUnit")))
        .and_then(|n| u32::try_from(n).ok());
    let remaining = number(status.get("limitRemaining")).unwrap_or(0);
    let would = match requests {
        None => "OK".to_owned(),
        Some(_) if code == "OVER_LIMIT" => "OVER_LIMIT".to_owned(),
        Some(_) if refund => format!("OK (gives {cost} back)"),
        Some(_) if cost > remaining => format!("OVER_LIMIT (costs {cost}, {remaining} left)"),
        Some(_) => format!("OK ({} left after it)", remaining - cost),
    };
    ServiceStatus {
        code,
        limit: requests.filter(|_| limit.is_some()),
        unit: limit
            .and_then(|l| l.get("unit"))
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase),
        name: limit
            .and_then(|l| l.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        remaining,
        count: requests.map(|r| u64::from(r).saturating_sub(remaining)),
        reset: status
            .get("durationUntilReset")
            .and_then(Value::as_str)
            .map(str::to_owned),
        would,
    }
}

#[cfg(test)]
mod tests;
