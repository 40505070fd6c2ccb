//! The transport: Envoy's `RateLimitService/ShouldRateLimit` over gRPC.
//!
//! It turns a request into plans (config lookup, counter identity, cost), asks the engine for
//! each limited descriptor, and shapes the answer as envoyproxy/ratelimit does. It knows the
//! config and the engine; it knows nothing of Redis or SQL.
//!
//! Where each step lives:
//! - `route`: the gRPC route that decodes the raw message itself, so undecodable and
//!   oversized requests are answered and counted; `GrpcRoutes` compares `ShouldRateLimit`'s
//!   path and calls it directly, every other path goes to tonic's routes (health; the
//!   service's other methods answer `UNIMPLEMENTED`).
//! - `validate`: request validation. `plan`: descriptor → rule or override, counter
//!   identity, cost and refund (`Limited::windows`: every limit of a `rate_limits` rule).
//! - `decide`: the all-or-nothing decision of several limits and refunds.
//! - `overall`: the overall code from regular and quota descriptors; `metadata`: the
//!   response's `dynamic_metadata`; `response`: statuses and `RateLimit-*` headers;
//!   `structured`: the IETF draft's `RateLimit-Policy`/`RateLimit` header style.
//! - `answer`: the answer as sent, kept small because tonic copies it several times
//!   (statuses inline, the rule's name shared, the reset in ms), encoded with prost's field
//!   encoders to the bytes `RateLimitResponse` would give without that message's `Vec`.
//! - `inspect`: which counter a descriptor counts on, for the admin port's inspection.
//! - `in_process`: a limiter on the in-process origin and a caller's clock, for the
//!   in-process tests and the fuzz targets. `units`: unit enum mapping. `json`: upstream's
//!   JSON form of a request and response for `POST /json`. `traced`: a request's span.
//! - `limited_by`: the rule that refused a request, named in the answer (metadata, header),
//!   the span and the debug log; the request as received, logged at debug.

mod answer;
mod decide;
#[cfg(test)]
mod fixed_tests;
mod in_process;
mod inspect;
mod json;
pub mod limited_by;
mod metadata;
mod overall;
pub(crate) mod plan;
mod response;
mod route;
mod structured;
#[cfg(test)]
mod tests;
mod traced;
pub(crate) mod units;
mod validate;

use std::sync::Arc;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tonic::{Request, Response, Status};

pub use answer::Answer;
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
pub use inspect::NotCounted;
pub(crate) use json::parse_request;
pub use json::{JsonReply, should_rate_limit_json};
pub use response::HeaderNames;
pub use route::{DirectService, GrpcRoutes, RateLimitRoute};
pub use structured::HeaderStyle;
pub use validate::RequestLimits;

use crate::config::LimitsConfig;
use crate::telemetry::{DecisionLabel, DecisionOutcome, Metrics, RequestOutcome, Usage};
use crate::trace::{DecisionTracer, SpanOptions};
use gcounter_engine::{Check, Engine, Verdict};
use overall::{Role, Tally};
use plan::{INLINE_PLANS, Plan, Plans};
use smallvec::SmallVec;

/// How the service answers, beyond what the limits config says.
#[derive(Debug, Clone, Default)]
pub struct RlsSettings {
    /// Global shadow mode: everything is counted and reported, everything is answered OK.
    pub shadow_mode: bool,
    /// Global quota mode (upstream's `QUOTA_MODE`): every descriptor is a quota, so the
    /// request is OVER_LIMIT only when all of its counted descriptors are over.
    pub quota_mode: bool,
    /// Upstream's `RESPONSE_DYNAMIC_METADATA`: answers carry the domain, the request's
    /// descriptors and the passed rules' `metadata` in `dynamic_metadata`.
    pub response_dynamic_metadata: bool,
    /// `Some` turns the `RateLimit-*` response headers on.
    pub response_headers: Option<HeaderNames>,
    /// All-or-nothing across the descriptors of a request: when the request is OVER_LIMIT,
    /// what its passed descriptors consumed is refunded (Envoy would otherwise charge a
    /// denied request to the descriptors it passed).
    pub all_or_nothing: bool,
    /// Which of the IETF draft's forms those headers take.
    pub header_style: HeaderStyle,
    /// `Some`: an OVER_LIMIT answer adds this response header naming the refusing rule.
    pub rule_header: Option<String>,
    pub request_limits: RequestLimits,
    /// `Some`: every decision is a span (the tracing pipeline is running).
    pub tracing: Option<SpanOptions>,
}

