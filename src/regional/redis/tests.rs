//! The Redis origin against real servers: the machine's Redis on 127.0.0.1:6379, plus servers
//! these tests start (a cluster, a TLS node, a node that comes up late).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::testing::{HOW_TO_START_REDIS, PlainRedis, RedisCluster, TlsRedis, free_ports};
use super::*;

const LOCAL_REDIS: &str = "redis://127.0.0.1:6379";

/// A key prefix no other test (or earlier run) uses.
fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "gcrls-test:{}:{nanos}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn settings(urls: &[String], cluster: bool) -> RedisSettings {
    RedisSettings {
        urls: urls.to_vec(),
        cluster,
        key_prefix: unique_prefix(),
    }
}

/// The machine's Redis, or a failed test saying how to start it.
async fn local_redis() -> RedisOrigin {
    let reachable = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect("127.0.0.1:6379"),
    )
    .await;
    if !matches!(reachable, Ok(Ok(_))) {
        panic!("Redis is missing: nothing answers on 127.0.0.1:6379. {HOW_TO_START_REDIS}");
    }
    RedisOrigin::connect(settings(&[LOCAL_REDIS.into()], false)).expect("valid settings")
}

/// A plain connection for looking at keys behind the origin's back.
async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("valid url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers")
}

fn cell(identifier: &str, duration_ms: u64, sequence: u64) -> CellKey {
    CellKey {
        workspace: "d".into(),
        namespace: "1:k/".into(),
        identifier: identifier.into(),
        duration_ms,
        sequence,
    }
}

