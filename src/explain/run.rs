//! `explain`: the request from the command line (descriptors, a JSON request, or an HTTP
//! request through an Envoy config), the limits, the explanation, and with `--service` the
//! running service's answer; printed as text or JSON.

use std::path::Path;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde::Serialize;

use super::args::ExplainArgs;
use super::envoy_report::{FilterReport, rls_request};
use super::http::AdminUrl;
use super::report::{Explanation, explain};
use super::{render, service};
use crate::config::{LimitsConfig, LoadOptions};
use crate::envoy_config::{self, HttpRequest};
use crate::rls::plan::descriptor_of;

/// Why `explain` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The command line asks for something impossible (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Something could not be read or reached (exit 1).
    #[error("{0}")]
    Failed(String),
}

/// One call Envoy makes, explained.
#[derive(Debug, Clone, Serialize)]
struct Call {
    /// `request` (before the request goes on) or `stream_done`.
    when: &'static str,
    explanation: Explanation,
}

#[derive(Debug, Clone, Serialize)]
struct FilterExplanation {
    #[serde(flatten)]
    filter: FilterReport,
    calls: Vec<Call>,
}

#[derive(Debug, Clone, Serialize)]
struct EnvoyExplanation {
    envoy: String,
    /// Parts of the Envoy config that were not evaluated.
    not_evaluated: Vec<String>,
    filters: Vec<FilterExplanation>,
}

/// Runs `explain` and returns what to print.
pub fn run(args: &ExplainArgs, options: &LoadOptions) -> Result<String, ExplainError> {
    let service = args
        .service
        .as_deref()
        .map(AdminUrl::parse)
        .transpose()
        .map_err(ExplainError::Usage)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ExplainError::Failed(format!("cannot start a runtime: {e}")))?;
    runtime.block_on(run_async(args, options, service.as_ref()))
}

async fn run_async(
    args: &ExplainArgs,
    options: &LoadOptions,
    service: Option<&AdminUrl>,
) -> Result<String, ExplainError> {
    let (limits, mut notes) = limits(args, options, service).await?;
    if let Some(envoy) = &args.envoy {
        return explain_envoy(args, envoy, &limits, service, notes).await;
    }
    let request = direct_request(args)?;
    let mut explanation = explain(&limits, &request);
    if let Some(url) = service {
        service::peek(url, &request, &mut explanation, std::mem::take(&mut notes))
            .await
            .map_err(ExplainError::Failed)?;
    }
    if args.json {
        return json(&explanation);
    }
    let mut out = String::new();
    for note in notes {
        out.push_str(&format!("note: {note}\n"));
    }
    render::explanation(&mut out, &explanation);
    Ok(out)
}

/// The limits from `--config`, else from the service; notes on how they compare.
async fn limits(
    args: &ExplainArgs,
    options: &LoadOptions,
    service: Option<&AdminUrl>,
) -> Result<(LimitsConfig, Vec<String>), ExplainError> {
    let mut notes = Vec::new();
    let Some(path) = &args.config else {
        let Some(url) = service else {
            return Err(ExplainError::Usage(
                "give the limits: --config PATH, or --service URL of a running service".into(),
            ));
        };
        let (yaml, name) = service::limits_yaml(url)
            .await
            .map_err(ExplainError::Failed)?;
        let limits = crate::config::load_sources(&yaml)
            .map_err(|e| ExplainError::Failed(format!("the limits of {name}:\n{e}")))?;
        return Ok((limits, notes));
    };
    let limits = crate::config::load_path(path, options)
        .map_err(|errors| ExplainError::Failed(errors.to_string()))?;
    if let Some(url) = service {
        let running = service::rlconfig(url).await.map_err(ExplainError::Failed)?;
        if running != limits.dump() {
            notes.push(format!(
                "{}/rlconfig differs from {}: the service runs other limits (a reload not \
                 picked up, another file, or a control plane's); what it answers follows them",
                url.shown,
                path.display()
            ));
        }
    }
    Ok((limits, notes))
}

/// The request of `--domain`/`--descriptor`/`--hits-addend`, or `--json-request`.
fn direct_request(args: &ExplainArgs) -> Result<RateLimitRequest, ExplainError> {
    if let Some(path) = &args.json_request {
        let text = crate::config::read_text(path, 1 << 20)
            .map_err(|e| ExplainError::Failed(format!("{}: {e}", path.display())))?;
        return crate::rls::parse_request(text.as_bytes())
            .map_err(|e| ExplainError::Failed(format!("{}: {e}", path.display())));
    }
    let domain = args.domain.clone().ok_or_else(|| {
        ExplainError::Usage(
            "give the request: --domain and --descriptor, --json-request FILE, or --envoy FILE \
             with --request"
                .into(),
        )
    })?;
    let descriptors = args
        .descriptors
        .iter()
        .map(|text| parse_descriptor(text))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RateLimitRequest {
        domain,
        descriptors,
        hits_addend: args.hits_addend,
    })
}