/// The verdicts of a request's limited plans, in plan order, each with the limit it is about.
type Verdicts = SmallVec<[(Verdict, plan::LimitWindow); INLINE_PLANS]>;

/// What [`RateLimiter::should_rate_limit_now`] did.
#[allow(
    clippy::large_enum_variant,
    reason = "the answer is the common case: boxing it would allocate per request"
)]
pub enum Now {
    /// The request is answered (or refused).
    Answered(Result<Answer, Status>),
    /// Something must be awaited: [`RateLimiter::finish`] the request with this.
    Later(Unfinished),
}

/// A request decided in part, synchronously: its plans (planned once, holding what they
/// need of the config snapshot they were planned on) and the verdicts already taken (their
/// counts consumed), so that [`RateLimiter::finish`] decides no descriptor twice.
pub struct Unfinished {
    /// The domain's name: the engine's workspace and the metrics' label.
    workspace: Arc<str>,
    plans: Plans<'static>,
    verdicts: Verdicts,
}

/// Every descriptor's status and role, before the answer's headers and metadata.
struct Judged {
    statuses: answer::Statuses,
    roles: SmallVec<[Role; INLINE_PLANS]>,
    /// Per plan: whether it consumed (accepted with a cost), for `all_or_nothing`.
    consumed: SmallVec<[bool; INLINE_PLANS]>,
    over_limit: bool,
}

/// The `RateLimitService` implementation.
pub struct RateLimiter {
    limits: Arc<ArcSwap<LimitsConfig>>,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    settings: RlsSettings,
    /// Metric label of request overrides, allocated once.
    override_label: Arc<str>,
    /// Starts each decision's span; `None` while tracing is off (nothing else is done then).
    tracer: Option<DecisionTracer>,
}

impl RateLimiter {
    pub fn new(
        limits: Arc<ArcSwap<LimitsConfig>>,
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        settings: RlsSettings,
    ) -> Self {
        let tracer = settings.tracing.and_then(DecisionTracer::new);
        Self {
            limits,
            engine,
            metrics,
            settings,
            override_label: "override".into(),
            tracer,
        }
    }

    /// Decode a `RateLimitRequest` as it came off the wire, then decide. A message that does
    /// not decode is the client's error: `InvalidArgument`, counted like any refused request.
    pub async fn should_rate_limit_encoded(&self, message: bytes::Bytes) -> Result<Answer, Status> {
        let request = self.decode(message)?;
        self.should_rate_limit(&request).await
    }

    /// The request as it came off the wire, decoded; a message that does not decode is
    /// `InvalidArgument`, counted.
    pub fn decode(&self, message: bytes::Bytes) -> Result<RateLimitRequest, Status> {
        RateLimitRequest::decode(message).map_err(|error| {
            self.metrics.request(RequestOutcome::InvalidArgument);
            Status::invalid_argument(format!("cannot decode the RateLimitRequest: {error}"))
        })
    }

    /// The whole decision for one request, independent of tonic's wrappers.
    pub async fn should_rate_limit(&self, request: &RateLimitRequest) -> Result<Answer, Status> {
        match self.should_rate_limit_now(request) {
            Now::Answered(answer) => answer,
            Now::Later(unfinished) => self.finish_untraced(request, unfinished).await,
        }
    }