#[test]
fn settings_that_can_never_work_are_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _inside = runtime.enter();
    let with = |urls: &[&str], cluster: bool, prefix: &str| {
        RedisOrigin::connect(RedisSettings {
            urls: urls.iter().map(|u| u.to_string()).collect(),
            cluster,
            key_prefix: prefix.into(),
        })
    };
    assert!(matches!(
        with(&[], false, "rl:"),
        Err(RedisConfigError::NoUrl)
    ));
    assert!(matches!(
        with(&[], true, "rl:"),
        Err(RedisConfigError::NoUrl)
    ));
    for prefix in ["{rl}:", "rl{", "}"] {
        assert!(matches!(
            with(&["redis://127.0.0.1:6379"], false, prefix),
            Err(RedisConfigError::BadPrefix(_))
        ));
    }
    for url in [
        "http://127.0.0.1:6379",
        "127.0.0.1:6379",
        "redis://",
        "not a url",
    ] {
        assert!(
            matches!(
                with(&[url], false, "rl:"),
                Err(RedisConfigError::BadUrl { .. })
            ),
            "{url}"
        );
        assert!(
            matches!(
                with(&["redis://127.0.0.1:7000", url], false, "rl:"),
                Err(RedisConfigError::BadUrl { .. })
            ),
            "{url} among cluster seeds"
        );
    }
    // A password never shows in an error.
    let error = with(&["http://user:s3cret@127.0.0.1:6379"], false, "rl:")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!error.contains("s3cret"), "{error}");
    assert!(error.contains("***@127.0.0.1"), "{error}");

    let ok = |urls: &[&str], cluster: bool| with(urls, cluster, "rl:").map(|o| o.is_cluster());
    assert_eq!(ok(&["redis://127.0.0.1:6379"], false).ok(), Some(false));
    assert_eq!(
        ok(&["redis://user:pw@127.0.0.1:6379/2"], false).ok(),
        Some(false)
    );
    assert_eq!(
        ok(&["rediss://redis.example:6380"], false).ok(),
        Some(false)
    );
    assert_eq!(ok(&["redis://127.0.0.1:7000"], true).ok(), Some(true));
    assert_eq!(
        ok(&["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], false).ok(),
        Some(true)
    );
    assert_eq!(
        ok(
            &["rediss://a.example:7000", "rediss://b.example:7001"],
            false
        )
        .ok(),
        Some(true)
    );
    // A CA only makes sense with TLS.
    let with_ca = RedisOrigin::connect_with_ca(
        RedisSettings {
            urls: vec!["redis://127.0.0.1:6379".into()],
            cluster: false,
            key_prefix: "rl:".into(),
        },
        Some(b"not used".to_vec()),
    );
    assert!(matches!(with_ca, Err(RedisConfigError::BadUrl { .. })));
}

#[test]
fn settings_debug_hides_passwords() {
    let settings = RedisSettings {
        urls: vec!["rediss://default:s3cret@cache.example:6380/0".into()],
        cluster: false,
        key_prefix: "rl:".into(),
    };
    let shown = format!("{settings:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        shown.contains("rediss://***@cache.example:6380/0"),
        "{shown}"
    );
}

#[test]
fn connecting_outside_a_runtime_is_an_error_not_a_panic() {
    let origin = RedisOrigin::connect(RedisSettings {
        urls: vec![LOCAL_REDIS.into()],
        cluster: false,
        key_prefix: "rl:".into(),
    });
    assert!(matches!(origin, Err(RedisConfigError::NoRuntime)));
}

#[tokio::test]
async fn replay_returns_running_totals_and_read_sees_them() {
    let origin = local_redis().await;
    let (a, b) = (cell("1:a", 60_000, 5), cell("1:b", 60_000, 5));
    assert_eq!(origin.read(&a).await.ok(), Some(0));
    let totals = origin
        .replay(&[(a.clone(), 2), (b.clone(), 1), (a.clone(), 3)])
        .await;
    assert_eq!(totals.ok(), Some(vec![2, 1, 5]));
    let totals = origin.replay(&[(b.clone(), 4), (a.clone(), 1)]).await;
    assert_eq!(totals.ok(), Some(vec![5, 6]));
    assert_eq!(origin.read(&a).await.ok(), Some(6));
    assert_eq!(origin.read(&b).await.ok(), Some(5));
    // Another window of the same counter is another cell.
    assert_eq!(origin.read(&cell("1:a", 60_000, 6)).await.ok(), Some(0));
    assert_eq!(origin.replay(&[]).await.ok(), Some(vec![]));
    assert_eq!(origin.name(), "redis");
}

#[tokio::test]
async fn keys_live_about_three_windows() {
    let origin = local_redis().await;
    let key = cell("1:ttl", 20_000, 1);
    assert!(origin.replay(&[(key.clone(), 1)]).await.is_ok());
    let mut conn = raw(LOCAL_REDIS).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(origin.redis_key(&key))
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!((55_000..=60_000).contains(&ttl), "PTTL {ttl}");
}

#[tokio::test]
async fn a_zero_delta_reads_without_creating_or_extending_a_key() {
    let origin = local_redis().await;
    let key = cell("1:zero", 20_000, 1);
    assert_eq!(origin.replay(&[(key.clone(), 0)]).await.ok(), Some(vec![0]));
    let mut conn = raw(LOCAL_REDIS).await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg(origin.redis_key(&key))
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0);
    assert_eq!(origin.replay(&[(key.clone(), 3)]).await.ok(), Some(vec![3]));
    let _: () = redis::cmd("PEXPIRE")
        .arg(origin.redis_key(&key))
        .arg(5_000)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
    assert_eq!(origin.replay(&[(key.clone(), 0)]).await.ok(), Some(vec![3]));
    let ttl: i64 = redis::cmd("PTTL")
        .arg(origin.redis_key(&key))
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(ttl <= 5_000, "a zero delta extended the key to {ttl} ms");
}

#[tokio::test]
async fn another_process_sees_the_same_totals() {
    let first = local_redis().await;
    let second = RedisOrigin::connect(RedisSettings {
        urls: vec![LOCAL_REDIS.into()],
        cluster: false,
        key_prefix: first.key_prefix.clone(),
    })
    .expect("valid settings");
    let key = cell("1:shared", 60_000, 9);
    assert_eq!(first.replay(&[(key.clone(), 4)]).await.ok(), Some(vec![4]));
    assert_eq!(second.replay(&[(key.clone(), 1)]).await.ok(), Some(vec![5]));
    assert_eq!(first.read(&key).await.ok(), Some(5));
    assert_eq!(second.read(&key).await.ok(), Some(5));
}

