//! `guarantee: never_above` is held on one process and across the processes of a region
//! (Redis), not across regions yet: with the global counters, where counts travel between
//! regions and could admit above the limit, a limits file with it is refused, naming each
//! limit's file, line and place: at start the service exits with the message; on a hot
//! reload the running config stays and the rejection is counted and logged, as for any bad
//! config.

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

/// The global counters of a test: a SQLite file in `dir`, region `r1`.
fn global_counters(dir: &tempfile::TempDir) -> Vec<String> {
    let database = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("global.db").display()
    );
    vec![
        "--database-url".into(),
        database,
        "--region".into(),
        "r1".into(),
    ]
}

const REFUSAL: &str = "`guarantee: never_above` is offered on one process and across the processes of one region (Redis), not across regions";

#[test]
fn the_global_counters_refuse_never_above_at_start_and_redis_takes_it() {
    let (dir, path) = support::limits_file(NEVER_ABOVE);
    let config = path.to_string_lossy().into_owned();
    let global = global_counters(&dir);
    let global: Vec<&str> = global.iter().map(String::as_str).collect();
    let (code, stderr) = refused_at_start(&config, &global);
    assert_eq!(code, Some(1), "{stderr}");
    let place = format!("{config}:7: descriptors[0].rate_limit.guarantee:");
    assert!(stderr.contains(&place), "no {place:?} in {stderr}");
    assert!(stderr.contains(REFUSAL), "{stderr}");
    assert!(stderr.contains("--database-url"), "{stderr}");
    // The same file starts with Redis (the processes of a region share rights), and without
    // the key with the global counters.
    let redis = redis_testing::PlainRedis::start_or_fail();
    drop(Service::start(&path, &["--redis-url", &redis.url()]));
    support::replace_file(&path, NEVER_BELOW);
    drop(Service::start(&path, &global));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_never_above_with_the_global_counters_keeps_the_running_config() {
    let (dir, path) = support::limits_file(NEVER_BELOW);
    let global = global_counters(&dir);
    let global: Vec<&str> = global.iter().map(String::as_str).collect();
    let service = Service::start(&path, &global);
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
    support::eventually("the rejection logged", true, || {
        service.log_tail(50).contains(REFUSAL)
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
