//! Flags and environment variables named in the documentation, against what the binary has
//! (`gcounter_rls::cli`) and the upstream variables it reads or refuses.

use std::collections::BTreeSet;
use std::path::Path;

use gcounter_rls_integration::repo_root;

use super::markdown::{code_blocks, code_spans, documented_files, prose_lines, read};

/// How a line runs gcounter-rls: every flag after one of these is the service's.
const INVOCATIONS: &[&str] = &[
    "gcounter-rls ",
    "cargo run --release -- ",
    "cargo run -- ",
    "/bin/ratelimit ",
];

/// Flags of the other programs the docs show (cargo, curl, Envoy, kubectl, istioctl, h2load,
/// valgrind, perf, redis-server, docker): allowed in prose and in their own commands.
const OTHER_TOOLS_FLAGS: &[&str] = &[
    "--release",
    "--workspace",
    "--locked",
    "--all",
    "--check",
    "--all-targets",
    "--bin",
    "--package",
    "--features",
    "--no-run",
    "--bench",
    "--test",
    "--lib",
    "--nocapture",
    "--no-capture",
    "--warm-up-time",
    "--measurement-time",
    "--help",
    "--version",
    "--data",
    "--data-binary",
    "--mode",
    "--concurrency",
    "--disable-hot-restart",
    "--base-id",
    "--config-path",
    "--service-cluster",
    "--service-node",
    "--log-level",
    "--save",
    "--appendonly",
    "--port",
    "--from",
    "--mount",
    "--target",
    "--tag",
    "--name",
    "--namespace",
    "--type",
    "--image",
    "--cluster",
    "--profile",
    "--threads",
    "--header",
    "--requests",
    "--clients",
    "--max-concurrent-streams",
    "--connection-window-bits",
    "--window-bits",
    "--h1",
    "--dry-run",
    "--output",
    "--show-output",
    "--no-fail-fast",
    "--skip",
    "--cpu",
    "--bins",
    "--example",
    "--tool",
    "--toggle-collect",
    "--time",
    "--inclusive",
    "--set",
    "--lib",
    "--build-arg",
    "--short",
    // podman (the image's build and the release), and scripts/release.sh.
    "--pull",
    "--format",
    "--rm",
    "--stand-in-bases",
    // objcopy (the Dockerfile's split of the debug info).
    "--only-keep-debug",
    "--strip-all",
    "--add-gnu-debuglink",
];

/// Environment variables of other programs, and upper-case words of the protocols (codes,
/// units, Envoy enums) that look like variables.
const OTHER_NAMES: &[&str] = &[
    "PATH",
    "ENVOY_BIN",
    "CARGO_TARGET_DIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "CI",
    "HOME",
    "OVER_LIMIT",
    "INVALID_ARGUMENT",
    "RESOURCE_EXHAUSTED",
    "DEADLINE_EXCEEDED",
    "NOT_SERVING",
    "SERVICE_UNKNOWN",
    "UNAVAILABLE",
    "UNIMPLEMENTED",
    "UNKNOWN",
    "SERVING",
    "DRAFT_VERSION_03",
    "OFF",
    "ALLOW_ALL",
    "DENY_ALL",
    "GRPC_XDS_SOTW",
    "FILE",
    "SINGLE",
    "WAIT",
    "CREATE",
    "ERROR",
    "NOTIFY",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "INTERNAL",
    "CANCELLED",
    "FAILED_PRECONDITION",
    "OUT_OF_RANGE",
    "ALREADY_EXISTS",
    "NOT_FOUND",
    "ABORTED",
    "DATA_LOSS",
    "RLIMIT_NOFILE",
    "SETTINGS_MAX_CONCURRENT_STREAMS",
    "SETTINGS_INITIAL_WINDOW_SIZE",
    "SETTINGS_MAX_FRAME_SIZE",
    "SETTINGS_MAX_HEADER_LIST_SIZE",
    "GOAWAY",
    "RST_STREAM",
    "NO_ERROR",
    "ENHANCE_YOUR_CALM",
    "SO_REUSEPORT",
    "TCP_NODELAY",
    "O_NONBLOCK",
    "MALLOC_ARENA_MAX",
    "REFUSED_STREAM",
    "PROTOCOL_ERROR",
    "FLOW_CONTROL_ERROR",
    "UPDATE_CLI_REFERENCE",
    "CLOCK_THREAD_CPUTIME_ID",
    // Set by Envoy Gateway on its Deployment; envoyproxy/ratelimit does not read it either.
    "GRPC_SERVER_TLS_CA_CERT",
    // Read by build.rs when the binary is built, not by the binary.
    "RLS_BUILD_COMMIT",
    // The Dockerfile's build arguments: its two bases.
    "BUILDER_IMAGE",
    "RUNTIME_IMAGE",
    // The benches' and fuzz targets' own switches.
    "RLS_PROFILE",
    "RLS_PROFILE_CALLS",
    "WARM_DECISIONS",
    "LONG_TURN_MS",
    "FUZZ_CASES",
    "FUZZ_WRITE_CORPUS",
    // The chaos checker's planted defects, read by debug builds only (crates/engine/src/plant.rs).
    "GCOUNTER_PLANT",
];

