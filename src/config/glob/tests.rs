use super::*;

fn glob(pattern: &str) -> Glob {
    Glob::new(pattern).expect("pattern has a star")
}

#[test]
fn no_star_is_not_a_glob() {
    assert_eq!(Glob::new("plain"), None);
    assert_eq!(Glob::new(""), None);
}

/// Each pattern with the values it matches and those it does not.
const CASES: &[(&str, &[&str], &[&str])] = &[
    // A lone star matches everything.
    ("*", &["", "anything/at all"], &[]),
    // A trailing star is a prefix match.
    ("/foo/*", &["/foo/", "/foo/bar/baz"], &["/foo", "/bar/foo/"]),
    // A leading star is a suffix match.
    ("*.png", &[".png", "a/b.png"], &["a.png.txt"]),
    (
        "/api/*/users",
        &["/api/v1/users", "/api//users", "/api/v1/x/users"],
        &["/api/v1/users/1", "/api/users"],
    ),
    // The prefix and the suffix do not overlap.
    ("ab*ba", &["abba", "abxba"], &["aba"]),
    // Several stars match their pieces in order.
    ("a*b*c", &["abc", "a-b-c", "axxbyybzzc"], &["acb"]),
    ("**x**", &["x", "..x.."], &["y"]),
    ("*a*a*", &["aa"], &["a"]),
    // Multibyte values.
    ("é*ü", &["éü", "é—ü"], &["e—ü"]),
    ("*—*", &["a—b"], &[]),
];

#[test]
fn patterns_match_what_they_should_and_nothing_else() {
    for (pattern, matching, not_matching) in CASES {
        let g = glob(pattern);
        for value in *matching {
            assert!(g.matches(value), "{pattern} should match {value:?}");
        }
        for value in *not_matching {
            assert!(!g.matches(value), "{pattern} should not match {value:?}");
        }
    }
}
