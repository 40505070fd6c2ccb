//! One log line when a backend is first reached, one when it is lost, one when it is reached
//! again: an operator reads from the log alone whether Redis or the database answered, without
//! a line per call. Repeated failures in between are the callers' throttled warnings.

use std::fmt::Display;
use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const REACHED: u8 = 1;
const LOST: u8 = 2;
/// Failed before it ever answered.
const NEVER: u8 = 3;

/// Whether a backend answered: unknown until its first answer or outage.
#[derive(Debug)]
pub struct Reachability {
    /// The backend as the log names it (`Redis`, `the database (mysql)`).
    what: String,
    /// What losing it means, said with the loss.
    meanwhile: &'static str,
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
    /// `meanwhile`: what happens while it is lost (`decisions go on from local counts`).
    pub fn new(what: impl Into<String>, meanwhile: &'static str) -> Self {
        Self {
            what: what.into(),
            meanwhile,
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
            UNKNOWN | NEVER => Change::FirstReached,
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
        let change = match self.state.load(Ordering::Relaxed) {
            LOST | NEVER => return None,
            REACHED => match self.state.swap(LOST, Ordering::AcqRel) {
                REACHED => Change::Lost,
                _ => return None,
            },
            _ => match self.state.swap(NEVER, Ordering::AcqRel) {
                UNKNOWN => Change::NotReached,
                _ => return None,
            },
        };
        match change {
            Change::Lost => {
                tracing::warn!(%error, "{} lost; {}", self.what, self.meanwhile)
            }
            _ => {
                tracing::warn!(%error, "{} not reached yet; {}", self.what, self.meanwhile)
            }
        }
        Some(change)
    }
}

#[cfg(test)]
mod tests;