    /// The decision taken synchronously, as far as it can be: every descriptor decided from
    /// memory (the warm path) is answered without building a future. Otherwise it stops
    /// before the first descriptor that needs to wait (a cold cell, a refund, several
    /// limits) and [`finish`](Self::finish) continues from there; what was decided stays
    /// decided (its count consumed once), and nothing is counted in the metrics before the
    /// whole request is decided.
    pub fn should_rate_limit_now(&self, request: &RateLimitRequest) -> Now {
        if let Err(invalid) = validate::validate(request, &self.settings.request_limits) {
            self.metrics.request(RequestOutcome::InvalidArgument);
            return Now::Answered(Err(Status::invalid_argument(invalid.to_string())));
        }
        tracing::debug!(domain = %request.domain, descriptors = %limited_by::Received(&request.descriptors), hits_addend = request.hits_addend, "request received");
        // One snapshot for the whole request: a reload mid-request cannot mix two configs.
        let limits = self.limits.load();
        let Some(domain) = limits.domain(&request.domain) else {
            return Now::Answered(Ok(self.unknown_domain(request)));
        };
        let plans = plan::plan(domain, &request.descriptors, request.hits_addend);
        let mut verdicts = Verdicts::new();
        let all_decided = self.decide_now(&plans, &mut verdicts);
        if !all_decided || self.gives_back(&plans, &verdicts) {
            return Now::Later(Unfinished {
                workspace: Arc::clone(domain.name()),
                plans: plans.into_iter().map(Plan::into_owned).collect(),
                verdicts,
            });
        }
        let decided = self.judge(domain.name(), &plans, &verdicts);
        Now::Answered(Ok(self.complete(request, &plans, decided)))
    }

    /// What [`should_rate_limit_now`](Self::should_rate_limit_now) left: the descriptors it
    /// did not decide, then, with `all_or_nothing`, the refunds of a denied request, on the
    /// plans it made.
    pub async fn finish(
        &self,
        request: &RateLimitRequest,
        unfinished: Unfinished,
    ) -> Result<Answer, Status> {
        let Unfinished {
            workspace,
            plans,
            mut verdicts,
        } = unfinished;
        let limited = plans.iter().filter_map(|plan| match plan {
            Plan::Limited(limited) => Some(limited),
            Plan::NoLimit | Plan::Unlimited(_) => None,
        });
        for limited in limited.skip(verdicts.len()) {
            verdicts.push(self.decide(limited).await);
        }
        let mut decided = self.judge(&workspace, &plans, &verdicts);
        if decided.over_limit && self.settings.all_or_nothing {
            let per_plan = plans.iter().zip(&decided.consumed);
            for ((plan, consumed), status) in per_plan.zip(&mut decided.statuses) {
                if let (Plan::Limited(limited), true) = (plan, consumed) {
                    self.give_back(limited).await;
                    // As upstream's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT answers: what is
                    // left once this request is not counted.
                    let cost = u32::try_from(limited.cost).unwrap_or(u32::MAX);
                    let limit = status
                        .current_limit
                        .as_ref()
                        .map_or(u32::MAX, |l| l.requests_per_unit);
                    status.limit_remaining = status.limit_remaining.saturating_add(cost).min(limit);
                }
            }
        }
        Ok(self.complete(request, &plans, decided))
    }

    /// Envoy's convention: an unknown domain is not limited.
    fn unknown_domain(&self, request: &RateLimitRequest) -> Answer {
        for _ in &request.descriptors {
            self.metrics.unmatched();
        }
        self.metrics.request(RequestOutcome::Ok);
        Answer {
            overall_code: Code::Ok,
            statuses: request
                .descriptors
                .iter()
                .map(|_| response::no_limit())
                .collect(),
            ..Default::default()
        }
    }