#[tokio::test]
async fn a_key_that_holds_no_count_fails_its_read_but_not_the_rest_of_a_replay() {
    let origin = local_redis().await;
    let mut conn = raw(LOCAL_REDIS).await;
    let good = cell("1:good", 60_000, 1);
    let mut garbage = Vec::new();
    for (id, value) in [("1:text", "abc"), ("1:neg", "-3"), ("1:float", "1.5")] {
        let key = cell(id, 60_000, 1);
        let _: () = redis::cmd("SET")
            .arg(origin.redis_key(&key))
            .arg(value)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .expect("SET");
        garbage.push(key);
    }
    let list = cell("1:list", 60_000, 1);
    let _: () = redis::cmd("RPUSH")
        .arg(origin.redis_key(&list))
        .arg("x")
        .query_async(&mut conn)
        .await
        .map(|_: i64| ())
        .expect("RPUSH");
    garbage.push(list);

    for key in &garbage {
        let read = origin.read(key).await;
        assert!(
            matches!(read, Err(OriginError::InvalidValue(_))),
            "{key:?}: {read:?}"
        );
    }
    // The good key's total comes back, the bad ones answer 0; sending again adds once more
    // (had the batch failed, the engine would resend the good delta: counted twice).
    for round in 1..=2 {
        let mut batch = vec![(good.clone(), 5)];
        batch.extend(garbage.iter().map(|k| (k.clone(), 1)));
        batch.push((garbage[0].clone(), 0));
        let totals = origin.replay(&batch).await.expect("the batch is answered");
        assert_eq!(totals, vec![5 * round, 0, 0, 0, 0, 0]);
    }
}

#[tokio::test]
async fn an_unreachable_redis_gives_errors_in_bounded_time() {
    for cluster in [false, true] {
        let origin = RedisOrigin::connect(settings(&["redis://127.0.0.1:1".into()], cluster))
            .expect("start-up does not need Redis");
        for _ in 0..3 {
            let start = Instant::now();
            let read = origin.read(&cell("1:x", 1_000, 1)).await;
            assert!(matches!(read, Err(OriginError::Unavailable(_))), "{read:?}");
            let replay = origin.replay(&[(cell("1:x", 1_000, 1), 1)]).await;
            assert!(
                matches!(replay, Err(OriginError::Unavailable(_))),
                "{replay:?}"
            );
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{:?}",
                start.elapsed()
            );
        }
    }
}

/// Calls until one succeeds (a reconnect may cost a failed call or two).
async fn eventually_read(origin: &RedisOrigin, key: &CellKey) -> Result<u64, OriginError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match origin.read(key).await {
            Ok(total) => return Ok(total),
            Err(error) if Instant::now() > deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test]
async fn a_redis_that_comes_up_late_is_used_once_it_answers() {
    let port = free_ports(1).expect("a free port")[0];
    let origin = RedisOrigin::connect(settings(&[format!("redis://127.0.0.1:{port}")], false))
        .expect("start-up does not need Redis");
    assert!(origin.read(&cell("1:late", 60_000, 1)).await.is_err());
    let _redis = PlainRedis::start_on(port).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        eventually_read(&origin, &cell("1:late", 60_000, 1))
            .await
            .ok(),
        Some(0)
    );
    let replay = origin.replay(&[(cell("1:late", 60_000, 1), 2)]).await;
    assert_eq!(replay.ok(), Some(vec![2]));
}

