//! One log line when a backend is first reached, one when it is lost, one when it is reached
//! again: an operator reads from the log alone whether Redis or the database answered, without
//! a line per call. Repeated failures in between are the callers' throttled warnings.

use std::fmt::Display;
use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const REACHED: u8 = 1;
const LOST: u8 = 2;

/// Whether a backend answered: unknown until its first answer or outage.
#[derive(Debug)]
pub struct Reachability {
    /// The backend as the log names it (`Redis`, `the database (mysql)`).
    what: String,
    state: AtomicU8,
}

/// What changed, for the caller's tests and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    FirstReached,
    Lost,
    Regained,
    NotReached,
}

impl Reachability {
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            state: AtomicU8::new(UNKNOWN),
        }
    }

    /// The backend answered. Logs (at INFO) only a change: the first answer, or the first
    /// after it was lost. A load first: while reached, a call writes nothing shared.
    pub fn reached(&self) -> Option<Change> {
        if self.state.load(Ordering::Relaxed) == REACHED {
            return None;
        }
        let change = match self.state.swap(REACHED, Ordering::AcqRel) {
            UNKNOWN => Change::FirstReached,
            LOST => Change::Regained,
            _ => return None,
        };
        match change {
            Change::FirstReached => tracing::info!("{} reached", self.what),
            _ => tracing::info!("{} reached again", self.what),
        }
        Some(change)
    }

    /// The backend is out (its circuit opened, or its calls keep failing). Logs (at WARN)
    /// only a change: lost after it answered, or not reached since start.
    pub fn lost(&self, error: &dyn Display) -> Option<Change> {
        if self.state.load(Ordering::Relaxed) == LOST {
            return None;
        }
        let change = match self.state.swap(LOST, Ordering::AcqRel) {
            REACHED => Change::Lost,
            UNKNOWN => Change::NotReached,
            _ => return None,
        };
        match change {
            Change::Lost => {
                tracing::warn!(%error, "{} lost; decisions go on from local counts", self.what)
            }
            _ => {
                tracing::warn!(%error, "{} not reached yet; decisions go on from local counts", self.what)
            }
        }
        Some(change)
    }
}

#[cfg(test)]
mod tests;
