//! Tracing's settings, resolved once from our flags, upstream's `TRACING_*` variables and the
//! OpenTelemetry SDK's standard `OTEL_*` variables, in that order: the first that sets a
//! value wins. A value that cannot be used stops start-up naming the flag or variable.

use std::fmt;

use crate::serve::args::TelemetryArgs;
use crate::upstream_env::{self, Lookup, non_empty};

/// The service name when no flag or variable names one.
pub const DEFAULT_SERVICE_NAME: &str = "gcounter-rls";
/// OTLP/HTTP's well-known port and path (the OpenTelemetry specification's default).
const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318/v1/traces";
/// OTLP/gRPC's well-known port.
const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
const TRACES_PATH: &str = "/v1/traces";

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`opentelemetry.proto.collector.trace.v1.TraceService/Export`).
    Grpc,
    /// OTLP/HTTP with a protobuf body (`POST /v1/traces`).
    HttpProtobuf,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http",
        })
    }
}

/// Everything tracing runs with, validated. `None` in the serve settings: tracing is off.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    pub protocol: Protocol,
    /// The URL spans are sent to (for HTTP, with its path).
    pub endpoint: String,
    /// In [0, 1]: the share of traces started here that are kept (a parent's choice wins).
    pub sampling_rate: f64,
    pub service_name: String,
    /// Upstream's `TRACING_SERVICE_NAMESPACE`, when set.
    pub service_namespace: Option<String>,
    /// Upstream's `TRACING_SERVICE_INSTANCE_ID`, when set (otherwise a random one, unless
    /// `OTEL_RESOURCE_ATTRIBUTES` names one).
    pub service_instance_id: Option<String>,
    /// Descriptor values as span attributes (off: they never leave the process).
    pub descriptor_values: bool,
    /// Finished spans waiting for export; beyond it a span is dropped and counted.
    pub queue_size: usize,
}

/// A value that cannot be used: the text names the flag or variable.
fn refuse(what: &str, problem: impl fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{what}: {problem}")
}

fn sampling_rate(what: &str, rate: f64) -> anyhow::Result<f64> {
    if (0.0..=1.0).contains(&rate) {
        Ok(rate)
    } else {
        Err(refuse(what, format!("{rate} is not between 0 and 1")))
    }
}

/// Resolves the tracing settings: `None` when tracing is off (`--tracing off`, or neither
/// `--tracing` nor `TRACING_ENABLED` turns it on). Our flags are checked even then.
pub fn resolve(args: &TelemetryArgs, env: Lookup<'_>) -> anyhow::Result<Option<TracingSettings>> {
    let rate_flag = args
        .tracing_sampling_rate
        .map(|rate| sampling_rate("--tracing-sampling-rate", rate))
        .transpose()?;
    let enabled = match args.tracing {
        Some(on) => on,
        // Read as Go's `strconv.ParseBool` reads it, like upstream's other booleans.
        None => upstream_env::boolean(env, "TRACING_ENABLED")?.unwrap_or(false),
    };
    if !enabled {
        return Ok(None);
    }
    for variable in [
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ] {
        if let Some(value) = non_empty(env, variable).filter(|v| v != "none") {
            return Err(refuse(
                variable,
                format!(
                    "{value:?}: compression is not supported (spans are sent uncompressed); unset it"
                ),
            ));
        }
    }
    let protocol = protocol(args, env)?;
    let endpoint = endpoint(args.tracing_endpoint.as_deref(), protocol, env)?;
    let sampling_rate = match rate_flag {
        Some(rate) => rate,
        None => match non_empty(env, "TRACING_SAMPLING_RATE") {
            Some(value) => {
                let rate = value.trim().parse::<f64>().map_err(|_| {
                    refuse(
                        "TRACING_SAMPLING_RATE",
                        format!("{value:?} is not a number"),
                    )
                })?;
                sampling_rate("TRACING_SAMPLING_RATE", rate)?
            }
            None => 1.0,
        },
    };
    let resource = resource_attributes(env);
    let from_resource = |key: &str| {
        resource
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.clone())
    };
    let service_name = args
        .tracing_service_name
        .clone()
        .filter(|name| !name.is_empty())
        .or_else(|| non_empty(env, "TRACING_SERVICE_NAME"))
        .or_else(|| non_empty(env, "OTEL_SERVICE_NAME"))
        .or_else(|| from_resource("service.name"))
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    Ok(Some(TracingSettings {
        protocol,
        endpoint,
        sampling_rate,
        service_name,
        service_namespace: non_empty(env, "TRACING_SERVICE_NAMESPACE"),
        service_instance_id: non_empty(env, "TRACING_SERVICE_INSTANCE_ID")
            .or_else(|| from_resource("service.instance.id")),
        descriptor_values: args.tracing_descriptor_values,
        queue_size: usize::try_from(args.tracing_queue_size).unwrap_or(usize::MAX),
    }))
}

