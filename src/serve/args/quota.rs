//! The RLQS service (Envoy's `rate_limit_quota` filter): its answers and its bounds.

use std::time::Duration;

use crate::byte_size_arg::{ByteSizeRange, gib, kib};
use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::QUOTA)]
pub struct QuotaArgs {
    /// What a bucket that no rule counts is assigned
    ///
    /// A bucket of an unknown domain, whose entries match no descriptor (or match it
    /// ambiguously), or whose descriptor has no rule.
    #[arg(long, env = "RLS_RLQS_UNMATCHED", value_enum, default_value_t = UnmatchedArg::AllowAll)]
    pub rlqs_unmatched: UnmatchedArg,
    /// How long an assignment holds in Envoy without being renewed [range: 1s to 1h]
    ///
    /// Whole seconds (Envoy reads no fraction). The service renews an unchanged assignment
    /// when half of it has passed; past it (the service gone), Envoy falls back to the
    /// filter's expired_assignment_behavior.
    #[arg(long, env = "RLS_RLQS_ASSIGNMENT_TTL", default_value = "10s", value_parser = DurationRange::new(millis(1_000), hours(1)).parser())]
    pub rlqs_assignment_ttl: Duration,
    /// A bucket reported with no request for this long is abandoned [range: 1s to 24h]
    ///
    /// Envoy drops its state; its share of the limit returns to the other Envoys.
    #[arg(long, env = "RLS_RLQS_ABANDON_AFTER", default_value = "60s", value_parser = DurationRange::new(millis(1_000), hours(24)).parser())]
    pub rlqs_abandon_after: Duration,
    /// How often each stream's shares are computed again and changed ones sent [range: 100ms to 1m]
    #[arg(long, env = "RLS_RLQS_REASSIGN_INTERVAL", default_value = "1s", value_parser = DurationRange::new(millis(100), hours(1) / 60).parser())]
    pub rlqs_reassign_interval: Duration,
    /// Cap on open RLQS streams, all connections together [range: 1 to 1000000]
    #[arg(long, env = "RLS_RLQS_MAX_STREAMS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rlqs_max_streams: u32,
    /// Cap on buckets all open streams report together [range: 1 to 100000000]
    ///
    /// A bucket past a cap is counted but gets no assignment (Envoy keeps its
    /// no_assignment_behavior). Their bytes are capped by --rlqs-max-bucket-bytes too.
    #[arg(long, env = "RLS_RLQS_MAX_BUCKETS", default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    pub rlqs_max_buckets: u32,
    /// Bytes all RLQS buckets may hold: their ids, their state, their groups' counters [range: 1KiB to 1TiB]
    ///
    /// A bucket holds its id's bytes and about 1KiB besides (docs/rlqs.md, "Bounds"). Past
    /// it a new bucket is counted but gets no assignment. Default: 256MiB, or 1/16 of what
    /// --max-memory leaves, at most 256MiB.
    #[arg(long, env = "RLS_RLQS_MAX_BUCKET_BYTES", value_parser = ByteSizeRange::new(kib(1), gib(1024)).parser::<u64>())]
    pub rlqs_max_bucket_bytes: Option<u64>,
    /// Cap on the buckets of all streams that count on one counter [range: 1 to 1000000]
    ///
    /// Their Envoys share the counter's rate by demand; the split costs O(n log n) for n
    /// members, amortized over their reports. A bucket past it is counted but gets no
    /// assignment, as past the other caps.
    #[arg(long, env = "RLS_RLQS_MAX_GROUP_MEMBERS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rlqs_max_group_members: u32,
    /// Cap on buckets one stream reports [range: 1 to 100000000]
    #[arg(long, env = "RLS_RLQS_MAX_BUCKETS_PER_STREAM", default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    pub rlqs_max_buckets_per_stream: u32,
    /// Reports one stream may send per second, sustained, before it is ended [range: 1 to 1000000]
    ///
    /// Envoy sends one per reporting interval and one per new bucket; a burst of twice this
    /// many is allowed. The stream ends with RESOURCE_EXHAUSTED (Envoy opens a new one).
    #[arg(long, env = "RLS_RLQS_MAX_REPORTS_PER_SECOND", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rlqs_max_reports_per_second: u32,
}

/// `--rlqs-unmatched`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnmatchedArg {
    /// blanket_rule ALLOW_ALL (as RLS v3 answers OK for a descriptor without a rule)
    AllowAll,
    /// blanket_rule DENY_ALL
    DenyAll,
}
