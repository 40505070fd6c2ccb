//! What the process says about itself: `/healthz` and gRPC health for `""` and the
//! RateLimitService's name (ours), `/healthcheck` and gRPC health for `ratelimit` (upstream's).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::admin;
use crate::rls::{RateLimitServiceServer, RateLimiter};

/// gRPC health's service name for upstream's health (envoyproxy/ratelimit registers its
/// checker under this name), probed by its image's users: `grpc_health_probe -service=ratelimit`.
const UPSTREAM_HEALTH_NAME: &str = "ratelimit";

/// How often gRPC health for [`UPSTREAM_HEALTH_NAME`] follows a config reload (shutdown and a
/// stopped task change it at once).
const UPSTREAM_HEALTH_INTERVAL: Duration = Duration::from_millis(250);

/// What the process says about itself: `/healthz` and gRPC health for `""` and the
/// RateLimitService's name (ours), `/healthcheck` and gRPC health for `ratelimit` (upstream's).
pub(super) struct Health {
    pub(super) serving: Arc<AtomicBool>,
    pub(super) reporter: tonic_health::server::HealthReporter,
    /// Upstream's health inputs (`AdminState::upstream_unhealthy`) and the status last set for
    /// `ratelimit`. The lock makes "compute, then set" one step, so a poll that read `serving`
    /// just before shutdown cannot set SERVING after shutdown set NOT_SERVING.
    pub(super) upstream: Option<(admin::AdminState, tokio::sync::Mutex<Option<bool>>)>,
}

impl Health {
    pub(super) async fn not_serving(&self) {
        self.serving.store(false, Ordering::Release);
        self.reporter
            .set_not_serving::<RateLimitServiceServer<RateLimiter>>()
            .await;
        self.reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        self.refresh_upstream().await;
    }

    /// Set gRPC health for `ratelimit` to what `/healthcheck` answers, when it changed.
    pub(super) async fn refresh_upstream(&self) {
        let Some((state, last)) = &self.upstream else {
            return;
        };
        let mut last = last.lock().await;
        let healthy = state.upstream_unhealthy().is_none();
        if *last != Some(healthy) {
            let status = if healthy {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            self.reporter
                .set_service_status(UPSTREAM_HEALTH_NAME, status)
                .await;
            *last = Some(healthy);
        }
    }

    /// Follow config reloads (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) until `stop`.
    pub(super) async fn follow_upstream(&self, stop: tokio_util::sync::CancellationToken) {
        let mut ticks = tokio::time::interval(UPSTREAM_HEALTH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.refresh_upstream().await,
                () = stop.cancelled() => return,
            }
        }
    }
}
