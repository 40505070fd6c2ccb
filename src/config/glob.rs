//! `*` wildcards in descriptor values, split once at load time.

/// A value pattern with at least one `*`; `*` matches any run of characters,
/// including none. There is no escape: a literal `*` cannot be matched alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    prefix: Box<str>,
    /// Literal pieces between stars, empty pieces (from `**`) dropped.
    middle: Box<[Box<str>]>,
    suffix: Box<str>,
}

impl Glob {
    /// Compiles `pattern`, or `None` if it has no `*` (an exact value).
    pub(crate) fn new(pattern: &str) -> Option<Glob> {
        let mut pieces = pattern.split('*');
        let prefix = pieces.next().unwrap_or_default();
        let mut rest: Vec<&str> = pieces.collect();
        let suffix = rest.pop()?;
        Some(Glob {
            prefix: prefix.into(),
            middle: rest
                .into_iter()
                .filter(|piece| !piece.is_empty())
                .map(Box::from)
                .collect(),
            suffix: suffix.into(),
        })
    }

    pub(crate) fn matches(&self, value: &str) -> bool {
        // Stripping the prefix before the suffix keeps them from overlapping.
        let Some(rest) = value.strip_prefix(&*self.prefix) else {
            return false;
        };
        let Some(mut rest) = rest.strip_suffix(&*self.suffix) else {
            return false;
        };
        // Leftmost match of each piece is optimal for `*`-only globs.
        for piece in &self.middle {
            match rest.find(&**piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests;