/// `key=value,key2=value2`.
fn parse_descriptor(text: &str) -> Result<RateLimitDescriptor, ExplainError> {
    let mut entries = Vec::new();
    for part in text.split(',') {
        let Some((key, value)) = part.split_once('=') else {
            return Err(ExplainError::Usage(format!(
                "--descriptor {text}: `{part}` is not `key=value`"
            )));
        };
        if key.is_empty() {
            return Err(ExplainError::Usage(format!(
                "--descriptor {text}: an entry has an empty key"
            )));
        }
        entries.push((key, value));
    }
    Ok(descriptor_of(entries))
}

async fn explain_envoy(
    args: &ExplainArgs,
    envoy: &Path,
    limits: &LimitsConfig,
    service: Option<&AdminUrl>,
    notes: Vec<String>,
) -> Result<String, ExplainError> {
    let config = envoy_config::load(envoy).map_err(|e| ExplainError::Failed(e.to_string()))?;
    let request_line = args.request.as_deref().ok_or_else(|| {
        ExplainError::Usage("--envoy needs the HTTP request: --request 'GET /path'".into())
    })?;
    let request = HttpRequest::new(
        request_line,
        &args.headers,
        args.authority.as_deref(),
        args.remote_address,
    )
    .map_err(ExplainError::Usage)?;
    let response_headers = args
        .response_headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .ok_or_else(|| {
                    ExplainError::Usage(format!("--response-header {h}: expected `name: value`"))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let predictions = envoy_config::predict(
        &config,
        &request,
        &response_headers,
        args.listener.as_deref(),
        args.domain.as_deref(),
    );
    let mut filters = Vec::new();
    for prediction in &predictions {
        let mut calls = Vec::new();
        let phases = [
            ("request", prediction.request_descriptors()),
            ("stream_done", prediction.stream_done_descriptors()),
        ];
        for (when, descriptors) in phases {
            if descriptors.is_empty() {
                continue;
            }
            let call = rls_request(&prediction.domain, &descriptors);
            let mut explanation = explain(limits, &call);
            if let Some(url) = service {
                service::peek(url, &call, &mut explanation, notes.clone())
                    .await
                    .map_err(ExplainError::Failed)?;
            }
            calls.push(Call { when, explanation });
        }
        filters.push(FilterExplanation {
            filter: FilterReport::new(prediction),
            calls,
        });
    }
    let report = EnvoyExplanation {
        envoy: config.file.clone(),
        not_evaluated: config
            .unsupported
            .iter()
            .map(|u| format!("{}: {}", u.place, u.what))
            .collect(),
        filters,
    };
    if args.json {
        return json(&report);
    }
    let mut out = String::new();
    for note in &notes {
        out.push_str(&format!("note: {note}\n"));
    }
    for line in &report.not_evaluated {
        out.push_str(&format!("not evaluated: {line}\n"));
    }
    let alone = config
        .managers
        .iter()
        .any(|m| m.filters.is_empty() && m.quota_filters.is_empty() && m.routes.is_some());
    if report.filters.is_empty() && alone && args.domain.is_none() {
        return Err(ExplainError::Usage(format!(
            "{}: routes without a rate limit filter: give --domain, the filter's domain",
            report.envoy
        )));
    }
    if report.filters.is_empty() {
        out.push_str(&format!(
            "{}: no rate limit filter{}: Envoy calls no rate limit service for this request\n",
            report.envoy,
            args.listener
                .as_deref()
                .map(|l| format!(" on listener `{l}`"))
                .unwrap_or_default()
        ));
    }
    for filter in &report.filters {
        if !out.is_empty() {
            out.push('\n');
        }
        render::filter(&mut out, &filter.filter);
        for call in &filter.calls {
            let when = match call.when {
                "request" => "the call before the request goes on",
                _ => "the call once the stream is done",
            };
            out.push_str(&format!("\n{when}:\n"));
            render::explanation(&mut out, &call.explanation);
        }
    }
    Ok(out)
}

fn json(value: &impl Serialize) -> Result<String, ExplainError> {
    serde_json::to_string_pretty(value)
        .map(|mut text| {
            text.push('\n');
            text
        })
        .map_err(|e| ExplainError::Failed(format!("cannot write JSON: {e}")))
}
