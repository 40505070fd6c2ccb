//! The start log of a no-argument start (upstream's image) with a dozen of upstream's
//! variables: every `setting` line's claim (its value, and which variables were set or left to
//! upstream's default) is checked against the environment the process was given; every
//! variable without effect here is named by exactly one warning; Redis being reached is said.

use gcounter_rls_integration as support;

use std::collections::HashMap;

use support::{Service, UpstreamRuntime};

const LIMITS: &str = "
domain: start
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 5 }
";

/// The variables a claim names: `A`, `A and B`, `A, B and C`.
fn names(list: &str) -> Vec<&str> {
    list.split([',', ' '])
        .filter(|word| !word.is_empty() && *word != "and")
        .collect()
}

/// Checks one `setting` line (`--flag=value from SOURCE`) against `env`; `None` when it holds.
fn refuted(line: &str, env: &HashMap<&str, &str>) -> Option<String> {
    let (setting, source) = line.split_once(" from ")?;
    let (flag, value) = setting.split_once('=').unwrap_or((setting, ""));
    let set = |name: &str| env.get(name).is_some_and(|v| !v.is_empty());
    let claimed_set: Vec<&str>;
    let claimed_unset: Vec<&str>;
    // Upstream's semantics, which no variable sets: only these two flags, only as upstream.
    if let Some(what) = source
        .strip_prefix("the no-argument start (upstream's ")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let holds = matches!(
            (flag, value, what),
            ("--windows", "fixed", "fixed windows")
                | ("--count-denied", "true", "counting of denied hits")
        );
        return (!holds).then(|| format!("{line}: not upstream's behaviour"));
    }
    if let Some(defaults) = source
        .strip_prefix("upstream's default (")
        .and_then(|rest| rest.strip_suffix(" unset)"))
    {
        claimed_set = Vec::new();
        claimed_unset = names(defaults);
    } else if let Some(rest) = source.strip_prefix("upstream's ") {
        match rest.split_once(" (") {
            Some((given, unset)) => {
                claimed_set = names(given);
                claimed_unset = names(unset.strip_suffix(" unset: upstream's default)")?);
            }
            None => {
                claimed_set = names(rest);
                claimed_unset = Vec::new();
            }
        }
    } else if source.starts_with("RLS_") {
        claimed_set = vec![source];
        claimed_unset = Vec::new();
    } else {
        return Some(format!("{line}: a no-argument start has no {source:?}"));
    }
    if let Some(name) = claimed_set.iter().find(|name| !set(name)) {
        return Some(format!("{line}: {name} is not set"));
    }
    if let Some(name) = claimed_unset.iter().find(|name| set(name)) {
        return Some(format!("{line}: {name} is set"));
    }
    // Where the value is the variable's as given, it must be that value.
    let copied = [
        ("--near-limit-ratio", "NEAR_LIMIT_RATIO"),
        ("--redis-replay-timeout", "REDIS_TIMEOUT"),
        ("--redis-prefix", "CACHE_KEY_PREFIX"),
        ("--max-connection-age", "GRPC_MAX_CONNECTION_AGE"),
        ("--metrics-addr", "PROMETHEUS_ADDR"),
        ("--remaining-header", "LIMIT_REMAINING_HEADER"),
    ];
    if let Some((_, variable)) = copied.iter().find(|(f, _)| *f == flag)
        && set(variable)
        && env.get(variable) != Some(&value)
    {
        return Some(format!("{line}: {variable} is {:?}", env.get(variable)));
    }
    let address = |host: &str, port: &str| format!("{}:{}", env[host], env[port]);
    for (f, host, port) in [
        ("--http-addr", "HOST", "PORT"),
        ("--grpc-addr", "GRPC_HOST", "GRPC_PORT"),
        ("--debug-addr", "DEBUG_HOST", "DEBUG_PORT"),
    ] {
        if flag == f && value != address(host, port) {
            return Some(format!("{line}: {host}:{port} is {}", address(host, port)));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_start_line_names_the_true_source_of_its_value() {
    let runtime = UpstreamRuntime::new(LIMITS);
    let prefix = format!("start-log-{}:", std::process::id());
    let prometheus = support::local_addr(support::free_port()).to_string();
    let no_effect = [
        ("REDIS_POOL_SIZE", "20"),
        ("REDIS_PIPELINE_WINDOW", "150us"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1000000"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "300"),
    ];
    let mut given = runtime.env(&[
        ("LOG_LEVEL", "info"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("CACHE_KEY_PREFIX", &prefix),
        ("REDIS_TIMEOUT", "2s"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", &prometheus),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("QUOTA_MODE", "true"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("GRPC_MAX_CONNECTION_AGE", "1h"),
    ]);
    given.extend(no_effect);
    let service = Service::start_upstream(&given);
    // Redis is read once at start: the log says it answered.
    service.wait_until(
        std::time::Duration::from_secs(10),
        "the line saying Redis was reached",
        || {
            if service
                .log_tail(400)
                .contains("the regional origin (redis) reached")
            {
                Ok(())
            } else {
                Err("not yet".to_owned())
            }
        },
    );
    let log = service.log_tail(400);

    // What the process was given: the test's variables, the harness's addresses, and
    // whatever this test runs under (inherited).
    let mut env: HashMap<&str, &str> = HashMap::new();
    let inherited: Vec<(String, String)> = std::env::vars().collect();
    for (name, value) in &inherited {
        env.insert(name.as_str(), value.as_str());
    }
    let (grpc, http, debug) = (
        service.grpc_addr.port().to_string(),
        service.http_addr.port().to_string(),
        service.debug_addr.port().to_string(),
    );
    for (name, value) in [
        ("HOST", "127.0.0.1"),
        ("PORT", http.as_str()),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", grpc.as_str()),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", debug.as_str()),
    ] {
        env.insert(name, value);
    }
    for (name, value) in &given {
        env.insert(name, value);
    }

    let settings: Vec<&str> = log
        .lines()
        .filter_map(|line| line.split_once(" setting ").map(|(_, s)| s))
        .collect();
    let problems: Vec<String> = settings.iter().filter_map(|l| refuted(l, &env)).collect();
    assert!(problems.is_empty(), "{}\n\n{log}", problems.join("\n"));
    for flag in [
        "--http-addr=",
        "--grpc-addr=",
        "--debug-addr=",
        "--config=",
        "--redis-url=",
        "--redis-prefix=",
        "--redis-replay-timeout=2s ",
        "--near-limit-ratio=0.9 ",
        "--metrics-addr=",
        "--response-headers=true ",
        "--remaining-header=X-Left ",
        "--quota-mode=true ",
        "--max-connection-age=1h ",
        "--max-connection-age-grace=1h from upstream's default (GRPC_MAX_CONNECTION_AGE_GRACE unset)",
        "--log-level=",
        "--windows=fixed from the no-argument start (upstream's fixed windows)",
        "--count-denied=true from the no-argument start (upstream's counting of denied hits)",
    ] {
        let found = settings.iter().filter(|l| l.starts_with(flag)).count();
        // LOG_LEVEL=info is our default: no line for it.
        let expected = usize::from(flag != "--log-level=");
        assert_eq!(found, expected, "lines starting {flag:?}:\n{log}");
    }
    for (variable, _) in no_effect {
        let warnings = log
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(variable))
            .count();
        assert_eq!(warnings, 1, "warnings naming {variable}:\n{log}");
    }
    support::assert_mentions(&log, "quota_mode=true", "the switches line");
    let serving = log
        .lines()
        .find(|l| l.contains(" serving "))
        .unwrap_or_else(|| panic!("no serving line:\n{log}"));
    support::assert_mentions(
        serving,
        &format!("debug={}", service.debug_addr),
        "the serving line",
    );
    support::assert_mentions(
        serving,
        &format!("metrics={prometheus}"),
        "the serving line",
    );
    assert!(!log.contains(" ERROR "), "{log}");
}
