//! `guarantee: never_above` is held on one process only: with Redis (the processes of a
//! region) or the global counters (regions), where counts travel and could admit above the
//! limit, a limits file with it is refused, naming each limit's file, line and place: at
//! start the service exits with the message; on a hot reload the running config stays and
//! the rejection is counted and logged, as for any bad config.

use gcounter_rls_integration as support;

use gcounter_redis::testing as redis_testing;

use std::process::Command;
use std::time::Duration;

use support::Service;
use support::grpc::{self, limit_of};
use support::process::run_within;

const NEVER_ABOVE: &str = "domain: bounded
descriptors:
  - key: api_key
    rate_limit:
      unit: hour
      requests_per_unit: 1000
      guarantee: never_above
";

const NEVER_BELOW: &str = "domain: bounded
descriptors:
  - key: api_key
    rate_limit:
      unit: hour
      requests_per_unit: 1000
";

/// `serve` on `config` with `extra`: its exit code and stderr, once it stopped by itself.
fn refused_at_start(config: &str, extra: &[&str]) -> (Option<i32>, String) {
    let args = support::serve_argv(config, "127.0.0.1:0", "127.0.0.1:0", extra);
    let mut command = Command::new(support::binary());
    command.args(&args).args(["--debug-addr", "off"]);
    let (output, _, ended) = run_within(&mut command, Duration::from_secs(15));
    assert!(ended, "{args:?}: still running, not refused");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_service_sharing_counts_refuses_never_above_at_start() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let url = redis.url();
    let (dir, path) = support::limits_file(NEVER_ABOVE);
    let config = path.to_string_lossy().into_owned();
    let database = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("global.db").display()
    );
    let tiers: [(&[&str], &str); 2] = [
        (&["--redis-url", &url], "--redis-url"),
        (
            &["--database-url", &database, "--region", "r1"],
            "--database-url",
        ),
    ];
    for (args, flag) in tiers {
        let (code, stderr) = refused_at_start(&config, args);
        assert_eq!(code, Some(1), "{flag}: {stderr}");
        let place = format!("{config}:7: descriptors[0].rate_limit.guarantee:");
        assert!(stderr.contains(&place), "{flag}: no {place:?} in {stderr}");
        assert!(
            stderr.contains("`guarantee: never_above` is offered on one process only"),
            "{flag}: {stderr}"
        );
        assert!(stderr.contains(flag), "{flag}: {stderr}");
    }
    // The same file without the key starts with Redis.
    support::replace_file(&path, NEVER_BELOW);
    let service = Service::start(&path, &["--redis-url", &url]);
    drop(service);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_never_above_with_redis_keeps_the_running_config() {
    let redis = redis_testing::PlainRedis::start_or_fail();
    let url = redis.url();
    let (_dir, path) = support::limits_file(NEVER_BELOW);
    let service = Service::start(&path, &["--redis-url", &url]);
    let client = grpc::rls_client(service.grpc_addr).await;
    let entries = [("api_key", "k")];
    assert_eq!(
        limit_of(client.clone(), "bounded", &entries).await,
        Some(1000)
    );

    // The same limit, now never_above and with another count: refused as a whole.
    support::replace_file(
        &path,
        &NEVER_ABOVE.replace("requests_per_unit: 1000", "requests_per_unit: 5"),
    );
    support::eventually("a rejected reload", true, || {
        service.config_reloads("error") >= 1.0
    });
    let needle = "`guarantee: never_above` is offered on one process only";
    support::eventually("the rejection logged", true, || {
        service.log_tail(50).contains(needle)
    });
    assert!(
        service
            .log_tail(50)
            .contains("descriptors[0].rate_limit.guarantee"),
        "{}",
        service.log_tail(50)
    );
    assert_eq!(
        limit_of(client.clone(), "bounded", &entries).await,
        Some(1000)
    );
    assert!(
        !service.rlconfig().contains("never_above"),
        "{}",
        service.rlconfig()
    );
}
