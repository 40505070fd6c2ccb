//! The README's quick start, run as written against the real binary and a real Envoy: the
//! blocks marked `<!-- quick-start: … -->`, with only the ports changed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gcounter_rls_integration as support;
use support::example::Stack;
use support::{Example, Service, repo_path};

use super::markdown::{Block, code_blocks, read};

/// The quick start's limits: a minute per window; its loops take well under a second.
const WINDOW: Duration = Duration::from_secs(60);
const WORK: Duration = Duration::from_secs(10);

/// The quick start answers as printed with `serve`'s sliding windows and with upstream's
/// semantics (what the no-argument start from upstream's variables runs): inside one window
/// the two agree, request by request.
const MODES: [&[&str]; 2] = [&[], &["--windows", "fixed", "--count-denied"]];

fn readme_blocks() -> Vec<Block> {
    code_blocks(&read(Path::new("README.md")))
}

fn marked(marker: &str) -> Block {
    readme_blocks()
        .into_iter()
        .find(|b| b.marker.as_deref() == Some(marker))
        .unwrap_or_else(|| panic!("README.md has no block marked <!-- {marker} -->"))
}

/// The block right after `block` (the commands a reader runs next).
fn next_block(block: &Block) -> Block {
    readme_blocks()
        .into_iter()
        .find(|b| b.line > block.line)
        .unwrap_or_else(|| panic!("README.md has no block after line {}", block.line))
}

/// A block's commands (continuation lines joined, comments dropped), and the output its
/// last `# …` comment line promises, as whitespace-separated words.
fn commands_and_promise(block: &Block) -> (String, Option<Vec<String>>) {
    let mut script = String::new();
    let mut promise = None;
    for line in block.text.lines() {
        if let Some(comment) = line.trim_start().strip_prefix("# ") {
            promise = Some(comment.split_whitespace().map(str::to_owned).collect());
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    (script, promise)
}

/// Runs `script` with bash from the repository root, `cargo run --release --` standing for
/// the binary under test; its stdout, or a panic with its output.
fn run(script: &str) -> String {
    let binary = support::binary();
    let script = script
        .replace("cargo run --release -- ", &format!("{} ", binary.display()))
        .replace("cargo run -- ", &format!("{} ", binary.display()));
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(support::repo_root())
        .output()
        .expect("run bash");
    assert!(
        output.status.success(),
        "the README's commands failed:\n{script}\n{}",
        support::process::describe(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_service_answers_as_the_quick_start_shows() {
    let serve = readme_blocks()
        .into_iter()
        .find(|b| b.text.trim() == "cargo run --release -- serve --config config/example.yaml")
        .expect("README.md shows `cargo run --release -- serve --config config/example.yaml` alone in a block");
    assert_eq!(serve.info, "sh");

    let json = marked("quick-start: json");
    let (script, promise) = commands_and_promise(&json);
    let promise = promise.expect("the JSON block ends with the output it promises");
    for mode in MODES {
        let service = Service::start(repo_path("config/example.yaml"), mode);
        let http = service.http_addr.to_string();
        support::avoid_window_boundary(WINDOW, WORK);
        let got: Vec<String> = run(&script.replace("localhost:8080", &http))
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            got, promise,
            "the README's /json loop, serve flags {mode:?}"
        );
    }

    let service = Service::start(repo_path("config/example.yaml"), &[]);
    let http = service.http_addr.to_string();

    let admin = marked("quick-start: admin");
    let (script, _) = commands_and_promise(&admin);
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let command = line.split(" # ").next().unwrap_or(line);
        let out = run(&command.replace("localhost:8080", &http));
        assert!(!out.trim().is_empty(), "`{command}` printed nothing");
    }
}

#[test]
fn envoy_limits_as_the_quick_start_shows() {
    let commands = marked("quick-start: envoy per-route");
    let example = Example::load("per-route");
    let serve = format!(
        "cargo run --release -- serve --config {}",
        example.limits_file.display()
    );
    let envoy = format!("envoy -c {}", example.envoy_file.display());
    for command in [&serve, &envoy] {
        assert!(
            commands.text.lines().any(|l| l.trim() == command.as_str()),
            "the README's Envoy block should run `{command}` (the example's own command)"
        );
    }
    let install = "bash integration/install-envoy.sh";
    assert!(
        commands.text.contains(install),
        "the README should say `{install}`"
    );

    let (script, promise) = commands_and_promise(&next_block(&commands));
    let promise = promise.expect("the Envoy block's loop ends with the output it promises");
    for mode in MODES {
        let stack = Stack::start(&example, mode);
        support::avoid_window_boundary(WINDOW, WORK);
        let got: Vec<String> =
            run(&script.replace("localhost:10000", &stack.envoy.listen_addr.to_string()))
                .split_whitespace()
                .map(str::to_owned)
                .collect();
        assert_eq!(
            got, promise,
            "the README's loop through Envoy, serve flags {mode:?}"
        );
    }
}
