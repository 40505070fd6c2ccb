//! The RLQS service's settings, from `serve`'s `--rlqs-*` flags.

use std::time::Duration;

use super::share::Strategy;

/// How the RLQS service answers and what it holds at most.
#[derive(Debug, Clone)]
pub struct QuotaSettings {
    /// The assignment of a bucket no rule counts.
    pub unmatched: Strategy,
    /// An assignment's time to live, whole seconds.
    pub assignment_ttl: Duration,
    /// A bucket reported without a request for this long is abandoned.
    pub abandon_after: Duration,
    /// How often a stream's shares are computed again.
    pub reassign_interval: Duration,
    pub max_streams: usize,
    pub max_buckets: usize,
    pub max_buckets_per_stream: usize,
    /// Bytes of all buckets and their groups.
    pub max_bucket_bytes: usize,
    /// Buckets counting on one counter.
    pub max_group_members: usize,
    pub max_reports_per_second: u32,
    /// No other process counts on these counters (no Redis, no global counters): a bucket
    /// alone on its counter here is alone in the fleet, and may be lent the whole room.
    pub sole_process: bool,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        Self {
            unmatched: Strategy::AllowAll,
            assignment_ttl: Duration::from_secs(10),
            abandon_after: Duration::from_secs(60),
            reassign_interval: Duration::from_secs(1),
            max_streams: 10_000,
            max_buckets: 200_000,
            max_buckets_per_stream: 20_000,
            max_bucket_bytes: 256 << 20,
            max_group_members: 10_000,
            max_reports_per_second: 1_000,
            sole_process: true,
        }
    }
}

impl QuotaSettings {
    /// From the flags (clap has checked their ranges), the bucket bytes of the memory plan and
    /// whether counts are shared with other processes.
    pub fn from_args(
        args: &crate::serve::args::QuotaArgs,
        max_bucket_bytes: u64,
        sole_process: bool,
    ) -> Self {
        use crate::serve::args::UnmatchedArg;
        Self {
            unmatched: match args.rlqs_unmatched {
                UnmatchedArg::AllowAll => Strategy::AllowAll,
                UnmatchedArg::DenyAll => Strategy::DenyAll,
            },
            // Envoy reads whole seconds only: a fraction would be dropped there.
            assignment_ttl: Duration::from_secs(args.rlqs_assignment_ttl.as_secs().max(1)),
            abandon_after: args.rlqs_abandon_after,
            reassign_interval: args.rlqs_reassign_interval,
            max_streams: args.rlqs_max_streams as usize,
            max_buckets: args.rlqs_max_buckets as usize,
            max_buckets_per_stream: args.rlqs_max_buckets_per_stream as usize,
            max_bucket_bytes: usize::try_from(max_bucket_bytes).unwrap_or(usize::MAX),
            max_group_members: args.rlqs_max_group_members as usize,
            max_reports_per_second: args.rlqs_max_reports_per_second,
            sole_process,
        }
    }
}
