use std::time::Duration;

use clap::Parser;

use super::*;
use crate::byte_size_arg::ByteSizeRange;
use crate::serve::ServeSettings;
use crate::transport::TransportSettings;
use crate::upstream_env::is_known;

/// `serve --config x.yaml ARGS`, parsed and validated as the binary does.
fn serve(extra: &[&str]) -> Result<ServeSettings, String> {
    let argv = ["gcounter-rls", "serve", "--config", "x.yaml"]
        .iter()
        .chain(extra);
    let argv: Vec<&str> = argv.copied().collect();
    // clap's own error, as text; then the binary's parsing, which keeps the origins.
    Cli::try_parse_from(&argv).map_err(|e| e.to_string())?;
    let env = Environment::default();
    let parsed = parse(argv.iter().map(Into::into).collect(), &env)
        .map_err(|code| format!("refused: {code:?}"))?;
    let Command::Serve(args) = parsed.cli.command else {
        return Err("not serve".into());
    };
    // No container limit, whatever the machine running the tests has.
    ServeSettings::from_args_in(*args, parsed.origins, &env, Ok(None)).map_err(|e| format!("{e:#}"))
}

#[test]
fn reference_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
    let generated = reference_markdown();
    if std::env::var_os("UPDATE_CLI_REFERENCE").is_some() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs");
        std::fs::create_dir_all(dir).expect("create docs/");
        std::fs::write(path, &generated).expect("write docs/cli.md");
        return;
    }
    let current = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        current == generated,
        "docs/cli.md differs from what the clap definitions generate. Regenerate it with\n  \
         UPDATE_CLI_REFERENCE=1 cargo test -p gcounter-rls --lib cli::tests::reference_is_up_to_date\n\
         and commit it."
    );
}

#[test]
fn the_definition_is_consistent() {
    command().debug_assert();
}

#[test]
fn serve_help_is_grouped_in_order() {
    let mut cmd = command();
    cmd.build();
    let serve = cmd.find_subcommand("serve").expect("serve");
    let mut headings: Vec<&str> = Vec::new();
    for arg in serve.get_arguments() {
        if let Some(heading) = arg.get_help_heading()
            && !headings.contains(&heading)
        {
            headings.push(heading);
        }
    }
    assert_eq!(
        headings,
        [
            "Listeners",
            "Limits config",
            "Engine and memory",
            "Redis (regional origin)",
            "SQL and global counters",
            "xDS",
            "TLS",
            "Transport bounds",
            "RLQS (rate_limit_quota)",
            "Telemetry (logging/metrics)",
        ]
    );
    let ungrouped: Vec<_> = serve
        .get_arguments()
        .filter(|a| {
            a.get_help_heading().is_none() && !matches!(a.get_long(), Some("help" | "help-all"))
        })
        .map(|a| a.get_id().to_string())
        .collect();
    assert!(
        ungrouped.is_empty(),
        "flags without a heading: {ungrouped:?}"
    );
}

#[test]
fn every_flag_has_a_one_line_description() {
    let mut cmd = command();
    cmd.build();
    let mut commands = vec![&cmd];
    commands.extend(cmd.get_subcommands());
    for command in commands {
        for arg in command.get_arguments() {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let name = format!("{} {}", command.get_name(), arg.get_id());
            assert!(!help.trim().is_empty(), "{name} has no description");
            assert!(
                !help.contains('\n'),
                "{name}: the short help is one line: {help}"
            );
            assert!(help.len() <= 110, "{name}: the short help is long: {help}");
        }
    }
}

