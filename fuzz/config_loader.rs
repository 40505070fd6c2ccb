//! Fuzzing the config loader: YAML text → parse → validate → compile → match.
//!
//! Property-based (proptest; the stable toolchain rules libFuzzer out). Seeds are every limits
//! file the repository ships (`config/`, `config/upstream-examples/`) and the hostile shapes in
//! `fuzz/corpus/config/`; each case mutates one seed line by line (drop, repeat, swap,
//! re-indent, replace a token with a nasty one) and byte by byte, then loads it. A case fails
//! on a panic, on an error that does not name the file, or on a loaded config that cannot
//! answer a lookup. Failures are kept in `fuzz/regressions/` and replayed first.
//!
//! Runs in the README's test command with a bounded case count; `FUZZ_CASES=100000` for a
//! longer run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a test: a panic is how it reports a broken set-up"
)]

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};

const FILE: &str = "fuzz.yaml";

/// Cases per run in the README's test command (about 10 s in a debug build).
const DEFAULT_CASES: u32 = 300;

/// Tokens that have broken YAML loaders before: anchors and aliases, merge keys, tags,
/// flow openers, odd numbers and units, control characters, deep nesting.
const TOKENS: &[&str] = &[
    "*",
    "**",
    "&a",
    "*a",
    "<<: *a",
    "!!binary",
    "!custom",
    "{",
    "}",
    "[",
    "]",
    "- ",
    ": ",
    "? ",
    "---",
    "...",
    "~",
    "null",
    "-1",
    "0",
    "4294967296",
    "1e400",
    "0x10",
    ".inf",
    "unit: fortnight",
    "unit: SECOND",
    "unlimited: true",
    "requests_per_unit: 0",
    "replaces: [{name: x}]",
    "name: x",
    "shadow_mode: yes",
    "detailed_metric: true",
    "unit_multiplier: 0",
    "value: ''",
    "key: ''",
    "\t",
    "\u{0}",
    "\u{feff}",
    "\u{202e}",
    "#",
    "|",
    ">",
    "'",
    "\"",
    "\\",
    "%YAML 1.2",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
];

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn runner() -> TestRunner {
    let regressions =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/config_loader.txt");
    let regressions: &'static str = Box::leak(regressions.display().to_string().into_boxed_str());
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    })
}

/// Every `*.yaml` seed: the repository's example configs and the corpus of hostile shapes.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths: Vec<PathBuf> = ["config", "config/upstream-examples", "fuzz/corpus/config"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(root.join(dir)).ok())
        .flat_map(|entries| entries.filter_map(Result::ok).map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect()
}

#[derive(Debug, Clone)]
enum Edit {
    DropLine(usize),
    RepeatLine(usize, usize),
    SwapLines(usize, usize),
    Indent(usize, usize),
    Dedent(usize),
    Token(usize, usize, usize),
    Byte(usize, u8),
}

impl Edit {
    fn apply(&self, lines: &mut Vec<String>) {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let n = lines.len();
        match *self {
            Self::DropLine(i) => {
                lines.remove(i % n);
            }
            Self::RepeatLine(i, times) => {
                let line = lines[i % n].clone();
                for _ in 0..times {
                    lines.insert(i % n, line.clone());
                }
            }
            Self::SwapLines(i, j) => lines.swap(i % n, j % n),
            Self::Indent(i, spaces) => lines[i % n].insert_str(0, &" ".repeat(spaces)),
            Self::Dedent(i) => {
                let line = &mut lines[i % n];
                let trimmed = line.trim_start().to_owned();
                *line = trimmed;
            }
            Self::Token(i, at, token) => {
                let line = &mut lines[i % n];
                let mut at = at % (line.len() + 1);
                while !line.is_char_boundary(at) {
                    at -= 1;
                }
                line.insert_str(at, TOKENS[token % TOKENS.len()]);
            }
            Self::Byte(i, byte) => {
                let line = &mut lines[i % n];
                let mut bytes = std::mem::take(line).into_bytes();
                let at = i % (bytes.len() + 1);
                bytes.insert(at, byte);
                *line = String::from_utf8_lossy(&bytes).into_owned();
            }
        }
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        1 => any::<usize>().prop_map(Edit::DropLine),
        1 => (any::<usize>(), 1usize..50).prop_map(|(i, t)| Edit::RepeatLine(i, t)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Edit::SwapLines(i, j)),
        1 => (any::<usize>(), 1usize..9).prop_map(|(i, s)| Edit::Indent(i, s)),
        1 => any::<usize>().prop_map(Edit::Dedent),
        3 => (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(i, a, t)| Edit::Token(i, a, t)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Byte(i, b)),
    ]
}

/// What every load must satisfy.
fn check_load(text: &str) -> Result<(), TestCaseError> {
    match gcounter_rls::config::load_str(FILE, text) {
        Ok(config) => {
            // A loaded config answers lookups and renders (`/rlconfig`) without panicking.
            for domain in config.domains() {
                let _ = domain.find([("key1", "value1"), ("path", "/api/x")].into_iter());
                let _ = domain.find([("remote_address", "10.0.0.1")].into_iter());
            }
            let _ = config.dump();
        }
        Err(errors) => {
            prop_assert!(!errors.is_empty());
            let lines = text.lines().count() + 1;
            for error in &errors {
                prop_assert_eq!(
                    &error.file,
                    FILE,
                    "an error does not name the file: {}",
                    error
                );
                prop_assert!(
                    !error.problem.is_empty(),
                    "an error without a problem: {}",
                    error
                );
                prop_assert!(
                    error.line.is_none_or(|line| line <= lines),
                    "an error names line {:?} of a {}-line file: {}",
                    error.line,
                    lines,
                    error
                );
                prop_assert!(
                    !error.to_string().contains('\n'),
                    "an error spans lines: {}",
                    error
                );
            }
        }
    }
    Ok(())
}

#[test]
fn mutated_configs_load_or_fail_naming_the_file() {
    let seeds = seeds();
    assert!(
        seeds.len() >= 15,
        "the config seeds (config/, config/upstream-examples/, fuzz/corpus/config/) are \
         missing: {} found",
        seeds.len()
    );
    let result = runner().run(
        &(0..seeds.len(), proptest::collection::vec(edit(), 1..8)),
        |(seed, edits)| {
            let mut lines: Vec<String> = seeds
                .get(seed)
                .map(|s| s.lines().map(str::to_owned).collect())
                .unwrap_or_default();
            for edit in &edits {
                edit.apply(&mut lines);
            }
            check_load(&lines.join("\n"))
        },
    );
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// Every seed as it is: the shipped configs load; the hostile corpus fails cleanly.
#[test]
fn every_seed_loads_or_fails_naming_the_file() {
    for seed in seeds() {
        if let Err(failure) = check_load(&seed) {
            panic!("{failure}\n--- seed ---\n{seed}");
        }
    }
}