/// Every `--flag` the documentation names that no command has, as `file:line: --flag`.
pub fn unknown_flags() -> Vec<String> {
    let ours = gcounter_rls::cli::all_long_flags();
    let mut anyone: BTreeSet<String> = ours.clone();
    anyone.extend(OTHER_TOOLS_FLAGS.iter().map(|f| (*f).to_owned()));
    anyone.extend(script_flags());
    anyone.extend(crate_tool_flags());

    let mut problems = Vec::new();
    for file in documented_files() {
        let text = read(&file);
        for (number, line) in text.lines().enumerate() {
            let invoked = invocation_end(line);
            let (strict_from, checked) = match invoked {
                Some(after) => (after, true),
                None => (line.len(), false),
            };
            for (at, flag) in flags_in(line) {
                let known = if checked && at >= strict_from {
                    ours.contains(&flag)
                } else {
                    anyone.contains(&flag)
                };
                if !known {
                    problems.push(format!("{}:{}: {flag}", file.display(), number + 1));
                }
            }
        }
    }
    problems
}

/// Where a line's command line of gcounter-rls starts (after the program), if it runs it:
/// `cargo test -p gcounter-rls --lib` names the package, it does not run the binary.
fn invocation_end(line: &str) -> Option<usize> {
    INVOCATIONS.iter().find_map(|invocation| {
        line.match_indices(invocation)
            .find(|(at, _)| {
                let before = line[..*at].trim_end();
                !(before.ends_with(" -p")
                    || before.ends_with("--package")
                    || before.ends_with("--bin"))
            })
            .map(|(at, _)| at + invocation.len())
    })
}

/// `--name` tokens of a line with their byte offsets (`--name=value` counts as `--name`).
fn flags_in(line: &str) -> Vec<(usize, String)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(found) = line[i..].find("--") {
        let at = i + found;
        let before_ok = at == 0 || !bytes[at - 1].is_ascii_alphanumeric() && bytes[at - 1] != b'-';
        let name: String = line[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if before_ok && name.len() > 1 && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push((at, format!("--{}", name.trim_end_matches('-'))));
        }
        i = at + 2 + name.len();
    }
    out
}

/// The flags of `scripts/*.py` (argparse).
fn script_flags() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(repo_root().join("scripts")) else {
        return out;
    };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for piece in text.split("add_argument(").skip(1) {
            let Some(rest) = piece.trim_start().strip_prefix('"') else {
                continue;
            };
            if let Some(end) = rest.find('"') {
                out.insert(rest[..end].to_owned());
            }
        }
    }
    out
}