    /// Decides, in order, the limited plans whose verdict is taken without waiting (one
    /// limit, not a refund, its cell warm), pushing each verdict; stops before the first
    /// other one, having consumed nothing of it. True when every limited plan is decided.
    fn decide_now(&self, plans: &[Plan<'_>], verdicts: &mut Verdicts) -> bool {
        for plan in plans {
            let Plan::Limited(limited) = plan else {
                continue;
            };
            if limited.refund || limited.has_more_limits() {
                return false;
            }
            let penalty_ms = limited.rule.as_ref().map_or(0, |rule| rule.penalty_ms);
            let window = limited.window();
            match self
                .engine
                .check_with_penalty(limited.hit(window), penalty_ms)
            {
                Check::Ready(verdict) => verdicts.push((verdict, window)),
                // Dropped unawaited: nothing consumed; `finish` checks it again.
                Check::Slow(_) => return false,
            }
        }
        true
    }

    /// Whether the decided request must refund what it consumed (`all_or_nothing` and over
    /// the limit), which only [`finish`](Self::finish) does.
    fn gives_back(&self, plans: &[Plan<'_>], verdicts: &Verdicts) -> bool {
        if !self.settings.all_or_nothing || self.settings.shadow_mode {
            return false;
        }
        let mut tally = Tally::default();
        let mut verdicts = verdicts.iter();
        for plan in plans {
            let verdict = match plan {
                Plan::Limited(_) => verdicts.next().map(|(verdict, _)| verdict),
                Plan::NoLimit | Plan::Unlimited(_) => None,
            };
            tally.add(self.role(plan, verdict));
        }
        tally.over_limit()
    }

    /// A descriptor's code and its metric outcome. A rule's shadow mode answers its
    /// descriptor OK; the global switch keeps the descriptor's OVER_LIMIT and only turns the
    /// overall code OK (in [`judge`](Self::judge)), as upstream: Envoy reads the overall code.
    fn code(&self, allowed: bool, limited: &plan::Limited<'_>) -> (Code, DecisionOutcome) {
        match (allowed, limited.shadow_mode, self.settings.shadow_mode) {
            (true, _, _) => (Code::Ok, DecisionOutcome::WithinLimit),
            (false, true, _) => (Code::Ok, DecisionOutcome::ShadowOverLimit),
            (false, false, true) => (Code::OverLimit, DecisionOutcome::ShadowOverLimit),
            (false, false, false) => (Code::OverLimit, DecisionOutcome::OverLimit),
        }
    }

    /// How a descriptor takes part in the overall code; `verdict` is a limited plan's.
    fn role(&self, plan: &Plan<'_>, verdict: Option<&Verdict>) -> Role {
        let global_quota = self.settings.quota_mode;
        match (plan, verdict) {
            (Plan::Unlimited(_), _) => Role::Unlimited,
            (Plan::Limited(limited), Some(verdict)) => {
                let over = self.code(verdict.allowed, limited).0 == Code::OverLimit;
                if global_quota || limited.quota_mode {
                    Role::Quota { over }
                } else {
                    Role::Regular { over }
                }
            }
            // As upstream: with the global switch an unlimited-less descriptor is a quota
            // that passes.
            (Plan::NoLimit | Plan::Limited(_), _) => {
                if global_quota {
                    Role::Quota { over: false }
                } else {
                    Role::Regular { over: false }
                }
            }
        }
    }

    /// Every descriptor's status from the decided verdicts (one per limited plan, in
    /// order), with its metrics.
    fn judge(&self, workspace: &Arc<str>, plans: &[Plan<'_>], verdicts: &Verdicts) -> Judged {
        let mut judged = Judged {
            statuses: answer::Statuses::new(),
            roles: SmallVec::new(),
            consumed: SmallVec::new(),
            over_limit: false,
        };
        let mut tally = Tally::default();
        let mut verdicts = verdicts.iter();
        for plan in plans {
            let mut consumed = false;
            let (status, role) = match plan {
                Plan::NoLimit => {
                    self.metrics.unmatched();
                    (response::no_limit(), self.role(plan, None))
                }
                Plan::Unlimited(rule) => {
                    self.metrics
                        .rule_unlimited(&rule.series, workspace, &rule.path);
                    (response::unlimited(), Role::Unlimited)
                }
                Plan::Limited(limited) => {
                    let Some((verdict, window)) = verdicts.next() else {
                        // Not reached: every limited plan has its verdict.
                        judged.consumed.push(false);
                        judged.statuses.push(response::no_limit());
                        judged.roles.push(self.role(plan, None));
                        continue;
                    };
                    consumed = verdict.allowed && limited.cost > 0 && !limited.refund;
                    let (code, outcome) = self.code(verdict.allowed, limited);
                    self.count_decision(workspace, limited, verdict, window, outcome);
                    (
                        response::limited(limited, *window, verdict, code),
                        self.role(plan, Some(verdict)),
                    )
                }
            };
            judged.consumed.push(consumed);
            tally.add(role);
            judged.statuses.push(status);
            judged.roles.push(role);
        }
        // The global shadow switch answers OK what would have been denied.
        judged.over_limit = tally.over_limit() && !self.settings.shadow_mode;
        if tally.over_limit() && self.settings.shadow_mode {
            self.metrics.global_shadow_mode();
        }
        judged
    }

    /// The decision metrics of one limited descriptor.
    fn count_decision(
        &self,
        workspace: &Arc<str>,
        limited: &plan::Limited<'_>,
        verdict: &Verdict,
        window: &plan::LimitWindow,
        outcome: DecisionOutcome,
    ) {
        let rule_label = limited.rule_path.as_deref().unwrap_or(&self.override_label);
        let limit = u64::from(window.requests_per_unit);
        let usage = Usage {
            hits: limited.cost,
            limit,
            used_after: limit.saturating_sub(verdict.remaining),
            seen: verdict.seen,
        };
        let label = match limited.rule.as_deref() {
            // Labels with request values: capped per rule.
            Some(rule) if rule.detailed_metric || rule.value_to_metric => DecisionLabel::Detailed {
                rule: &rule.path,
                label: rule_label,
            },
            // The rule's path: its series resolved once.
            Some(rule) => DecisionLabel::Rule {
                series: &rule.series,
                path: &rule.path,
            },
            None => DecisionLabel::Override(rule_label),
        };
        self.metrics
            .limited_decision(workspace, label, outcome, usage);
        match outcome {
            DecisionOutcome::ShadowOverLimit => {
                tracing::debug!(domain = %workspace, rule = %rule_label, "over limit in shadow mode; answered OK");
            }
            DecisionOutcome::OverLimit => {
                let rule = limited
                    .rule
                    .as_ref()
                    .map_or(&self.override_label, |r| r.label());
                tracing::debug!(domain = %workspace, rule = %rule, identifier = %limited.identifier, remaining = verdict.remaining, "over limit");
            }
            DecisionOutcome::WithinLimit | DecisionOutcome::Unlimited => {}
        }
    }

    /// The answer from the judged statuses: headers, dynamic metadata, the request metric.
    fn complete(&self, request: &RateLimitRequest, plans: &[Plan<'_>], judged: Judged) -> Answer {
        let Judged {
            statuses,
            roles,
            over_limit,
            ..
        } = judged;
        let refusing_rule = limited_by::refusing_rule(plans, &statuses, &roles, over_limit);
        let mut response_headers_to_add =
            match (&self.settings.response_headers, self.settings.header_style) {
                (Some(names), HeaderStyle::Draft03) => {
                    let policies = response::policies(plans);
                    response::headers(names, &statuses, &roles, over_limit, policies.as_deref())
                }
                (Some(_), HeaderStyle::Structured) => {
                    let windows_s: Vec<u64> = plans
                        .iter()
                        .map(|plan| match plan {
                            Plan::Limited(limited) => limited.duration_ms.div_ceil(1_000),
                            Plan::NoLimit | Plan::Unlimited(_) => 0,
                        })
                        .collect();
                    structured::headers(&statuses, &roles, &windows_s, over_limit)
                }
                (None, _) => Vec::new(),
            };
        let overall = if over_limit {
            Code::OverLimit
        } else {
            Code::Ok
        };
        self.metrics.request(if over_limit {
            RequestOutcome::OverLimit
        } else {
            RequestOutcome::Ok
        });
        let mut dynamic_metadata = self.settings.response_dynamic_metadata.then(|| {
            // As upstream: the descriptors that passed (not over, not unlimited) whose rule
            // carries `metadata`.
            let passed = plans
                .iter()
                .zip(&statuses)
                .filter(|(_, status)| status.code != Code::OverLimit as i32)
                .filter_map(|(plan, _)| match plan {
                    Plan::Limited(limited) => limited.rule.as_ref()?.metadata.as_deref(),
                    Plan::NoLimit | Plan::Unlimited(_) => None,
                });
            Box::new(metadata::dynamic_metadata(request, passed))
        });
        if let Some(rule) = refusing_rule {
            limited_by::add_to_metadata(&mut dynamic_metadata, &rule);
            if let Some(name) = &self.settings.rule_header {
                response_headers_to_add.push(response::header(name, rule.to_string()));
            }
        }
        Answer {
            overall_code: overall,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        RateLimiter::should_rate_limit(self, request.get_ref())
            .await
            .map(|answer| Response::new(answer.into_response()))
    }
}
