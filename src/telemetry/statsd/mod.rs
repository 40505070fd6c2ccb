//! envoyproxy/ratelimit's stats pushed over statsd (`USE_STATSD`, its default) or DogStatsD
//! (`USE_DOG_STATSD`), with its names and values: every `--statsd-flush-interval` (upstream's
//! `STATS_FLUSH_INTERVAL`), each counter that grew is sent with how much it grew since the
//! last flush the collector took (`name:delta|c`), as lyft/gostats sends them. A flush that
//! fails is not lost: its growth goes with the next one.
//!
//! The counts are the ones `/metrics` shows under upstream's Prometheus names
//! ([`Metrics::statsd_counts`]); their names are at most the series the metrics allow, so a
//! flush is bounded too. Timers (upstream's `response_time`, one line per request) are not
//! sent: `/metrics` has the histogram.

mod format;
mod mogrifier;
mod sink;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gcounter_engine::Throttle;

pub use format::{Format, counter_line, sanitize, tag_set};
pub use mogrifier::{Mogrifier, MogrifierError};
pub use sink::{DATAGRAM_BYTES, Protocol, SendError, Sink, datagrams};

use super::Metrics;

/// Where and how the stats are pushed.
#[derive(Debug, Clone)]
pub struct StatsdSettings {
    /// `host:port`, resolved at each connection.
    pub target: String,
    pub protocol: Protocol,
    pub format: Format,
    pub flush_interval: Duration,
    /// Upstream's `EXTRA_TAGS`, as gostats keeps them (sorted, values sanitized).
    pub tags: Vec<(String, String)>,
    /// DogStatsD only.
    pub mogrifiers: Vec<Mogrifier>,
}

/// A failing collector is said at most this often, with the count of failures meanwhile.
const WARNING_INTERVAL: Duration = Duration::from_secs(30);

/// Pushes the stats every flush interval until `stop`, then once more.
pub async fn run(settings: StatsdSettings, metrics: Arc<Metrics>, stop: impl Future<Output = ()>) {
    let mut exporter = Exporter::new(settings);
    let mut ticks = tokio::time::interval(exporter.settings.flush_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticks.tick() => exporter.flush(&metrics).await,
            () = &mut stop => {
                exporter.flush(&metrics).await;
                return;
            }
        }
    }
}

/// The counts the collector took, by upstream's name.
struct Exporter {
    settings: StatsdSettings,
    sink: Sink,
    sent: HashMap<String, u64>,
    counts: Vec<(String, u64)>,
    warnings: Throttle,
    reached: gcounter_engine::reachability::Reachability,
}

impl Exporter {
    fn new(settings: StatsdSettings) -> Self {
        let what = match settings.format {
            Format::Statsd => format!("the statsd collector ({})", settings.target),
            Format::DogStatsd => format!("the DogStatsD agent ({})", settings.target),
        };
        Self {
            sink: Sink::new(settings.target.clone(), settings.protocol),
            settings,
            sent: HashMap::new(),
            counts: Vec::new(),
            warnings: Throttle::new(WARNING_INTERVAL),
            reached: gcounter_engine::reachability::Reachability::new(
                what,
                "the stats not sent go with the next flush that reaches it",
            ),
        }
    }

    /// Sends every counter's growth since the collector last took it.
    async fn flush(&mut self, metrics: &Metrics) {
        self.counts.clear();
        metrics.statsd_counts(&mut self.counts);
        let mut payload = String::new();
        let mut taken = Vec::new();
        for (name, count) in &self.counts {
            let sent = self.sent.get(name).copied().unwrap_or(0);
            if *count <= sent {
                continue;
            }
            counter_line(
                self.settings.format,
                &sanitize(name),
                &self.settings.tags,
                &self.settings.mogrifiers,
                count - sent,
                &mut payload,
            );
            taken.push((name.clone(), *count));
        }
        if payload.is_empty() {
            return;
        }
        match self.sink.send(&payload).await {
            Ok(()) => {
                self.reached.reached();
                self.sent.extend(taken);
            }
            Err(error) => {
                if self.reached.lost(&error).is_none()
                    && let Some(suppressed) = self.warnings.allow()
                {
                    tracing::warn!(%error, failures_not_logged = suppressed, "stats not sent; they go with the next flush");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