#[tokio::test]
async fn a_cluster_splits_the_batch_by_slot_and_keeps_batch_order() {
    let cluster = RedisCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls = cluster.urls();
    let origin = RedisOrigin::connect(settings(&urls, true)).expect("valid settings");
    assert!(origin.is_cluster());

    let keys: Vec<CellKey> = (0..200).map(|i| cell(&format!("{i}"), 60_000, 1)).collect();
    let slots: std::collections::HashSet<_> = keys
        .iter()
        .map(|k| Slot::for_key(origin.redis_key(k)))
        .collect();
    assert!(
        slots.len() > 150,
        "the batch spans many slots ({})",
        slots.len()
    );

    // Each key twice in one batch: the second total includes the first delta.
    let mut batch: Vec<(CellKey, u64)> = keys.iter().map(|k| (k.clone(), 1)).collect();
    batch.extend(keys.iter().enumerate().map(|(i, k)| (k.clone(), i as u64)));
    let totals = origin.replay(&batch).await.expect("cluster replay");
    let expected: Vec<u64> = (0..200).map(|_| 1).chain((0..200).map(|i| 1 + i)).collect();
    assert_eq!(totals, expected);

    // Read back through this origin, through another one, and behind both (each node).
    let other = RedisOrigin::connect(RedisSettings {
        urls: vec![urls[2].clone()],
        cluster: true,
        key_prefix: origin.key_prefix.clone(),
    })
    .expect("valid settings");
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(origin.read(key).await.ok(), Some(1 + i as u64), "{key:?}");
        assert_eq!(other.read(key).await.ok(), Some(1 + i as u64), "{key:?}");
    }
    let mut per_node = Vec::new();
    for url in &urls {
        let mut conn = raw(url).await;
        let count: i64 = redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .expect("DBSIZE");
        per_node.push(count);
    }
    assert_eq!(per_node.iter().sum::<i64>(), 200, "{per_node:?}");
    assert!(
        per_node.iter().all(|&n| n > 0),
        "every node got keys: {per_node:?}"
    );
}

#[tokio::test]
async fn a_dead_cluster_node_fails_only_its_slots_and_nothing_is_counted_twice() {
    let mut cluster = RedisCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls = cluster.urls();
    let origin = RedisOrigin::connect(settings(&urls, true)).expect("valid settings");
    let keys: Vec<CellKey> = (0..60).map(|i| cell(&format!("{i}"), 60_000, 1)).collect();
    let batch: Vec<(CellKey, u64)> = keys.iter().map(|k| (k.clone(), 1)).collect();
    assert_eq!(origin.replay(&batch).await.ok(), Some(vec![1; 60]));

    // Which keys live on the node about to die.
    let mut doomed = raw(&urls[0]).await;
    let mut on_dead_node = Vec::new();
    for key in &keys {
        // Keys of other nodes answer MOVED.
        let exists = redis::cmd("EXISTS")
            .arg(origin.redis_key(key))
            .query_async::<i64>(&mut doomed)
            .await;
        on_dead_node.push(matches!(exists, Ok(1)));
    }
    assert!(on_dead_node.iter().any(|&dead| dead) && !on_dead_node.iter().all(|&dead| dead));
    drop(cluster.nodes.remove(0));

    // Twice: live slots add exactly once per replay, dead slots answer 0.
    for live_total in [2, 3] {
        let start = Instant::now();
        let totals = origin
            .replay(&batch)
            .await
            .expect("live slots were applied");
        let expected: Vec<u64> = on_dead_node
            .iter()
            .map(|&dead| if dead { 0 } else { live_total })
            .collect();
        assert_eq!(totals, expected);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
}

/// Sends one command to one node; panics with the command on failure.
async fn admin<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> T {
    let mut conn = raw(url).await;
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?} on {url}: {e}"))
}

