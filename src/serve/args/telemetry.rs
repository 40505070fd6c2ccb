//! What the service reports about itself, beyond `--log-format` and `--log-level`.

use std::time::Duration;

use crate::duration_arg::{DurationRange, hours, millis};
use crate::telemetry::MetricsSettings;

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
}
