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
mod tests {
    use super::*;

    fn glob(pattern: &str) -> Glob {
        Glob::new(pattern).expect("pattern has a star")
    }

    #[test]
    fn no_star_is_not_a_glob() {
        assert_eq!(Glob::new("plain"), None);
        assert_eq!(Glob::new(""), None);
    }

    #[test]
    fn lone_star_matches_everything() {
        let g = glob("*");
        assert!(g.matches(""));
        assert!(g.matches("anything/at all"));
    }

    #[test]
    fn trailing_star_is_a_prefix_match() {
        let g = glob("/foo/*");
        assert!(g.matches("/foo/"));
        assert!(g.matches("/foo/bar/baz"));
        assert!(!g.matches("/foo"));
        assert!(!g.matches("/bar/foo/"));
    }

    #[test]
    fn leading_star_is_a_suffix_match() {
        let g = glob("*.png");
        assert!(g.matches(".png"));
        assert!(g.matches("a/b.png"));
        assert!(!g.matches("a.png.txt"));
    }

    #[test]
    fn middle_star() {
        let g = glob("/api/*/users");
        assert!(g.matches("/api/v1/users"));
        assert!(g.matches("/api//users"));
        assert!(g.matches("/api/v1/x/users"));
        assert!(!g.matches("/api/v1/users/1"));
        assert!(!g.matches("/api/users"));
    }

    #[test]
    fn prefix_and_suffix_do_not_overlap() {
        let g = glob("ab*ba");
        assert!(!g.matches("aba"));
        assert!(g.matches("abba"));
        assert!(g.matches("abxba"));
    }

    #[test]
    fn several_stars_match_pieces_in_order() {
        let g = glob("a*b*c");
        assert!(g.matches("abc"));
        assert!(g.matches("a-b-c"));
        assert!(g.matches("axxbyybzzc"));
        assert!(!g.matches("acb"));
        let g = glob("**x**");
        assert!(g.matches("x"));
        assert!(g.matches("..x.."));
        assert!(!g.matches("y"));
        let g = glob("*a*a*");
        assert!(g.matches("aa"));
        assert!(!g.matches("a"));
    }

    #[test]
    fn multibyte_values() {
        let g = glob("é*ü");
        assert!(g.matches("éü"));
        assert!(g.matches("é—ü"));
        assert!(!g.matches("e—ü"));
        assert!(glob("*—*").matches("a—b"));
    }
}
