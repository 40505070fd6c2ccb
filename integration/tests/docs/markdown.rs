//! The documents a user reads, and the pieces of them the tests check: links, fenced code
//! blocks, inline code spans and headings' anchors.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gcounter_rls_integration::repo_root;

/// Every Markdown file of the repository that a user or a maintainer reads (the build and
/// tool directories and the fuzz corpora excluded), relative to the root.
pub fn markdown_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(repo_root(), Path::new(""), &mut files, &|p| {
        p.extension().is_some_and(|e| e == "md")
    });
    files.sort();
    files
}

/// The files whose comments show commands and flags: the guides, the README, and the
/// examples' and manifests' headers.
pub fn documented_files() -> Vec<PathBuf> {
    let mut files = markdown_files();
    for dir in ["config", "envoy", "deploy"] {
        walk(&repo_root().join(dir), Path::new(dir), &mut files, &|p| {
            p.extension().is_some_and(|e| e == "yaml" || e == "yml")
        });
    }
    files.push(PathBuf::from("Dockerfile"));
    files
}

const SKIPPED_DIRS: &[&str] = &["target", ".tools", ".git", "corpus", "artifacts", "dist"];

fn walk(dir: &Path, relative: &Path, out: &mut Vec<PathBuf>, keep: &dyn Fn(&Path) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let path = entry.path();
        let rel = relative.join(&name);
        if path.is_dir() {
            if !SKIPPED_DIRS.iter().any(|s| name == *s) {
                walk(&path, &rel, out, keep);
            }
        } else if keep(&rel) {
            out.push(rel);
        }
    }
}

pub fn read(relative: &Path) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A fenced code block: its info string (`yaml`, `sh`, `yaml refused`), its text, the line
/// its fence opens on (1-based), and the HTML comment right above it, if any
/// (`<!-- quick-start: json -->` marks a block a test runs).
#[derive(Debug, Clone)]
pub struct Block {
    pub info: String,
    pub text: String,
    pub line: usize,
    pub marker: Option<String>,
}

pub fn code_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, Option<String>, String)> = None;
    let mut previous: Option<&str> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed.starts_with("```") => {
                let marker = previous
                    .map(str::trim)
                    .and_then(|p| p.strip_prefix("<!--"))
                    .and_then(|p| p.strip_suffix("-->"))
                    .map(|p| p.trim().to_owned());
                open = Some((
                    trimmed.trim_start_matches('`').trim().to_owned(),
                    index + 1,
                    marker,
                    String::new(),
                ));
            }
            None => {}
            Some(_) if trimmed.starts_with("```") => {
                if let Some((info, line, marker, text)) = open.take() {
                    blocks.push(Block {
                        info,
                        text,
                        line,
                        marker,
                    });
                }
            }
            Some((_, _, _, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
        previous = Some(line);
    }
    blocks
}

/// The text outside fenced code blocks, line by line (1-based line numbers).
pub fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((index + 1, line));
        }
    }
    out
}

/// Inline code spans (`` `like this` ``) of one line of prose.
pub fn code_spans(line: &str) -> Vec<&str> {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s)
        .collect()
}

/// Link targets of one line of prose: `[text](target)` (images too).
pub fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_owned());
        rest = &after[end..];
    }
    out
}

/// The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces
/// as hyphens, repeated ones numbered.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let title = heading.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 1;
        while seen.contains(&candidate) {
            candidate = format!("{slug}-{n}");
            n += 1;
        }
        seen.insert(candidate);
    }
    seen
}

#[test]
fn anchors_follow_githubs_rule() {
    let text = "# A title\n## `serve` flags\n## Limits & hardening\n## A title\n```\n# not a heading\n```\n";
    let got = anchors(text);
    let want: BTreeSet<String> = ["a-title", "serve-flags", "limits--hardening", "a-title-1"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn blocks_carry_their_marker() {
    let text = "<!-- quick-start: json -->\n```sh\necho hi\n```\n```yaml refused\na: b\n```\n";
    let blocks = code_blocks(text);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].marker.as_deref(), Some("quick-start: json"));
    assert_eq!(blocks[0].text, "echo hi\n");
    assert_eq!(blocks[1].info, "yaml refused");
    assert_eq!(blocks[1].marker, None);
}

/// Every text file of the repository a reader may open: sources, docs, scripts, configs.
pub fn walk_text_files(out: &mut Vec<PathBuf>) {
    const TEXT: &[&str] = &[
        "rs", "md", "py", "sh", "yaml", "yml", "toml", "json", "txt", "proto", "sql",
    ];
    walk(repo_root(), Path::new(""), out, &|p| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| TEXT.contains(&e))
            || p.file_name()
                .is_some_and(|n| n == "Dockerfile" || n == "run")
    });
}
