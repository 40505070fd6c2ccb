use super::*;

#[test]
fn backoff_follows_upstreams_library() {
    let halving = Backoff {
        initial: Duration::from_secs(10),
        max: Duration::from_secs(60),
        factor: 0.5,
        jitter: true,
    };
    // Upstream's defaults: a factor below 1 keeps every delay at the initial one.
    for attempt in 0..5 {
        assert_eq!(halving.delay(attempt, 0.9), Duration::from_secs(10));
    }
    let doubling = Backoff {
        factor: 2.0,
        jitter: false,
        ..halving
    };
    assert_eq!(doubling.delay(0, 0.0), Duration::from_secs(10));
    assert_eq!(doubling.delay(1, 0.0), Duration::from_secs(20));
    assert_eq!(doubling.delay(3, 0.0), Duration::from_secs(60));
    assert_eq!(doubling.delay(1000, 0.0), Duration::from_secs(60));
    let jittered = Backoff {
        jitter: true,
        ..doubling
    };
    assert_eq!(jittered.delay(1, 0.5), Duration::from_secs(15));
}

#[derive(clap::Parser)]
struct Cli {
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    xds: XdsArgs,
}

fn settings(argv: &[&str]) -> Result<Option<XdsSettings>, String> {
    use clap::Parser;
    let cli = Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))
        .map_err(|e| e.to_string())?;
    XdsSettings::from_args(&cli.xds).map_err(|e| e.to_string())
}

#[test]
fn the_server_url_and_tls_settings_are_checked() {
    let plain = settings(&["--config-xds-server", "localhost:18000"]);
    let Ok(Some(plain)) = plain else {
        panic!("{plain:?}")
    };
    assert_eq!((plain.host.as_str(), plain.port), ("localhost", 18000));
    assert!(plain.tls.is_none());
    assert_eq!(plain.node_id, "default");
    assert!(!plain.force_start);
    assert!(matches!(settings(&[]), Ok(None)));

    let refused = |argv: &[&str], needle: &str| {
        let result = settings(argv);
        assert!(
            result.as_ref().is_err_and(|e| e.contains(needle)),
            "{argv:?}: {result:?}"
        );
    };
    refused(
        &["--config-xds-server", "https://h:1"],
        "needs --config-xds-ca",
    );
    refused(
        &["--config-xds-server", "grpc://h:1"],
        "neither http nor https",
    );
    refused(&["--config-xds-server", "h"], "needs a host and a port");
    refused(&["--config-xds-server", "h:1/x"], "no path");
    refused(
        &["--config-xds-server", "h:1", "--config-xds-ca", "ca.pem"],
        "needs TLS",
    );
    refused(
        &[
            "--config-xds-server",
            "h:1",
            "--config-xds-tls",
            "--config-xds-ca",
            "ca.pem",
            "--config-xds-client-cert",
            "c.pem",
        ],
        "go together",
    );
    refused(
        &["--force-start-without-initial-config"],
        "needs the xDS config source",
    );
    refused(
        &["--config-xds-server", "h:1", "--config", "x.yaml"],
        "cannot be used with",
    );
    refused(
        &[
            "--config-xds-server",
            "h:1",
            "--config-xds-backoff-initial",
            "2s",
            "--config-xds-backoff-max",
            "1s",
        ],
        "shorter than",
    );

    let tls = settings(&[
        "--config-xds-server",
        "https://[::1]:9",
        "--config-xds-ca",
        "ca.pem",
        "--config-xds-san",
        "xds.internal",
    ]);
    let Ok(Some(tls)) = tls else {
        panic!("{tls:?}")
    };
    assert_eq!(tls.host, "::1");
    assert_eq!(
        tls.tls.map(|t| t.server_name),
        Some("xds.internal".to_owned())
    );
}

#[test]
fn pairs_and_headers_are_checked() {
    let parsed = pairs("m", "a=1,b=x=y", '=').map_err(|e| e.to_string());
    assert_eq!(
        parsed,
        Ok(vec![("a".into(), "1".into()), ("b".into(), "x=y".into())])
    );
    assert_eq!(pairs("m", "", '=').map_err(|e| e.to_string()), Ok(vec![]));
    let refused = pairs("m", "a=1,b", '=').map_err(|e| e.to_string());
    assert_eq!(refused, Err("m: \"b\" is not key=value".to_owned()));

    let parsed = headers("X-Token: abc,y:2").map_err(|e| e.to_string());
    assert!(
        parsed
            .as_ref()
            .is_ok_and(|h| h.len() == 2 && h[0].0 == "x-token" && h[0].1 == "abc"),
        "{parsed:?}"
    );
    assert!(headers("bad name:1").is_err());
    assert!(headers("a:x\u{1}y").is_err());
}
