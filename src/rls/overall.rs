//! The overall code of a response, from its descriptors' codes, as envoyproxy/ratelimit
//! decides it: any regular descriptor over its limit makes the request OVER_LIMIT; quota
//! descriptors (`quota_mode`) make it OVER_LIMIT only when every one of them is over.

/// How one descriptor takes part in the overall code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Unlimited: answered OK, takes no part (upstream skips it).
    Unlimited,
    /// A regular limit, or no limit at all.
    Regular { over: bool },
    /// A quota (the rule's `quota_mode`, or every descriptor with the global switch).
    Quota { over: bool },
}

/// Counts the descriptors of one request as they are decided.
#[derive(Debug, Default)]
pub struct Tally {
    regular_over: usize,
    quota: usize,
    quota_over: usize,
}

impl Tally {
    pub fn add(&mut self, role: Role) {
        match role {
            Role::Unlimited | Role::Regular { over: false } => {}
            Role::Regular { over: true } => self.regular_over += 1,
            Role::Quota { over } => {
                self.quota += 1;
                self.quota_over += usize::from(over);
            }
        }
    }

    /// OVER_LIMIT iff a regular descriptor is over, or there are quota descriptors and all
    /// of them are over.
    pub fn over_limit(&self) -> bool {
        self.regular_over > 0 || (self.quota > 0 && self.quota == self.quota_over)
    }
}

#[cfg(test)]
mod tests;
