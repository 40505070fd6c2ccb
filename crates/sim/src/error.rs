//! What can stop a simulation before its report: the binary reports it with the scenario's
//! name, the library never panics on it.

/// A scenario that cannot run to its report.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The virtual clock needs a Tokio runtime of its own.
    #[error("cannot start the current-thread runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// An in-process origin names its processes with 16 bits.
    #[error("region {region} has {count} processes; at most 65,535 per region")]
    TooManyProcesses { region: usize, count: usize },
}
