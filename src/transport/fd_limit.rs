//! The process's open-files limit.

/// Raises the soft RLIMIT_NOFILE to the hard limit, as Go's runtime does at start (Go 1.19+)
/// and so envoyproxy/ratelimit: distributions default the soft limit to 1,024, below the
/// connection caps. Returns the soft limit now in force.
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}
