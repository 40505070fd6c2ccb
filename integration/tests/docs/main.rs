//! The documentation, checked against the repository and the binary: links resolve, every
//! flag and variable it names exists, every limits config it shows loads, and the README's
//! quick start runs as written.
//!
//! What is checked: README.md, every Markdown file (docs/, the reports, ARCHITECTURE.md,
//! CHANGELOG.md), and the comments of `config/`, `envoy/`, `deploy/` and the Dockerfile,
//! which show commands too.

mod markdown;
mod names;
mod quick_start;

use std::path::{Path, PathBuf};

use gcounter_rls_integration as support;
use support::repo_root;

use markdown::{Block, anchors, code_blocks, link_targets, markdown_files, prose_lines, read};

/// The front door stays a front door: the rest belongs in `docs/`.
const README_MAX_LINES: usize = 250;

#[test]
fn readme_is_a_front_door() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; keep it at most {README_MAX_LINES} and move detail to docs/"
    );
}

#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().unwrap_or(Path::new(""));
        for (line, prose) in prose_lines(&text) {
            for target in link_targets(prose) {
                if let Some(problem) = link_problem(&file, dir, &text, &target) {
                    broken.push(format!("{}:{line}: ({target}) {problem}", file.display()));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that do not resolve:\n{}",
        broken.join("\n")
    );
}

fn link_problem(file: &Path, dir: &Path, text: &str, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let (resolved, linked_text) = if path.is_empty() {
        (file.to_path_buf(), Some(text.to_owned()))
    } else {
        if path.starts_with('/') {
            return Some("an absolute path: link relative to this file".into());
        }
        let resolved = normalize(&dir.join(path));
        if resolved.starts_with("..") {
            return Some("points outside the repository".into());
        }
        if !repo_root().join(&resolved).exists() {
            return Some(format!("{} does not exist", resolved.display()));
        }
        let linked = (resolved.extension().is_some_and(|e| e == "md")).then(|| read(&resolved));
        (resolved, linked)
    };
    match (anchor, linked_text) {
        (Some(anchor), Some(linked)) if !anchors(&linked).contains(anchor) => Some(format!(
            "{} has no heading whose anchor is #{anchor}",
            resolved.display()
        )),
        _ => None,
    }
}

/// `a/b/../c` → `a/c`, keeping leading `..` (outside the root).
fn normalize(path: &Path) -> PathBuf {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else {
                    parts.push("..".as_ref());
                }
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str()),
        }
    }
    parts.iter().collect()
}

#[test]
fn flags_named_in_docs_exist() {
    let problems = names::unknown_flags();
    assert!(
        problems.is_empty(),
        "flags the documentation names that gcounter-rls does not have (docs/cli.md lists \
         them all):\n{}",
        problems.join("\n")
    );
}

#[test]
fn variables_named_in_docs_exist() {
    let problems = names::unknown_variables();
    assert!(
        problems.is_empty(),
        "environment variables the documentation names that gcounter-rls neither reads nor \
         refuses:\n{}",
        problems.join("\n")
    );
}

/// A ```yaml block with a top-level `domain:` is a limits config a reader may copy: it must
/// load. One fenced as ```yaml refused shows what is refused, and must be.
#[test]
fn limits_examples_in_docs_pass_check_config() {
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        for block in code_blocks(&text) {
            let Some(expect_accepted) = limits_example(&block) else {
                continue;
            };
            let what = format!("the example at {}:{}", file.display(), block.line);
            let (_dir, path) = support::limits_file(&block.text);
            if expect_accepted {
                support::check_config::accepted(&path, &what);
            } else {
                support::check_config::refused(&path);
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "only {checked} limits examples found in the docs: is the fence detection broken?"
    );
}

/// `Some(true)` for a limits config to accept, `Some(false)` for one to refuse.
fn limits_example(block: &Block) -> Option<bool> {
    let mut words = block.info.split_whitespace();
    if words.next() != Some("yaml") {
        return None;
    }
    let refused = words.any(|w| w == "refused");
    let is_limits = block.text.lines().any(|l| l.starts_with("domain:"));
    (is_limits || refused).then_some(!refused)
}

/// The repository speaks to its users: no word about how it is developed (sessions,
/// tickets by number) and no path of a particular machine, in docs, code, tests or scripts.
/// An upstream project's issue is named by its repository and a number of four digits or
/// more, which this does not flag.
#[test]
fn no_development_process_words() {
    let mut files = Vec::new();
    markdown::walk_text_files(&mut files);
    // Built from pieces so that this file does not flag itself.
    let machine_paths = [["/wo", "rk/"].concat(), ["/tmp/ci", "-clone"].concat()];
    let numbered = [
        ["sess", "ion"].concat(),
        ["iss", "ue"].concat(),
        ["bre", "ak"].concat(),
    ];
    let mut found = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(repo_root().join(&file)) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let hit = machine_paths.iter().any(|p| lower.contains(p.as_str()))
                || numbered.iter().any(|word| small_number_after(&lower, word));
            if hit {
                found.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "lines that speak of how the project is developed, or of one machine's paths (say \
         why the code is as it is instead):\n{}",
        found.join("\n")
    );
}

/// `word N` or `words N` (or `word #N`) with N of one to three digits.
fn small_number_after(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        let rest = &line[at + word.len()..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        let Some(rest) = rest.strip_prefix(' ') else {
            return false;
        };
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        (1..=3).contains(&digits)
            && !rest[digits..].starts_with(|c: char| c.is_ascii_alphanumeric())
    })
}

#[test]
fn small_numbers_after_words_are_found() {
    // Another word than the flagged ones, so that this test does not flag itself.
    assert!(small_number_after("see ticket 12 for", "ticket"));
    assert!(small_number_after("(tickets 3 and 4)", "ticket"));
    assert!(small_number_after("ticket #16,", "ticket"));
    assert!(!small_number_after("envoy ticket 14299", "ticket"));
    assert!(!small_number_after("aticket 3", "ticket"));
    assert!(!small_number_after("ticket 3x", "ticket"));
}
