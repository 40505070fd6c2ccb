//! The global counters: per-region G-Counters in a SQL table, converging regions.

use std::time::Duration;

use crate::duration_arg::{DurationRange, hours, millis};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = super::GLOBAL)]
pub struct GlobalArgs {
    /// This process's region: the owner of its components in the global counters
    ///
    /// 1 to 48 bytes. Required with --database-url; `local` otherwise.
    #[arg(long, env = "RLS_REGION")]
    pub region: Option<String>,
    /// A database URL (`mysql://`, `postgres://`, `sqlite:`): turns the global counters on
    #[arg(long, env = "RLS_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Apply the database migrations at start-up (else run `gcounter-rls migrate`)
    #[arg(long, env = "RLS_MIGRATE")]
    pub migrate: bool,
    /// How often this region's components are written to the global table [range: 100ms to 24h]
    ///
    /// ±20 % jitter.
    #[arg(long, env = "RLS_GLOBAL_FLUSH_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(24)).parser())]
    pub global_flush_interval: Duration,
    /// How often other regions' sums are read from the global table [range: 100ms to 24h]
    ///
    /// ±20 % jitter.
    #[arg(long, env = "RLS_GLOBAL_SYNC_INTERVAL", default_value = "10s", value_parser = DurationRange::new(millis(100), hours(24)).parser())]
    pub global_sync_interval: Duration,
    /// A cell is published once its count reaches this fraction of its limit [range: 0 to 1]
    ///
    /// With R regions a limit can be exceeded by up to R × this fraction of it before the
    /// regions hear of each other. With the fast cadence on (--global-onset-fraction above 0),
    /// a cell another region counts is published from its first hit.
    #[arg(long, env = "RLS_PUBLISH_FLOOR", default_value_t = gcounter_engine::global::DEFAULT_PUBLISH_FLOOR)]
    pub publish_floor: f64,
    /// At most this many times as often flush and sync run on contended limits [range: 1 to 100]
    ///
    /// While limits another region also counts are offered far over their limit here (see
    /// --global-contended-overload). 1: never faster; never below 100 ms.
    #[arg(long, env = "RLS_GLOBAL_CONTENDED_SPEEDUP", default_value_t = gcounter_engine::global::DEFAULT_CONTENDED_SPEEDUP, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub global_contended_speedup: u32,
    /// Speed up from this many denials per admission on shared limits [range: 0 to 1000]
    ///
    /// Measured over the last ten of the longer of the two intervals (between five and ten
    /// of them). 2 means offered about 3× the limit. The speedup is that ratio rounded down,
    /// up to --global-contended-speedup. Per cell (over about a second, from four denials
    /// on), the same ratio holds a contended cell at the fast cadence (--global-onset-interval).
    #[arg(long, env = "RLS_GLOBAL_CONTENDED_OVERLOAD", default_value_t = gcounter_engine::global::DEFAULT_CONTENDED_OVERLOAD)]
    pub global_contended_overload: f64,
    /// Publish and sync a cell fast once it grows by this share of its limit in 1 s [range: 0 to 1]
    ///
    /// Fast: every --global-onset-interval, with no publish floor. The growth must also reach
    /// --global-onset-min-hits. Bounds the window a surge starts in when it starts in every
    /// region at once, before any region denies. The same fast cadence holds a cell another
    /// region counts while this process denies it at least --global-contended-overload times
    /// per admission. 0: neither (the normal and overload cadences only).
    #[arg(long, env = "RLS_GLOBAL_ONSET_FRACTION", default_value_t = gcounter_engine::global::DEFAULT_ONSET_FRACTION)]
    pub global_onset_fraction: f64,
    /// The fewest hits within a second that make a cell's onset, whatever its limit [range: 1 to 1000000]
    #[arg(long, env = "RLS_GLOBAL_ONSET_MIN_HITS", default_value_t = gcounter_engine::global::DEFAULT_ONSET_MIN_HITS, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub global_onset_min_hits: u64,
    /// How often cells at their onset, and contended cells, are published and synced [range: 10ms to 10s]
    ///
    /// While their count keeps growing so, or their overload lasts (two seconds after the
    /// last time); a cell no other region counts leaves a second after its onset, at once if
    /// only its region counted the previous window.
    #[arg(long, env = "RLS_GLOBAL_ONSET_INTERVAL", default_value = "100ms", value_parser = DurationRange::new(millis(10), millis(10_000)).parser())]
    pub global_onset_interval: Duration,
    /// Tick this many times as often while a shared cell at its onset nears its limit [range: 1 to 100]
    ///
    /// Urgent: at the rate its count grew since its onset, the cell would reach its limit
    /// within a second. The ticks then come every --global-onset-interval ÷ this, never below
    /// 10 ms. 1: never faster than --global-onset-interval.
    #[arg(long, env = "RLS_GLOBAL_ONSET_URGENT_DIVISOR", default_value_t = gcounter_engine::global::DEFAULT_ONSET_URGENT_DIVISOR, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub global_onset_urgent_divisor: u32,
    /// How far before the previous sync an incremental sync starts reading [range: 1ms to 10s]
    ///
    /// At least this; twice this process's slowest upsert of the last minute or two when
    /// that is more. A row whose upsert commits later than the overlap after its statement
    /// began is read when it changes again or by the next full sync (one a minute); every row
    /// changed within it is read again by the next sync. Longer: fewer rows missed on a slow
    /// database, more rows read at a hot key.
    #[arg(long, env = "RLS_GLOBAL_SYNC_OVERLAP", default_value = "50ms", value_parser = DurationRange::new(millis(1), millis(10_000)).parser())]
    pub global_sync_overlap: Duration,
    /// Bound on one global flush, sync or cleanup [range: 1ms to 1h]
    #[arg(long, env = "RLS_GLOBAL_TIMEOUT", default_value = "5s", value_parser = DurationRange::new(millis(1), hours(1)).parser())]
    pub global_timeout: Duration,
    /// Bound on one take of `never_above` rights from the database [range: 1ms to 1m]
    ///
    /// A decision that needs a right waits for its take: past this it spends only what its
    /// process holds (refused when nothing), and no take is tried for a second.
    #[arg(long, env = "RLS_GLOBAL_RIGHTS_TIMEOUT", default_value = "500ms", value_parser = DurationRange::new(millis(1), millis(60_000)).parser())]
    pub global_rights_timeout: Duration,
    /// Delete expired global rows this often from `serve` (off unless set) [range: 1s to 720h]
    ///
    /// Off: run `gcounter-rls cleanup` instead.
    #[arg(long, env = "RLS_GLOBAL_CLEANUP_INTERVAL", value_parser = DurationRange::new(millis(1_000), hours(24 * 30)).parser())]
    pub global_cleanup_interval: Option<Duration>,
}
