use super::*;

fn env(vars: &[(&str, &str)]) -> Environment {
    Environment::from_pairs(vars.iter().copied())
}

#[test]
fn tls_is_off_unless_use_tls_is_true() {
    assert_eq!(grpc_tls(&env(&[])), Ok(None));
    assert_eq!(
        grpc_tls(&env(&[
            ("GRPC_SERVER_USE_TLS", "false"),
            ("GRPC_SERVER_TLS_CERT", "/c")
        ])),
        Ok(None)
    );
}

#[test]
fn tls_reads_upstreams_variables() {
    let files = grpc_tls(&env(&[
        ("GRPC_SERVER_USE_TLS", "True"),
        ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
        ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
        ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.internal"),
    ]))
    .expect("valid")
    .expect("on");
    assert_eq!(files.cert, PathBuf::from("/tls/cert.pem"));
    assert_eq!(files.key, PathBuf::from("/tls/key.pem"));
    assert_eq!(files.client_ca, Some(PathBuf::from("/tls/ca.pem")));
    assert_eq!(files.client_san.as_deref(), Some("envoy.internal"));
}

#[test]
fn bad_values_name_the_variable() {
    let error = grpc_tls(&env(&[("GRPC_SERVER_USE_TLS", "yes")])).expect_err("not a bool");
    assert_eq!(error.variable, "GRPC_SERVER_USE_TLS");
    let error = grpc_tls(&env(&[
        ("GRPC_SERVER_USE_TLS", "1"),
        ("GRPC_SERVER_TLS_CERT", "/c"),
    ]))
    .expect_err("no key");
    assert_eq!(error.variable, "GRPC_SERVER_TLS_KEY");
    let error = grpc_tls(&env(&[
        ("GRPC_SERVER_USE_TLS", "1"),
        ("GRPC_SERVER_TLS_CERT", "/c"),
        ("GRPC_SERVER_TLS_KEY", "/k"),
        ("GRPC_CLIENT_TLS_SAN", "x"),
    ]))
    .expect_err("SAN without CA");
    assert_eq!(error.variable, "GRPC_CLIENT_TLS_SAN");
}

#[test]
fn serve_argv_maps_upstreams_variables_with_its_defaults() {
    let argv = serve_argv(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("REDIS_AUTH", "user:p@ss"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("PORT", "9000"),
        ("USE_STATSD", "false"),
    ]))
    .expect("valid");
    let args = argv.args.join(" ");
    assert_eq!(
        args,
        "--log-level warn --log-format text serve --http-addr 0.0.0.0:9000 \
             --grpc-addr 0.0.0.0:8081 --debug-addr 127.0.0.1:6070 --config /data/ratelimit/config \
             --windows fixed --count-denied \
             --redis-replay-timeout 10s --redis-url redis://user:p%40ss@redis:6379 --max-connection-age 24h \
             --max-connection-age-grace 1h"
    );
}

#[test]
fn ours_win_and_unsupported_settings_are_refused() {
    let argv = serve_argv(&env(&[
        ("RLS_REDIS_URL", "redis://x:1"),
        ("RLS_CONFIG", "/c"),
    ]))
    .expect("valid");
    assert!(
        !argv
            .args
            .iter()
            .any(|a| a == "--redis-url" || a == "--config")
    );
    for (vars, variable) in [
        (vec![("BACKEND_TYPE", "memcache")], "BACKEND_TYPE"),
        (vec![("REDIS_PERSECOND", "true")], "REDIS_PERSECOND"),
        (
            vec![
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "ring"),
                ("REDIS_URL", "r:1"),
            ],
            "REDIS_TYPE",
        ),
        (
            vec![("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis://r:1")],
            "REDIS_URL",
        ),
        (vec![("REDIS_URL", "r:1")], "REDIS_URL"),
        (vec![("LOG_LEVEL", "loud")], "LOG_LEVEL"),
        (
            vec![("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE")],
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        ),
    ] {
        let error = serve_argv(&env(&vars)).expect_err(variable);
        assert_eq!(error.variable, variable, "{vars:?}: {error}");
    }
}

#[test]
fn a_prometheus_mapping_is_not_applied_and_said_so() {
    let argv = serve_argv(&env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "r:1"),
        ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
    ]))
    .expect("accepted");
    assert_eq!(argv.warnings.len(), 1, "{argv:?}");
    assert!(
        argv.warnings[0].starts_with("PROMETHEUS_MAPPER_YAML is set but has no effect here"),
        "{argv:?}"
    );
}

#[test]
fn sentinel_unix_auth_and_tls_files_map_to_our_flags() {
    let args = |vars: &[(&str, &str)]| serve_argv(&env(vars)).expect("valid").args.join(" ");
    let sentinel = args(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster, s1:26379 ,s2:26380"),
        ("REDIS_AUTH", "app:m@ster"),
        ("REDIS_SENTINEL_AUTH", "s3nt"),
    ]);
    assert!(
        sentinel.contains(
            "--redis-url redis://:s3nt@s1:26379,redis://:s3nt@s2:26380 \
                 --redis-sentinel-master mymaster --redis-sentinel-master-auth app:m@ster"
        ),
        "{sentinel}"
    );
    let unix = args(&[("REDIS_URL", "/run/redis.sock"), ("REDIS_AUTH", "p w")]);
    assert!(
        unix.contains("--redis-url redis+unix:///run/redis.sock?pass=p%20w"),
        "{unix}"
    );
    let unix = args(&[("REDIS_URL", "/run/redis.sock"), ("REDIS_AUTH", "u:p")]);
    assert!(
        unix.contains("redis+unix:///run/redis.sock?user=u&pass=p"),
        "{unix}"
    );
    let tls = args(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "r:6380"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", "/tls/ca.pem"),
        ("REDIS_TLS_CLIENT_CERT", "/tls/c.pem"),
        ("REDIS_TLS_CLIENT_KEY", "/tls/k.pem"),
        ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
    ]);
    assert!(
        tls.contains(
            "--redis-url rediss://r:6380 --redis-tls-ca /tls/ca.pem --redis-tls-cert \
                 /tls/c.pem --redis-tls-key /tls/k.pem --redis-tls-skip-hostname-verification"
        ),
        "{tls}"
    );
}

