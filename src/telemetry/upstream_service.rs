//! envoyproxy/ratelimit's service-wide stats: config loads, the global shadow mode's answers,
//! and `ShouldRateLimit`'s errors, under the names its default Prometheus mapping gives them
//! (`ratelimit_service_config_load_success`, `ratelimit_service_config_load_error`,
//! `ratelimit_service_should_rate_limit_error{err_type}`), and `global_shadow_mode` as an
//! unmapped statsd name becomes (`ratelimit_service_global_shadow_mode`). Gauges, as
//! `upstream_stats`: the names carry no `_total`.
//!
//! Upstream's `should_rate_limit` errors: `service_error`, a request it refuses (our
//! `INVALID_ARGUMENT`), and `redis_error`, a Redis failure turned into a gRPC error. A backend
//! failure never becomes an error here, so `redis_error` stays 0.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;

use super::sharded::ShardedCounter;

/// The service-wide counts upstream keeps.
#[derive(Debug, Default)]
pub struct UpstreamServiceStats {
    pub config_load_success: ShardedCounter,
    pub config_load_error: ShardedCounter,
    /// Requests the global shadow mode answered OK instead of OVER_LIMIT.
    pub global_shadow_mode: ShardedCounter,
    /// Requests refused as invalid.
    pub service_error: ShardedCounter,
}

/// Upstream's error kind, as its mapping labels it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrType {
    err_type: &'static str,
}

impl UpstreamServiceStats {
    /// Each stat's statsd name (after `ratelimit.service.`) and its count now.
    pub fn statsd_counts(&self) -> [(&'static str, u64); 5] {
        [
            ("config_load_success", self.config_load_success.get()),
            ("config_load_error", self.config_load_error.get()),
            ("global_shadow_mode", self.global_shadow_mode.get()),
            ("call.should_rate_limit.redis_error", 0),
            (
                "call.should_rate_limit.service_error",
                self.service_error.get(),
            ),
        ]
    }
}

impl Collector for UpstreamServiceStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, value) in [
            (
                "ratelimit_service_config_load_success",
                "Limits configs loaded (upstream's config_load_success)",
                self.config_load_success.get(),
            ),
            (
                "ratelimit_service_config_load_error",
                "Limits configs refused (upstream's config_load_error)",
                self.config_load_error.get(),
            ),
            (
                "ratelimit_service_global_shadow_mode",
                "Requests over a limit answered OK by the global shadow mode (upstream's \
                 global_shadow_mode)",
                self.global_shadow_mode.get(),
            ),
        ] {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)?;
        }
        let mut family = encoder.encode_descriptor(
            "ratelimit_service_should_rate_limit_error",
            "ShouldRateLimit calls answered with an error, by upstream's kind: service_error \
             (an invalid request), redis_error (never here: a Redis failure is not an error)",
            None,
            MetricType::Gauge,
        )?;
        for (err_type, value) in [
            ("redis_error", 0),
            ("service_error", self.service_error.get()),
        ] {
            family
                .encode_family(&ErrType { err_type })?
                .encode_gauge(&value)?;
        }
        Ok(())
    }
}