#[test]
fn upstream_variables_named_in_the_help_are_known() {
    let reference = reference_markdown();
    for part in reference.split("upstream's ").skip(1) {
        for name in part
            .split('`')
            .skip(1)
            .step_by(2)
            .take_while(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        {
            // `CONFIG_TYPE`'s value is named too.
            let value = name == "GRPC_XDS_SOTW";
            assert!(
                value || is_known(name),
                "{name} is not in upstream_env::VARIABLES"
            );
        }
    }
}

#[test]
fn flags_and_variables_are_listed() {
    let flags = all_long_flags();
    for flag in [
        "--grpc-addr",
        "--log-format",
        "--max-config-bytes",
        "--config-xds-server",
        "--batch",
        "--database-url",
        "--help",
    ] {
        assert!(flags.contains(flag), "{flag}");
    }
    let variables = all_env_variables();
    for variable in [
        "RLS_GRPC_ADDR",
        "RLS_LOG_LEVEL",
        "RLS_DATABASE_URL",
        "RLS_CONFIG_XDS_SERVER",
    ] {
        assert!(variables.contains(variable), "{variable}");
    }
    assert!(
        variables.iter().all(|v| v.starts_with("RLS_")),
        "{variables:?}"
    );
}

#[test]
fn byte_sizes_take_units_and_plain_numbers() {
    let settings = serve(&[
        "--max-request-bytes",
        "512KiB",
        "--max-buffered-request-bytes",
        "1048576",
        "--http2-stream-window",
        "1MiB",
        "--max-cell-bytes",
        "1GiB",
        "--max-descriptor-bytes",
        "32768",
        "--max-config-bytes",
        "1MiB",
    ])
    .expect("valid");
    assert_eq!(settings.transport.max_request_bytes, 512 << 10);
    assert_eq!(settings.transport.max_buffered_request_bytes, 1 << 20);
    assert_eq!(settings.transport.http2_stream_window, 1 << 20);
    assert_eq!(settings.engine.max_cell_bytes, 1 << 30);
    assert_eq!(settings.rls.request_limits.max_descriptor_bytes, 32 << 10);
    assert_eq!(settings.limits.load.limits.max_bytes, 1 << 20);
}

#[test]
fn defaults_are_the_settings_defaults() {
    let settings = serve(&[]).expect("defaults are valid");
    assert_eq!(
        format!("{:?}", settings.transport),
        format!("{:?}", TransportSettings::default())
    );
    assert_eq!(
        settings.limits.load.limits.max_bytes,
        crate::config::ReadLimits::DEFAULT_MAX_BYTES
    );
}

/// `serve` keeps sliding windows without counted denials; the two flags reach the engine.
#[test]
fn window_semantics_reach_the_engine() {
    let engine = |extra: &[&str]| {
        let settings = serve(extra).expect("valid");
        let engine = settings.engine.engine_settings(None);
        (engine.windows, engine.count_denied)
    };
    assert_eq!(engine(&[]), (gcounter_engine::Windows::Sliding, false));
    assert_eq!(
        engine(&["--windows", "fixed", "--count-denied"]),
        (gcounter_engine::Windows::Fixed, true)
    );
    let error = serve(&["--windows", "tumbling"]).expect_err("not a mode");
    assert!(error.contains("--windows"), "{error}");
}

#[test]
fn invalid_settings_are_usage_errors() {
    for argv in [
        &["serve", "--config", "x", "--preface-timeout", "0s"][..],
        &["serve", "--config", "x", "--max-request-bytes", "512B"],
        &["serve", "--config", "x", "--max-request-bytes", "lots"],
        &["serve", "--config", "x", "--config-xds-server", "x:1"],
        &["--log-level", "info,=[", "serve", "--config", "x"],
        &["check-config", "x", "--max-config-bytes", "0"],
    ] {
        let error =
            Cli::try_parse_from(std::iter::once("gcounter-rls").chain(argv.iter().copied()))
                .err()
                .unwrap_or_else(|| panic!("{argv:?} accepted"));
        assert_eq!(
            error.exit_code(),
            i32::from(EXIT_INVALID_SETTING),
            "{argv:?}"
        );
    }
    let error = serve(&["--preface-timeout", "0s"]).expect_err("zero");
    assert!(
        error.contains("--preface-timeout") && error.contains("must be between 10ms and 10m"),
        "{error}"
    );
    let error = serve(&[
        "--response-header-style",
        "structured",
        "--limit-header",
        "X-Limit",
    ])
    .expect_err("contradiction");
    assert!(error.contains("--limit-header"), "{error}");
}

/// A bound as `[range: MIN to MAX]` states it, in the flag's own syntax.
#[derive(Debug, Clone, Copy)]
enum Bound {
    Count(i128),
    Time(Duration),
    Size(u64),
}

impl Bound {
    fn parse(text: &str) -> Option<Self> {
        if let Ok(n) = text.parse::<i128>() {
            return Some(Self::Count(n));
        }
        if let Ok(d) = humantime::parse_duration(text) {
            return Some(Self::Time(d));
        }
        ByteSizeRange::new(0, u64::MAX)
            .parse(text)
            .ok()
            .map(Self::Size)
    }

    /// The value itself, and the nearest values outside (below, above), in the flag's syntax.
    fn around(self) -> (String, String, String) {
        let ms = Duration::from_millis(1);
        match self {
            Self::Count(n) => (n.to_string(), (n - 1).to_string(), (n + 1).to_string()),
            Self::Time(d) => (
                humantime::format_duration(d).to_string(),
                humantime::format_duration(d.saturating_sub(ms)).to_string(),
                humantime::format_duration(d + ms).to_string(),
            ),
            Self::Size(n) => (
                n.to_string(),
                n.saturating_sub(1).to_string(),
                n.saturating_add(1).to_string(),
            ),
        }
    }
}

/// Every `[range: MIN to MAX]` in `serve`'s help is what the flag accepts: both bounds
/// accepted, the nearest values outside refused.
#[test]
fn stated_ranges_are_enforced() {
    // What some flags need beside them to be valid at their bounds.
    let companions = |flag: &str| -> &'static [&'static str] {
        match flag {
            "--max-buffered-request-bytes" => &["--max-request-bytes", "1KiB"],
            "--max-descriptor-bytes" => &["--max-cell-bytes", "1PiB"],
            _ => &[],
        }
    };
    let mut cmd = command();
    cmd.build();
    let serve_cmd = cmd.find_subcommand("serve").expect("serve");
    let mut checked = 0;
    for arg in serve_cmd.get_arguments() {
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let Some(range) = help.split("[range: ").nth(1) else {
            continue;
        };
        let range = range.trim_end_matches(']');
        let flag = format!("--{}", arg.get_long().expect("a flag"));
        let Some((min, max)) = range.split_once(" to ") else {
            panic!("{flag}: [range: {range}] is not MIN to MAX");
        };
        if min == "above 0, up" {
            continue; // (0, 1]: an open bound, checked by from_args
        }
        for (bound, is_min) in [(min, true), (max, false)] {
            let parsed = Bound::parse(bound).unwrap_or_else(|| panic!("{flag}: bound {bound}"));
            let (at, below, above) = parsed.around();
            let outside = if is_min { below } else { above };
            let with = |value: &str| {
                let mut argv = vec![flag.as_str(), value];
                argv.extend_from_slice(companions(&flag));
                serve(&argv)
            };
            if let Err(error) = with(&at) {
                panic!("{flag} {at} (a bound of [range: {range}]) is refused: {error}");
            }
            // Nothing lies below a bound of zero.
            let zero = matches!(parsed, Bound::Count(0) | Bound::Size(0))
                || matches!(parsed, Bound::Time(d) if d.is_zero());
            if !(is_min && zero) {
                assert!(
                    with(&outside).is_err(),
                    "{flag} {outside} is outside [range: {range}] but accepted"
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} ranges found");
}

#[test]
fn a_log_level_is_a_level_never_a_word_that_silences_the_log() {
    for (given, used) in [
        ("info", "info"),
        ("WARN", "warn"),
        ("warning", "warn"),
        ("fatal", "error"),
        (
            "gcounter_rls=debug,tonic=info",
            "gcounter_rls=debug,tonic=info",
        ),
        ("info,h2=warning", "info,h2=warn"),
    ] {
        assert_eq!(log_filter(given).as_deref(), Ok(used), "{given}");
    }
    for given in ["verbose", "gcounter_rls", "", "info,loud"] {
        let error = log_filter(given).expect_err(given);
        assert!(error.contains("level"), "{given}: {error}");
    }
    let error = Cli::try_parse_from(["gcounter-rls", "--log-level", "verbose", "serve"])
        .expect_err("verbose");
    assert_eq!(error.exit_code(), i32::from(EXIT_INVALID_SETTING));
}

#[test]
fn serve_help_shows_the_common_flags_and_help_all_every_one() {
    let mut cmd = command();
    cmd.build();
    let serve = cmd.find_subcommand_mut("serve").expect("serve");
    let help = serve.render_help().to_string();
    for common in [
        "--grpc-addr",
        "--config",
        "--redis-url",
        "--shadow-mode",
        "--statsd-addr",
    ] {
        assert!(help.contains(common), "{common} not in serve --help");
    }
    for expert in [
        "--global-onset-fraction",
        "--http2-stream-window",
        "--replay-interval",
    ] {
        assert!(!help.contains(expert), "{expert} in serve --help");
    }
    assert!(
        help.lines().count() < 250,
        "serve --help has {} lines",
        help.lines().count()
    );
    assert!(help.contains("--help-all"), "{help}");
    let all = help_all();
    let reference = reference_markdown();
    for id in EXPERT_FLAGS {
        let flag = format!("--{}", id.replace('_', "-"));
        assert!(all.contains(&flag), "{flag} not in serve --help-all");
        assert!(
            reference.contains(&format!("`{flag}")),
            "{flag} not in docs/cli.md"
        );
    }
}

#[test]
fn version_names_the_commit_and_the_build() {
    let short = Cli::command().render_version();
    assert_eq!(
        short.trim(),
        format!(
            "gcounter-rls {} ({})",
            env!("CARGO_PKG_VERSION"),
            crate::telemetry::BUILD_COMMIT
        )
    );
    let long = Cli::command().render_long_version();
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(concat!("gcounter-rls ", env!("CARGO_PKG_VERSION")))
    );
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name}: line in\n{long}"))
    };
    assert_eq!(field("commit"), crate::telemetry::BUILD_COMMIT);
    assert_ne!(
        field("commit"),
        "unknown",
        "the tests run in the repository"
    );
    assert_eq!(
        field("features"),
        "none",
        "the package has no cargo features"
    );
    assert_eq!(field("profile"), "debug");
    assert!(field("target").contains("linux"), "{long}");
    assert!(field("rustc").starts_with("rustc 1."), "{long}");
}