/// The flags of the other binaries of the workspace (the load generator, the no-op server,
/// the abuse client, the simulator): clap's `#[arg(long…)]` fields.
fn crate_tool_flags() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut files = Vec::new();
    collect_rs(&repo_root().join("crates"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(attr) = line.trim().strip_prefix("#[arg(long") else {
                continue;
            };
            if let Some(explicit) = attr.trim_start().strip_prefix("= \"") {
                if let Some(end) = explicit.find('"') {
                    out.insert(format!("--{}", &explicit[..end]));
                }
                continue;
            }
            let field = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.starts_with("#[") && !l.starts_with("//"));
            if let Some(name) = field.and_then(|l| l.trim_start_matches("pub ").split(':').next()) {
                out.insert(format!("--{}", name.trim().replace('_', "-")));
            }
        }
    }
    out
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every environment variable the documentation names that the binary neither reads nor
/// refuses, as `file:line: NAME`.
pub fn unknown_variables() -> Vec<String> {
    let mut known = gcounter_rls::cli::all_env_variables();
    known.extend(gcounter_rls::upstream_env::known_names().map(str::to_owned));
    let other: BTreeSet<&str> = OTHER_NAMES.iter().copied().collect();
    let is_known = |name: &str| match name.strip_suffix('*') {
        Some(prefix) => known.iter().any(|k| k.starts_with(prefix)),
        None => known.contains(name) || other.contains(name),
    };

    let mut problems = Vec::new();
    for file in documented_files() {
        let text = read(&file);
        for (number, name) in named_variables(&file, &text) {
            if !is_known(&name) {
                problems.push(format!("{}:{number}: {name}", file.display()));
            }
        }
    }
    problems
}

/// Where a text names a variable: any `RLS_…`; in prose, a code span that is a variable or
/// starts `NAME=`; in code, `NAME=` assignments; in manifests, `name: NAME`.
fn named_variables(file: &Path, text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for word in words(line) {
            if word.starts_with("RLS_") {
                out.push((number + 1, word.to_owned()));
            }
        }
        let trimmed = line.trim();
        if let Some(name) = trimmed
            .strip_prefix("- name: ")
            .or(trimmed.strip_prefix("name: "))
            .map(str::trim)
            && looks_like_variable(name)
        {
            out.push((number + 1, name.to_owned()));
        }
    }
    let is_markdown = file.extension().is_some_and(|e| e == "md");
    if is_markdown {
        for (number, line) in prose_lines(text) {
            for span in code_spans(line) {
                let name = span.split('=').next().unwrap_or("").trim();
                if looks_like_variable(name) && !name.starts_with("RLS_") {
                    out.push((number, name.to_owned()));
                }
            }
        }
        for block in code_blocks(text) {
            for (offset, line) in block.text.lines().enumerate() {
                for word in line.split_whitespace() {
                    if let Some((name, _)) = word.split_once('=')
                        && looks_like_variable(name)
                        && !name.starts_with("RLS_")
                    {
                        out.push((block.line + 1 + offset, name.to_owned()));
                    }
                }
            }
        }
    }
    out
}

/// Upper-case letters, digits and `_`, with at least one `_` (or a trailing `*`).
fn looks_like_variable(name: &str) -> bool {
    let core = name.strip_suffix('*').unwrap_or(name);
    core.len() > 2
        && core.starts_with(|c: char| c.is_ascii_uppercase())
        && core
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && (core.contains('_') || name.ends_with('*'))
}

fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '*'))
        .filter(|w| !w.is_empty())
}

#[test]
fn flags_are_found_with_their_offsets() {
    let got = flags_in("run `--grpc-addr` and --max-cells=5 not x--y or -- alone");
    let names: Vec<&str> = got.iter().map(|(_, f)| f.as_str()).collect();
    assert_eq!(names, ["--grpc-addr", "--max-cells"]);
}

#[test]
fn a_package_name_is_not_an_invocation() {
    assert_eq!(invocation_end("cargo test -p gcounter-rls --lib"), None);
    assert_eq!(invocation_end("run `gcounter-rls serve --x`"), Some(18));
}

#[test]
fn variables_look_like_variables() {
    assert!(looks_like_variable("SHADOW_MODE"));
    assert!(looks_like_variable("MEMCACHE_*"));
    assert!(!looks_like_variable("OK"));
    assert!(!looks_like_variable("Shadow_Mode"));
}
