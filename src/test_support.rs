//! Helpers the unit tests of several modules share.

/// What clap says when it refuses `argv` (empty when it accepts it).
pub(crate) fn clap_refusal<P: clap::Parser>(argv: &[&str]) -> String {
    P::try_parse_from(argv)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}
