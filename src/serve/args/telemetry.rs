//! What the service reports about itself, beyond `--log-format` and `--log-level`.

use std::time::Duration;

use crate::duration_arg::{DurationRange, hours, millis};
use crate::telemetry::MetricsSettings;
use crate::trace::ProtocolArg;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::TELEMETRY)]
pub struct TelemetryArgs {
    /// Hits accepted above this share of a limit count as near the limit [range: above 0, up to 1]
    ///
    /// In upstream's `near_limit` stat (`ratelimit_service_rate_limit_near_limit`). With no
    /// arguments, set from upstream's `NEAR_LIMIT_RATIO`.
    #[arg(long, env = "RLS_NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,
    /// Series of `rls_descriptor_decisions_total` one `detailed_metric` rule may create [range: 1 to 1000000]
    ///
    /// One per request value and outcome; further values are counted in the rule's own series.
    #[arg(long, env = "RLS_MAX_METRIC_SERIES_PER_RULE", default_value_t = MetricsSettings::DEFAULT_MAX_SERIES_PER_RULE, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_metric_series_per_rule: u32,
    /// Measure runtime stalls at this interval (off unless set) [range: 1ms to 1h]
    ///
    /// A task wakes this often and `rls_runtime_stall_seconds` records how late it woke
    /// (1 ms resolution).
    #[arg(long, env = "RLS_STALL_PROBE_INTERVAL", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub stall_probe_interval: Option<Duration>,
    /// A warning that repeats during an outage is logged once per this interval [range: 1s to 1h]
    ///
    /// "replay failed", a failed global flush or sync: logged with the count of those
    /// suppressed.
    #[arg(long, env = "RLS_REPEATED_WARNING_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(1_000), hours(1)).parser())]
    pub repeated_warning_interval: Duration,
    /// Export OpenTelemetry spans over OTLP: on or off (off unless set)
    ///
    /// `--tracing` alone means on. Unset, upstream's `TRACING_ENABLED` decides. Spans: the
    /// decision, the calls to Redis, the replay, the global flush and sync (docs/operations.md,
    /// "Tracing").
    #[arg(long, env = "RLS_TRACING", value_name = "on|off", num_args = 0..=1, default_missing_value = "on", value_parser = clap::builder::BoolishValueParser::new())]
    pub tracing: Option<bool>,
    /// How spans are sent: OTLP over gRPC or over HTTP with protobuf (http unless set)
    ///
    /// Unset: upstream's `TRACING_EXPORTER_PROTOCOL`, else `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`
    /// or `OTEL_EXPORTER_OTLP_PROTOCOL` (grpc, http/protobuf).
    #[arg(long, env = "RLS_TRACING_PROTOCOL", value_enum)]
    pub tracing_protocol: Option<ProtocolArg>,
    /// The collector's URL, plain http:// (http://localhost:4318/v1/traces, or :4317 for grpc, unless set)
    ///
    /// For http, `/v1/traces` is added when the URL has no path. Unset:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as it is), else `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (`/v1/traces` appended for http).
    #[arg(long, env = "RLS_TRACING_ENDPOINT", value_name = "URL")]
    pub tracing_endpoint: Option<String>,
    /// Share of the traces started here that are kept, 1 unless set [range: 0 to 1]
    ///
    /// A request whose caller sent a trace context follows the caller's sampling decision.
    /// Unset: upstream's `TRACING_SAMPLING_RATE`.
    #[arg(long, env = "RLS_TRACING_SAMPLING_RATE", value_name = "RATE")]
    pub tracing_sampling_rate: Option<f64>,
    /// `service.name` of the spans (gcounter-rls unless set)
    ///
    /// Unset: upstream's `TRACING_SERVICE_NAME`, else `OTEL_SERVICE_NAME`, else `service.name`
    /// in `OTEL_RESOURCE_ATTRIBUTES`.
    #[arg(long, env = "RLS_TRACING_SERVICE_NAME", value_name = "NAME")]
    pub tracing_service_name: Option<String>,
    /// Put the request's descriptor entries (keys and values) on the decision span
    ///
    /// Off: no descriptor value leaves the process in a span (they may be user ids, API
    /// keys, addresses).
    #[arg(long, env = "RLS_TRACING_DESCRIPTOR_VALUES")]
    pub tracing_descriptor_values: bool,
    /// Finished spans waiting for export [range: 1 to 1000000]
    ///
    /// When the collector is slow or down the queue fills and further spans are dropped,
    /// counted in `rls_tracing_spans_dropped_total`; requests never wait for it.
    #[arg(long, env = "RLS_TRACING_QUEUE_SIZE", value_name = "SPANS", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tracing_queue_size: u32,
    /// Push upstream's stats over statsd to this host:port (off unless set)
    ///
    /// envoyproxy/ratelimit's stat names and values
    /// (`ratelimit.service.rate_limit.<domain>.<key>.total_hits`, ...): each counter's growth
    /// since the last flush. With no arguments, set from upstream's `STATSD_HOST` and
    /// `STATSD_PORT` unless `USE_STATSD` and `USE_DOG_STATSD` are false or `DISABLE_STATS` is
    /// true (docs/operations.md, "statsd").
    #[arg(long, env = "RLS_STATSD_ADDR", value_name = "HOST:PORT")]
    pub statsd_addr: Option<String>,
    /// The statsd dialect: statsd (tags in the name, as upstream's statsd sink) or dogstatsd
    ///
    /// dogstatsd: tags after `|#`, over udp, as upstream's `USE_DOG_STATSD` sink. With no
    /// arguments, dogstatsd when upstream's `USE_DOG_STATSD` is true.
    #[arg(long, env = "RLS_STATSD_FORMAT", value_enum, default_value = "statsd")]
    pub statsd_format: StatsdFormatArg,
    /// How statsd lines travel: tcp or udp (tcp for statsd, udp for dogstatsd, unless set)
    ///
    /// With no arguments, set from upstream's `STATSD_PROTOCOL` (its statsd library's).
    #[arg(long, env = "RLS_STATSD_PROTOCOL", value_enum)]
    pub statsd_protocol: Option<crate::telemetry::statsd::Protocol>,
    /// How often the stats are pushed [range: 100ms to 1h]
    ///
    /// With no arguments, set from upstream's `STATS_FLUSH_INTERVAL`.
    #[arg(long, env = "RLS_STATSD_FLUSH_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(1)).parser())]
    pub statsd_flush_interval: Duration,
    /// Tags on every stat: key:value pairs, comma-separated
    ///
    /// statsd: in the name (`.__key=value`), as upstream's; dogstatsd: after `|#`. With no
    /// arguments, set from upstream's `EXTRA_TAGS`.
    #[arg(long, env = "RLS_STATSD_TAGS", value_name = "KEY:VALUE,...")]
    pub statsd_tags: Option<String>,
    /// DogStatsD mogrifiers, by name, comma-separated
    ///
    /// Each reads upstream's `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`, `_NAME` and `_TAGS`. With
    /// no arguments, set from upstream's `USE_DOG_STATSD_MOGRIFIERS`.
    #[arg(long, env = "RLS_STATSD_MOGRIFIERS", value_name = "NAME,...")]
    pub statsd_mogrifiers: Option<String>,
}

/// `--statsd-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsdFormatArg {
    /// Tags serialized into the name (lyft/gostats, upstream's `USE_STATSD`)
    Statsd,
    /// Tags after `|#` (upstream's `USE_DOG_STATSD`)
    Dogstatsd,
}