#[tokio::test]
async fn a_slot_being_migrated_never_counts_a_key_twice() {
    let cluster = RedisCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls = cluster.urls();
    let origin = RedisOrigin::connect(settings(&urls, true)).expect("valid settings");
    // Two cells of one counter: one slot, one pipeline.
    let (moved, stays) = (cell("1:m", 60_000, 1), cell("1:m", 60_000, 2));
    let (moved_name, stays_name) = (origin.redis_key(&moved), origin.redis_key(&stays));
    let batch = [(moved.clone(), 1), (stays.clone(), 1)];
    assert_eq!(origin.replay(&batch).await.ok(), Some(vec![1, 1]));

    let slot: i64 = admin(&urls[0], &["CLUSTER", "KEYSLOT", &moved_name]).await;
    let slot = slot.to_string();
    let mut source = None;
    for url in &urls {
        let count: i64 = admin(url, &["CLUSTER", "COUNTKEYSINSLOT", &slot]).await;
        if count == 2 {
            source = Some(url.clone());
        }
    }
    let source = source.expect("a node holds both keys");
    let target = urls
        .iter()
        .find(|u| **u != source)
        .expect("another node")
        .clone();
    let port = |url: &str| url.rsplit(':').next().unwrap_or_default().to_owned();
    let source_id: String = admin(&source, &["CLUSTER", "MYID"]).await;
    let target_id: String = admin(&target, &["CLUSTER", "MYID"]).await;

    // Half-way through a migration: one key on each node.
    let _: () = admin(
        &target,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
    )
    .await;
    let _: () = admin(
        &source,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
    )
    .await;
    let _: () = admin(
        &source,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port(&target),
            &moved_name,
            "0",
            "5000",
        ],
    )
    .await;
    // Whatever the answer, neither key may have been added to twice (or at all).
    let _ = origin.replay(&batch).await;
    let on_source: Option<i64> = admin(&source, &["GET", &stays_name]).await;
    let mut asking = raw(&target).await;
    let (on_target,): (Option<i64>,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("GET")
        .arg(&moved_name)
        .query_async(&mut asking)
        .await
        .expect("GET with ASKING");
    assert!(matches!(on_source, Some(1 | 2)), "{on_source:?}");
    assert!(matches!(on_target, Some(1 | 2)), "{on_target:?}");
    assert_eq!(on_source, on_target, "a pipeline was applied in part");

    // Migration done: both keys on the target, the next replay adds exactly once.
    let _: () = admin(
        &source,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port(&target),
            &stays_name,
            "0",
            "5000",
        ],
    )
    .await;
    for url in [&source, &target] {
        let _: () = admin(url, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]).await;
    }
    let before = on_source.unwrap_or_default() as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    let totals = loop {
        match origin.replay(&batch).await {
            Ok(totals) => break totals,
            Err(error) if Instant::now() > deadline => panic!("{error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert_eq!(totals, vec![before + 1, before + 1]);
}

#[tokio::test]
async fn a_cluster_down_at_start_up_is_connected_once_it_answers() {
    let ports = free_ports(3).expect("free ports");
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let origin = RedisOrigin::connect(settings(&urls, true)).expect("start-up does not need Redis");
    let key = cell("1:late", 60_000, 1);
    assert!(matches!(
        origin.read(&key).await,
        Err(OriginError::Unavailable(_))
    ));
    assert!(origin.replay(&[(key.clone(), 1)]).await.is_err());

    let _cluster = RedisCluster::start_on(&ports).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(eventually_read(&origin, &key).await.ok(), Some(0));
    assert_eq!(origin.replay(&[(key.clone(), 2)]).await.ok(), Some(vec![2]));
}

#[tokio::test]
async fn rediss_works_with_a_private_ca() {
    install_tls_provider();
    install_tls_provider();
    let tls = TlsRedis::start().unwrap_or_else(|e| panic!("{e}"));
    let origin =
        RedisOrigin::connect_with_ca(settings(&[tls.url()], false), Some(tls.ca_pem.clone()))
            .expect("valid settings");
    let key = cell("1:tls", 60_000, 1);
    assert_eq!(origin.replay(&[(key.clone(), 2)]).await.ok(), Some(vec![2]));
    assert_eq!(origin.read(&key).await.ok(), Some(2));

    // Without the CA the server's certificate is not trusted: an error, not a panic.
    let untrusting = RedisOrigin::connect(settings(&[tls.url()], false)).expect("valid settings");
    assert!(untrusting.read(&key).await.is_err());
}
