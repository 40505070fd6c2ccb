//! The binary's exit codes: 2 and one `error:` line on stderr for every invalid setting (a
//! flag, an `RLS_*` variable, an upstream variable without arguments, a contradiction, a
//! setting `serve` refuses), 1 for a failure once the settings are valid, 0 when done.

use gcounter_rls_integration as support;

use std::process::Command;
use std::time::Duration;

use support::process::run_within;

/// Runs `gcounter-rls args…` with `env` (and nothing else of this process's environment when
/// `clear`); its exit code and stderr.
fn run(args: &[&str], env: &[(&str, &str)], clear: bool) -> (Option<i32>, String) {
    let mut command = Command::new(support::binary());
    if clear {
        command.env_clear();
    }
    let (output, _, ended) = run_within(
        command.args(args).envs(env.iter().copied()),
        Duration::from_secs(15),
    );
    assert!(ended, "{args:?} {env:?} did not stop at start");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

/// Exit 2, one `error:` line naming `needle`.
fn assert_invalid(args: &[&str], env: &[(&str, &str)], clear: bool, needle: &str) {
    let (code, stderr) = run(args, env, clear);
    assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
    assert!(stderr.starts_with("error:"), "{args:?} {env:?}: {stderr}");
    assert_eq!(
        stderr.matches("error:").count(),
        1,
        "{args:?} {env:?}: printed once: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "{args:?} {env:?}: no {needle:?} in {stderr}"
    );
}

/// Extra arguments of `serve`, its environment, and what its one message must name.
type InvalidCase = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

fn serve_args<'a>(config: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    support::serve_argv(config, "127.0.0.1:0", "127.0.0.1:0", extra)
}

#[test]
fn every_invalid_setting_exits_2_with_one_message() {
    let (_dir, path) = support::limits_file(&support::one_rule("exit", "user", "second", 1, 10));
    let config = path.to_string_lossy().into_owned();
    // `serve` with these flags and variables: exit 2, one message naming the third.
    let serve_cases: [InvalidCase; 11] = [
        // A flag out of its range, or not a value at all.
        (&["--preface-timeout", "0s"], &[], "--preface-timeout"),
        (&["--max-request-bytes", "512B"], &[], "--max-request-bytes"),
        (&["--max-cell-bytes", "lots"], &[], "--max-cell-bytes"),
        (&["--log-level", "info,=["], &[], "--log-level"),
        // One of our variables.
        (&[], &[("RLS_MAX_CELLS", "many")], "--max-cells"),
        (&[], &[("RLS_REPLAY_INTERVAL", "0s")], "--replay-interval"),
        // Contradictions: clap's, and those `serve` checks.
        (
            &["--config-xds-server", "127.0.0.1:1"],
            &[],
            "--config-xds-server",
        ),
        (
            &[
                "--response-header-style",
                "structured",
                "--limit-header",
                "X-Limit",
            ],
            &[],
            "--limit-header",
        ),
        (
            &[
                "--max-request-bytes",
                "1MiB",
                "--max-buffered-request-bytes",
                "512KiB",
            ],
            &[],
            "--max-buffered-request-bytes",
        ),
        (&["--database-url", "sqlite::memory:"], &[], "--region"),
        // An upstream switch `serve` reads however it is started.
        (&[], &[("SHADOW_MODE", "maybe")], "SHADOW_MODE"),
    ];
    for (extra, env, needle) in serve_cases {
        assert_invalid(&serve_args(&config, extra), env, false, needle);
    }
    // Upstream's variables, started with no arguments.
    assert_invalid(&[], &[("SHADOW_MODE", "maybe")], true, "SHADOW_MODE");
    assert_invalid(&[], &[("GRPC_PORT", "http")], true, "GRPC_PORT");
    // Other subcommands.
    assert_invalid(
        &["migrate", "--database-url", "oracle://db"],
        &[],
        false,
        "--database-url",
    );
    assert_invalid(
        &["check-config", &config],
        &[("RUNTIME_IGNOREDOTFILES", "sometimes")],
        false,
        "RUNTIME_IGNOREDOTFILES",
    );
}

#[test]
fn byte_sizes_take_units() {
    let (code, stdout) = {
        let (_dir, path) =
            support::limits_file(&support::one_rule("units", "user", "second", 1, 10));
        run(
            &[
                "check-config",
                &path.to_string_lossy(),
                "--max-config-bytes",
                "1MiB",
            ],
            &[],
            false,
        )
    };
    assert_eq!(code, Some(0), "{stdout}");
}

#[test]
fn failures_after_valid_settings_exit_1() {
    let (_dir, path) = support::limits_file(&support::one_rule("exit", "user", "second", 1, 10));
    let config = path.to_string_lossy().into_owned();
    // The HTTP address is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let args = support::serve_argv(&config, "127.0.0.1:0", &addr, &[]);
    let (code, stderr) = run(&args, &[], false);
    assert_eq!(code, Some(1), "cannot bind: {stderr}");
    // The limits config is refused at start.
    let (_bad, bad) = support::limits_file("domain: [");
    let bad = bad.to_string_lossy().into_owned();
    let (code, stderr) = run(&serve_args(&bad, &[]), &[], false);
    assert_eq!(code, Some(1), "a bad limits config: {stderr}");
    // check-config: 0 for a valid config, 1 for one with errors.
    let (code, stderr) = run(&["check-config", &config], &[], false);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = run(&["check-config", &bad], &[], false);
    assert_eq!(code, Some(1), "{stderr}");
}

/// A second process on the same host (a second copy, or upstream beside it): the debug port is
/// the one both default to. The second stops at start naming the setting; with that one
/// setting (`--debug-addr off`, or upstream's `DEBUG_PORT` elsewhere) it starts.
#[test]
fn a_second_process_on_one_host_is_one_setting_away() {
    let (_dir, path) = support::limits_file(&support::one_rule("second", "user", "second", 1, 10));
    let config = path.to_string_lossy().into_owned();
    let debug = support::local_addr(support::free_port()).to_string();
    let first = support::Service::start(&path, &["--debug-addr", &debug]);

    let (code, stderr) = run(&serve_args(&config, &["--debug-addr", &debug]), &[], false);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
    for needle in ["--debug-addr", "--debug-addr off", "RLS_DEBUG_ADDR=off"] {
        support::assert_mentions(&stderr, needle, "the error");
    }
    let second = support::Service::start(&path, &["--debug-addr", "off"]);
    support::assert_mentions(&second.log_tail(50), "debug=off", "the serving line");

    // Started as upstream's image: the error names DEBUG_PORT, and our variable is the way.
    let runtime =
        support::UpstreamRuntime::new(&support::one_rule("second", "user", "second", 1, 10));
    let port = debug.rsplit(':').next().unwrap_or_default().to_owned();
    let base = runtime.env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", &port),
    ]);
    let (code, stderr) = run(&[], &base, true);
    assert_eq!(code, Some(1), "{stderr}");
    support::assert_mentions(&stderr, "DEBUG_PORT", "the error");
    // The harness gives HOST, PORT, GRPC_HOST and GRPC_PORT free ports of its own.
    let beside = support::Service::start_upstream(&runtime.env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("DEBUG_PORT", &port),
        ("RLS_DEBUG_ADDR", "off"),
    ]));
    assert_eq!(beside.admin_get("/healthcheck").status, 200);
    drop((first, second, beside));
}
