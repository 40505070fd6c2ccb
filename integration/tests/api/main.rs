//! The RateLimitService v3 API of the real binary: answers, limits, refunds, the penalty box,
//! `Retry-After`, the engine's bounds, counter inspection and the HTTP endpoints beside it.

mod admin_endpoints;
mod counter_inspection;
mod engine_bounds;
mod explain_service;
mod grpc_edge;
mod multi_limits;
mod never_above;
mod one_worker;
mod penalty_box;
mod quota_errors;
mod quota_mechanisms;
mod quota_service;
mod refunds;
mod retry_after;
mod rls_api;
mod rls_robustness;