#[test]
fn bad_sentinel_and_tls_settings_name_the_variable() {
    let tcp = |more: &[(&'static str, &'static str)]| {
        let mut vars = vec![("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "r:1")];
        vars.extend_from_slice(more);
        vars
    };
    for (vars, variable) in [
        (
            vec![
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_URL", "s1:26379"),
            ],
            "REDIS_URL",
        ),
        (
            vec![
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_URL", "s1:26379,s2:26379"),
            ],
            "REDIS_URL",
        ),
        (tcp(&[("REDIS_SENTINEL_AUTH", "x")]), "REDIS_SENTINEL_AUTH"),
        (tcp(&[("REDIS_TLS_CACERT", "/ca.pem")]), "REDIS_TLS_CACERT"),
        (
            tcp(&[("REDIS_TLS", "true"), ("REDIS_TLS_CLIENT_CERT", "/c.pem")]),
            "REDIS_TLS_CLIENT_KEY",
        ),
        (
            tcp(&[("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "yes")]),
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        ),
    ] {
        let error = serve_argv(&env(&vars)).expect_err(variable);
        assert_eq!(error.variable, variable, "{vars:?}: {error}");
    }
}

#[test]
fn stats_go_where_upstreams_go() {
    let statsd = |vars: &[(&str, &str)]| {
        let mut all = vec![("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "r:1")];
        all.extend_from_slice(vars);
        serve_argv(&env(&all)).map(|argv| {
            let args = argv.args.join(" ");
            args.split_once(" --statsd-")
                .map(|(_, rest)| format!("--statsd-{rest}"))
                .map(|s| {
                    s.split(" --max-connection-age")
                        .next()
                        .and_then(|s| s.split(" --metrics-addr").next())
                        .unwrap_or_default()
                        .to_owned()
                })
                .unwrap_or_default()
        })
    };
    // Upstream's default: statsd over TCP to localhost:8125.
    assert_eq!(statsd(&[]), Ok("--statsd-addr localhost:8125".into()));
    for off in [
        &[("USE_STATSD", "false")][..],
        &[("DISABLE_STATS", "true")],
        &[("USE_PROMETHEUS", "true")],
    ] {
        assert_eq!(statsd(off), Ok(String::new()), "{off:?}");
    }
    assert_eq!(
        statsd(&[("USE_PROMETHEUS", "true"), ("USE_STATSD", "true")]),
        Ok("--statsd-addr localhost:8125".into())
    );
    assert_eq!(
        statsd(&[
            ("STATSD_HOST", "statsd.monitoring"),
            ("STATSD_PORT", "9125"),
            ("STATSD_PROTOCOL", "udp"),
            ("STATS_FLUSH_INTERVAL", "1s"),
            ("EXTRA_TAGS", "env:prod,team:edge"),
        ]),
        Ok(
            "--statsd-addr statsd.monitoring:9125 --statsd-protocol udp \
            --statsd-flush-interval 1s --statsd-tags env:prod,team:edge"
                .into()
        )
    );
    assert_eq!(
        statsd(&[
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "::1"),
            ("USE_DOG_STATSD_MOGRIFIERS", "RL"),
        ]),
        Ok("--statsd-addr [::1]:8125 --statsd-format dogstatsd --statsd-mogrifiers RL".into())
    );
    for (vars, variable) in [
        (
            &[("USE_DOG_STATSD", "true"), ("USE_STATSD", "true")][..],
            "USE_DOG_STATSD",
        ),
        (&[("STATSD_PROTOCOL", "sctp")], "STATSD_PROTOCOL"),
        (&[("STATSD_PORT", "99999")], "STATSD_PORT"),
        (&[("STATS_FLUSH_INTERVAL", "1ms")], "STATS_FLUSH_INTERVAL"),
    ] {
        let error = statsd(vars).expect_err("refused");
        assert_eq!(error.variable, variable, "{vars:?}: {error}");
    }
}

/// Upstream's semantics in the no-argument start, unless ours say otherwise (clap then reads
/// `RLS_WINDOWS` and `RLS_COUNT_DENIED` itself).
#[test]
fn the_no_argument_start_asks_for_upstreams_semantics_unless_ours_are_set() {
    let upstream = [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis:6379")];
    let args = serve_argv(&env(&upstream)).expect("valid").args;
    assert!(
        args.windows(2).any(|w| w == ["--windows", "fixed"]),
        "{args:?}"
    );
    assert!(args.iter().any(|a| a == "--count-denied"), "{args:?}");
    let ours = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("RLS_WINDOWS", "sliding"),
        ("RLS_COUNT_DENIED", "false"),
    ];
    let args = serve_argv(&env(&ours)).expect("valid").args;
    assert!(
        !args
            .iter()
            .any(|a| a == "--windows" || a == "--count-denied"),
        "{args:?}"
    );
}