/// The start log's account of what upstream's `TRACING_*` variables (and the SDK's `OTEL_*`)
/// decided, one line per value they set where no flag of ours did, in the order `resolve`
/// reads them: `--tracing=true from upstream's TRACING_ENABLED`. Our own flags and `RLS_*`
/// variables have their lines already.
pub fn upstream_lines(args: &TelemetryArgs, env: Lookup<'_>) -> Vec<String> {
    let mut lines = Vec::new();
    let first = |variables: &[&'static str]| {
        variables
            .iter()
            .find_map(|variable| non_empty(env, variable).map(|value| (*variable, value)))
    };
    let source = |variable: &str| {
        if variable.starts_with("OTEL_") {
            format!("the SDK's {variable}")
        } else {
            format!("upstream's {variable}")
        }
    };
    let mut line = |flag: &str, found: Option<(&str, String)>| {
        if let Some((variable, value)) = found {
            lines.push(format!("--{flag}={value} from {}", source(variable)));
        }
    };
    if args.tracing.is_none() {
        line("tracing", first(&["TRACING_ENABLED"]));
    }
    if args.tracing_protocol.is_none() {
        line(
            "tracing-protocol",
            first(&[
                "TRACING_EXPORTER_PROTOCOL",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ]),
        );
    }
    if args.tracing_endpoint.as_deref().is_none_or(str::is_empty) {
        line(
            "tracing-endpoint",
            first(&[
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]),
        );
    }
    if args.tracing_sampling_rate.is_none() {
        line("tracing-sampling-rate", first(&["TRACING_SAMPLING_RATE"]));
    }
    if args
        .tracing_service_name
        .as_deref()
        .is_none_or(str::is_empty)
    {
        line(
            "tracing-service-name",
            first(&["TRACING_SERVICE_NAME", "OTEL_SERVICE_NAME"]),
        );
    }
    for (attribute, variable) in [
        ("service.namespace", "TRACING_SERVICE_NAMESPACE"),
        ("service.instance.id", "TRACING_SERVICE_INSTANCE_ID"),
    ] {
        if let Some(value) = non_empty(env, variable) {
            lines.push(format!("{attribute}={value} from upstream's {variable}"));
        }
    }
    lines
}

/// `--tracing-protocol`, else upstream's `TRACING_EXPORTER_PROTOCOL`, else the SDK's
/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP
/// (upstream's default).
fn protocol(args: &TelemetryArgs, env: Lookup<'_>) -> anyhow::Result<Protocol> {
    if let Some(protocol) = args.tracing_protocol {
        return Ok(match protocol {
            ProtocolArg::Grpc => Protocol::Grpc,
            ProtocolArg::Http => Protocol::HttpProtobuf,
        });
    }
    if let Some(value) = non_empty(env, "TRACING_EXPORTER_PROTOCOL") {
        return match value.as_str() {
            "http" => Ok(Protocol::HttpProtobuf),
            "grpc" => Ok(Protocol::Grpc),
            other => Err(refuse(
                "TRACING_EXPORTER_PROTOCOL",
                format!("{other:?} is neither http nor grpc"),
            )),
        };
    }
    for variable in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = non_empty(env, variable) {
            return match value.as_str() {
                "grpc" => Ok(Protocol::Grpc),
                "http/protobuf" => Ok(Protocol::HttpProtobuf),
                "http/json" => Err(refuse(
                    variable,
                    "http/json is not supported: use http/protobuf or grpc",
                )),
                other => Err(refuse(
                    variable,
                    format!("{other:?} is neither grpc nor http/protobuf"),
                )),
            };
        }
    }
    Ok(Protocol::HttpProtobuf)
}

/// `--tracing-endpoint` (for HTTP, `/v1/traces` added when it has no path), else
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as it is), else `OTEL_EXPORTER_OTLP_ENDPOINT` (for
/// HTTP, with `/v1/traces` appended, as the specification says), else the protocol's default
/// on localhost. Plain `http://` only.
fn endpoint(flag: Option<&str>, protocol: Protocol, env: Lookup<'_>) -> anyhow::Result<String> {
    let http = protocol == Protocol::HttpProtobuf;
    let (what, url, append) = if let Some(url) = flag.filter(|url| !url.is_empty()) {
        ("--tracing-endpoint", url.to_owned(), Append::IfNoPath)
    } else if let Some(url) = non_empty(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url, Append::Never)
    } else if let Some(url) = non_empty(env, "OTEL_EXPORTER_OTLP_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url, Append::Always)
    } else if http {
        return Ok(DEFAULT_HTTP_ENDPOINT.to_owned());
    } else {
        return Ok(DEFAULT_GRPC_ENDPOINT.to_owned());
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| refuse(what, format!("{url:?} is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(refuse(
                what,
                format!(
                    "{url:?}: TLS to the collector is not supported; send to a collector on \
                     plain http:// (a sidecar or node agent)"
                ),
            ));
        }
        _ => {
            return Err(refuse(what, format!("{url:?} must start with http://")));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(refuse(what, format!("{url:?} has no host")));
    }
    if !http {
        return Ok(url);
    }
    let no_path = matches!(uri.path(), "" | "/");
    Ok(match append {
        Append::Always => format!("{}{TRACES_PATH}", url.trim_end_matches('/')),
        Append::IfNoPath if no_path => format!("{}{TRACES_PATH}", url.trim_end_matches('/')),
        Append::IfNoPath | Append::Never => url,
    })
}

enum Append {
    Always,
    IfNoPath,
    Never,
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, values
/// percent-decoded (the SDK reads the others itself; these few decide our precedence).
fn resource_attributes(env: Lookup<'_>) -> Vec<(String, String)> {
    let Some(raw) = non_empty(env, "OTEL_RESOURCE_ATTRIBUTES") else {
        return Vec::new();
    };
    raw.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), percent_decode(value.trim())))
        .filter(|(key, value)| !key.is_empty() && !value.is_empty())
        .collect()
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (byte, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `--tracing-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    /// OTLP/gRPC (port 4317 by convention)
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318, path /v1/traces)
    Http,
}
