//! The Redis origin against real servers: the machine's Redis on 127.0.0.1:6379, plus servers
//! these tests start (a cluster, a TLS node, a node that comes up late, a node whose scripts a
//! test flushes).
//!
//! A cell is a hash with one PN-counter component per process (fields `<process>`, its
//! cumulative hits, and `r:<process>`, its cumulative refunds); replay keeps each field's max
//! and answers the sums. The property everything rests on: publishing the same (or
//! an older) cumulative count again changes nothing, so no resend can count work twice.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::testing::{
    HOW_TO_START_REDIS, PlainRedis, RedisCluster, SentinelSet, TlsOptions, TlsRedis, UnixRedis,
    free_ports,
};
use super::*;
use redis::cluster_routing::Slot;

const LOCAL_REDIS: &str = "redis://127.0.0.1:6379";

/// Most tests below publish hits only (refunds have their own tests): replay through a
/// G-Counter's view of the batch and of the totals.
trait ReplayHits {
    async fn replay_hits(&self, batch: &[(CellKey, u64)]) -> Result<Vec<u64>, OriginError>;

    /// One cell's cumulative `hits` of this process: the cell's total after, `None` on an
    /// error.
    async fn replay_one(&self, key: &CellKey, hits: u64) -> Option<u64> {
        let totals = self.replay_hits(&[(key.clone(), hits)]).await.ok()?;
        assert_eq!(totals.len(), 1, "one total for one cell: {totals:?}");
        totals.first().copied()
    }
}

impl ReplayHits for RedisOrigin {
    async fn replay_hits(&self, batch: &[(CellKey, u64)]) -> Result<Vec<u64>, OriginError> {
        let batch: Vec<(CellKey, PnCount)> = batch
            .iter()
            .map(|(key, hits)| (key.clone(), PnCount::hits(*hits)))
            .collect();
        let totals = self.replay(&batch).await?;
        Ok(totals.into_iter().map(|total| total.hits).collect())
    }
}

fn settings(urls: &[String], cluster: bool) -> RedisSettings {
    RedisSettings {
        urls: urls.to_vec(),
        cluster,
        key_prefix: crate::testing::unique_prefix("origin"),
        ..Default::default()
    }
}

/// Another process of the same region: same Redis, same prefix, its own field.
pub(crate) fn another_process(origin: &RedisOrigin, urls: &[String]) -> RedisOrigin {
    RedisOrigin::connect(RedisSettings {
        urls: urls.to_vec(),
        cluster: origin.is_cluster(),
        key_prefix: origin.key_prefix.clone(),
        ..Default::default()
    })
    .expect("valid settings")
}

/// The machine's Redis, or a failed test saying how to start it.
pub(crate) async fn local_redis() -> RedisOrigin {
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

/// A 3-node cluster of this test's own, its node URLs and an origin on it.
fn cluster_origin() -> (RedisCluster, Vec<String>, RedisOrigin) {
    let cluster = RedisCluster::start_or_fail(3);
    let urls = cluster.urls();
    let origin = RedisOrigin::connect(settings(&urls, true)).expect("valid settings");
    (cluster, urls, origin)
}

/// `n` cells of distinct counters: spread over a cluster's slots.
fn spread_cells(n: usize) -> Vec<CellKey> {
    (0..n).map(|i| cell(&format!("{i}"), 60_000, 1)).collect()
}

/// One batch publishing the same cumulative `count` for each of `keys`.
fn each(keys: &[CellKey], count: u64) -> Vec<(CellKey, u64)> {
    keys.iter().map(|k| (k.clone(), count)).collect()
}

/// A plain connection for looking at keys behind the origin's back.
async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("valid url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers")
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

/// A cell hash's fields, read directly from one node.
async fn fields(url: &str, name: &str) -> HashMap<String, String> {
    admin(url, &["HGETALL", name]).await
}

pub(crate) fn cell(identifier: &str, duration_ms: u64, sequence: u64) -> CellKey {
    CellKey {
        scope: gcounter_engine::cell_key::Scope::new("d", "1:k/"),
        identifier: identifier.into(),
        duration_ms,
        sequence,
    }
}

/// A runtime for the plain tests of `connect`, which needs one to spawn its connection
/// tasks on: enter it while the origins live.
fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Settings on the written `urls`, a cluster or not, keys under `prefix`.
fn settings_on(urls: &[&str], cluster: bool, prefix: &str) -> RedisSettings {
    RedisSettings {
        urls: urls.iter().map(|u| u.to_string()).collect(),
        cluster,
        key_prefix: prefix.into(),
        ..Default::default()
    }
}

/// Settings on the sentinels at `urls`, watching the master `name`.
fn sentinels_on(urls: &[&str], name: &str) -> RedisSettings {
    RedisSettings {
        sentinel: Some(SentinelMaster {
            name: name.into(),
            ..Default::default()
        }),
        ..settings_on(urls, false, "rl:")
    }
}

fn total_own(total: u64, own: u64) -> CellRead {
    CellRead {
        total: PnCount::hits(total),
        own: PnCount::hits(own),
    }
}

#[test]
fn settings_that_can_never_work_are_refused() {
    let runtime = current_thread_runtime();
    let _inside = runtime.enter();
    let with = |urls: &[&str], cluster: bool, prefix: &str| {
        RedisOrigin::connect(settings_on(urls, cluster, prefix))
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
            ..Default::default()
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
        ..Default::default()
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
    let settings = RedisSettings {
        urls: vec![LOCAL_REDIS.into()],
        cluster: false,
        key_prefix: "rl:".into(),
        ..Default::default()
    };
    // Checking needs no runtime: a server checks before it starts one.
    assert!(settings.check().is_ok());
    let origin = RedisOrigin::connect(settings);
    assert!(matches!(origin, Err(RedisConfigError::NoRuntime)));
}

/// `check` refuses, outside any runtime, what `connect` refuses inside one, and passes what
/// it takes: one node, a cluster, the sentinels.
#[test]
fn checking_the_settings_needs_no_runtime_and_refuses_what_connect_refuses() {
    let refused = [
        ("no URL", settings_on(&[], false, "rl:")),
        (
            "a brace in the prefix",
            settings_on(&[LOCAL_REDIS], false, "{rl}:"),
        ),
        (
            "an http URL",
            settings_on(&["http://127.0.0.1:6379"], false, "rl:"),
        ),
        ("no scheme", settings_on(&["127.0.0.1:6379"], false, "rl:")),
        (
            "a bad cluster seed",
            settings_on(&["redis://127.0.0.1:7000", "not a url"], false, "rl:"),
        ),
        (
            "an empty master name",
            sentinels_on(&["redis://s1:26379"], ""),
        ),
        (
            "mixed sentinel schemes",
            sentinels_on(&["redis://s1:26379", "rediss://s2:26379"], "m"),
        ),
    ];
    for (case, settings) in refused {
        assert!(settings.check().is_err(), "{case}: {settings:?}");
    }
    let taken = [
        ("one node", settings_on(&[LOCAL_REDIS], false, "rl:")),
        (
            "a cluster",
            settings_on(
                &["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"],
                false,
                "rl:",
            ),
        ),
        ("sentinels", sentinels_on(&["redis://s1:26379"], "m")),
    ];
    for (case, settings) in taken {
        assert!(settings.check().is_ok(), "{case}: {settings:?}");
    }
}

#[tokio::test]
async fn every_connect_is_a_new_process_with_its_own_field() {
    let settings = || RedisSettings {
        urls: vec![LOCAL_REDIS.into()],
        cluster: false,
        key_prefix: "rl:".into(),
        ..Default::default()
    };
    let ids: std::collections::HashSet<String> = (0..50)
        .map(|_| {
            RedisOrigin::connect(settings())
                .expect("valid settings")
                .process_id()
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 50, "process ids repeat: {ids:?}");
    assert!(ids.iter().all(|id| !id.is_empty()), "{ids:?}");
}

#[tokio::test]
async fn replay_returns_region_totals_and_read_returns_total_and_own() {
    let origin = local_redis().await;
    let (a, b) = (cell("1:a", 60_000, 5), cell("1:b", 60_000, 5));
    assert_eq!(origin.read(&a).await.ok(), Some(total_own(0, 0)));
    let totals = origin.replay_hits(&[(a.clone(), 2), (b.clone(), 1)]).await;
    assert_eq!(totals.ok(), Some(vec![2, 1]));
    // Counts are cumulative: the next replay carries this process's whole count so far.
    let totals = origin.replay_hits(&[(b.clone(), 4), (a.clone(), 6)]).await;
    assert_eq!(totals.ok(), Some(vec![4, 6]));
    assert_eq!(origin.read(&a).await.ok(), Some(total_own(6, 6)));
    assert_eq!(origin.read(&b).await.ok(), Some(total_own(4, 4)));
    // One cell twice in a batch: entries apply in order, each answers the total after it.
    let totals = origin
        .replay_hits(&[(a.clone(), 9), (a.clone(), 7), (b.clone(), 4)])
        .await;
    assert_eq!(totals.ok(), Some(vec![9, 9, 4]));
    // The hash holds one field, this process's, with its cumulative count.
    let hash = fields(LOCAL_REDIS, &origin.redis_key(&a)).await;
    assert_eq!(
        hash,
        HashMap::from([(origin.process_id().to_owned(), "9".to_owned())])
    );
    // Another window of the same counter is another cell.
    assert_eq!(
        origin.read(&cell("1:a", 60_000, 6)).await.ok(),
        Some(total_own(0, 0))
    );
    assert_eq!(origin.replay_hits(&[]).await.ok(), Some(vec![]));
    assert_eq!(origin.name(), "redis");
}

#[tokio::test]
async fn publishing_the_same_or_an_older_count_again_changes_nothing() {
    let origin = local_redis().await;
    let (a, b) = (cell("1:idem-a", 60_000, 1), cell("1:idem-b", 60_000, 1));
    let batch = [(a.clone(), 5), (b.clone(), 2)];
    for _ in 0..3 {
        // A resend (a retry after a timeout whose command did land) counts once.
        assert_eq!(origin.replay_hits(&batch).await.ok(), Some(vec![5, 2]));
    }
    // An older count (a late, reordered send) cannot lower a component either.
    let older = [(a.clone(), 3), (b.clone(), 0)];
    assert_eq!(origin.replay_hits(&older).await.ok(), Some(vec![5, 2]));
    assert_eq!(origin.read(&a).await.ok(), Some(total_own(5, 5)));
    assert_eq!(origin.read(&b).await.ok(), Some(total_own(2, 2)));
    let hash = fields(LOCAL_REDIS, &origin.redis_key(&a)).await;
    assert_eq!(
        hash,
        HashMap::from([(origin.process_id().to_owned(), "5".to_owned())])
    );
    // Only a larger count moves it.
    let totals = origin.replay_hits(&[(a.clone(), 8), (b.clone(), 2)]).await;
    assert_eq!(totals.ok(), Some(vec![8, 2]));
}

#[tokio::test]
async fn a_zero_count_reads_without_creating_a_key() {
    let origin = local_redis().await;
    let key = cell("1:zero", 20_000, 1);
    assert_eq!(origin.replay_one(&key, 0).await, Some(0));
    let exists: i64 = admin(LOCAL_REDIS, &["EXISTS", &origin.redis_key(&key)]).await;
    assert_eq!(exists, 0);
    assert_eq!(origin.read(&key).await.ok(), Some(total_own(0, 0)));
    // Another process's count shows through a zero of this one.
    let other = another_process(&origin, &[LOCAL_REDIS.into()]);
    assert_eq!(other.replay_one(&key, 3).await, Some(3));
    assert_eq!(origin.replay_one(&key, 0).await, Some(3));
    assert_eq!(origin.read(&key).await.ok(), Some(total_own(3, 0)));
}

#[tokio::test]
async fn two_processes_sum_their_components_and_each_reads_its_own() {
    let first = local_redis().await;
    let second = another_process(&first, &[LOCAL_REDIS.into()]);
    assert_ne!(first.process_id(), second.process_id());
    let key = cell("1:shared", 60_000, 9);
    assert_eq!(first.replay_one(&key, 4).await, Some(4));
    assert_eq!(second.replay_one(&key, 1).await, Some(5));
    // Each resends its own count: nothing moves; each grows only its own component.
    assert_eq!(first.replay_one(&key, 4).await, Some(5));
    assert_eq!(second.replay_one(&key, 1).await, Some(5));
    assert_eq!(second.replay_one(&key, 3).await, Some(7));
    assert_eq!(first.read(&key).await.ok(), Some(total_own(7, 4)));
    assert_eq!(second.read(&key).await.ok(), Some(total_own(7, 3)));
    let hash = fields(LOCAL_REDIS, &first.redis_key(&key)).await;
    assert_eq!(
        hash,
        HashMap::from([
            (first.process_id().to_owned(), "4".to_owned()),
            (second.process_id().to_owned(), "3".to_owned()),
        ])
    );
    // A restarted process is a new component: it starts from 0 and cannot overwrite the old.
    let restarted = another_process(&first, &[LOCAL_REDIS.into()]);
    assert_eq!(restarted.read(&key).await.ok(), Some(total_own(7, 0)));
    assert_eq!(restarted.replay_one(&key, 1).await, Some(8));
}

#[tokio::test]
async fn refunds_are_a_second_grow_only_field_per_process_capped_at_its_hits() {
    let first = local_redis().await;
    let second = another_process(&first, &[LOCAL_REDIS.into()]);
    let key = cell("1:refunds", 60_000, 3);
    let name = first.redis_key(&key);
    let pn = PnCount::new;
    // A hash written before refunds existed (hits fields only) reads unchanged.
    let _: i64 = admin(LOCAL_REDIS, &["HSET", &name, "0123456789abcdef", "5"]).await;
    assert_eq!(first.read(&key).await.ok().map(|r| r.total), Some(pn(5, 0)));
    assert_eq!(
        first.replay(&[(key.clone(), pn(8, 3))]).await.ok(),
        Some(vec![pn(13, 3)])
    );
    // Resending, or an older refund, changes nothing: each half keeps its max.
    let again = first
        .replay(&[(key.clone(), pn(8, 3)), (key.clone(), pn(8, 1))])
        .await;
    assert_eq!(again.ok(), Some(vec![pn(13, 3); 2]));
    // A process cannot refund more than it consumed itself (the refund rule).
    assert_eq!(
        second.replay(&[(key.clone(), pn(2, 9))]).await.ok(),
        Some(vec![pn(15, 5)])
    );
    assert_eq!(
        second.read(&key).await.ok(),
        Some(CellRead {
            total: pn(15, 5),
            own: pn(2, 2)
        })
    );
    assert_eq!(first.read(&key).await.ok().map(|r| r.own), Some(pn(8, 3)));
    let hash = fields(LOCAL_REDIS, &name).await;
    assert_eq!(
        hash.get(&format!("r:{}", first.process_id())),
        Some(&"3".to_owned())
    );
    assert_eq!(
        hash.get(&format!("r:{}", second.process_id())),
        Some(&"2".to_owned())
    );
    // A refund field written past its hits (by hand, or corrupted) is capped when read.
    let _: i64 = admin(LOCAL_REDIS, &["HSET", &name, "r:0123456789abcdef", "50"]).await;
    assert_eq!(
        first.read(&key).await.ok().map(|r| r.total),
        Some(pn(15, 10))
    );
    let replayed = first.replay(&[(key.clone(), pn(8, 3))]).await;
    assert_eq!(replayed.ok(), Some(vec![pn(15, 10)]));
}

#[tokio::test]
async fn cells_are_hashes_that_live_about_three_windows() {
    let origin = local_redis().await;
    let key = cell("1:ttl", 20_000, 1);
    let name = origin.redis_key(&key);
    assert!(origin.replay_hits(&[(key.clone(), 1)]).await.is_ok());
    let kind: String = admin(LOCAL_REDIS, &["TYPE", &name]).await;
    assert_eq!(kind, "hash");
    let ttl: i64 = admin(LOCAL_REDIS, &["PTTL", &name]).await;
    assert!((55_000..=60_000).contains(&ttl), "PTTL {ttl}");
    // Every publication refreshes the expiry, a resend of the same count too.
    let _: i64 = admin(LOCAL_REDIS, &["PEXPIRE", &name, "5000"]).await;
    assert_eq!(origin.replay_one(&key, 1).await, Some(1));
    let ttl: i64 = admin(LOCAL_REDIS, &["PTTL", &name]).await;
    assert!((55_000..=60_000).contains(&ttl), "PTTL {ttl}");
}

#[tokio::test]
async fn the_script_is_loaded_again_after_script_flush() {
    // A server of its own: flushing the shared one's scripts would disturb other tests.
    let redis = PlainRedis::start_or_fail();
    let url = redis.url();
    let origin =
        RedisOrigin::connect(settings(std::slice::from_ref(&url), false)).expect("valid settings");
    let (a, b) = (cell("1:flush-a", 60_000, 1), cell("1:flush-b", 60_000, 1));
    // A fresh server never saw the script: the first replay loads it.
    let totals = origin.replay_hits(&[(a.clone(), 1), (b.clone(), 2)]).await;
    assert_eq!(totals.ok(), Some(vec![1, 2]));
    for round in 1..=3 {
        let _: () = admin(&url, &["SCRIPT", "FLUSH"]).await;
        let loaded: Vec<bool> =
            admin(&url, &["SCRIPT", "EXISTS", origin.replay_script.get_hash()]).await;
        assert_eq!(loaded, vec![false]);
        let totals = origin
            .replay_hits(&[(a.clone(), 1 + round), (b.clone(), 2)])
            .await;
        assert_eq!(totals.ok(), Some(vec![1 + round, 2]), "round {round}");
        // The resend after the reload counted once.
        assert_eq!(
            origin.read(&a).await.ok(),
            Some(total_own(1 + round, 1 + round))
        );
    }
}

#[tokio::test]
async fn a_key_that_is_not_a_cell_hash_answers_0_and_the_rest_of_the_batch_its_total() {
    let origin = local_redis().await;
    let name = |key: &CellKey| origin.redis_key(key);
    let good = cell("1:good", 60_000, 1);
    let mut garbage = Vec::new();
    // Another program's strings (a number too: a string is not a hash).
    for (id, value) in [("1:text", "abc"), ("1:number", "7")] {
        let key = cell(id, 60_000, 1);
        let _: () = admin(LOCAL_REDIS, &["SET", &name(&key), value, "PX", "60000"]).await;
        garbage.push(key);
    }
    let list = cell("1:list", 60_000, 1);
    let _: i64 = admin(LOCAL_REDIS, &["RPUSH", &name(&list), "x"]).await;
    garbage.push(list);
    // Hashes whose fields are not counts: another field, this process's own, a negative one.
    for (id, field, value) in [
        ("1:other-text", "someone", "abc"),
        ("1:own-text", origin.process_id(), "abc"),
        ("1:negative", "someone", "-3"),
    ] {
        let key = cell(id, 60_000, 1);
        let _: i64 = admin(LOCAL_REDIS, &["HSET", &name(&key), field, value]).await;
        garbage.push(key);
    }

    for key in &garbage {
        let read = origin.read(key).await;
        assert!(
            matches!(read, Err(OriginError::InvalidValue(_))),
            "{key:?}: {read:?}"
        );
    }
    // The good key's total comes back, the bad ones answer 0; the batch is not failed (a
    // retry could not cure it, and it would hold the good cells back forever).
    for (round, count) in [(1, 5), (2, 5), (3, 6)] {
        let mut batch = vec![(good.clone(), count)];
        batch.extend(garbage.iter().map(|k| (k.clone(), 1)));
        batch.push((garbage[0].clone(), 0));
        let totals = origin.replay_hits(&batch).await;
        let mut expected = vec![count];
        expected.extend(vec![0; garbage.len() + 1]);
        assert_eq!(totals.ok(), Some(expected), "round {round}");
    }
    assert_eq!(origin.read(&good).await.ok(), Some(total_own(6, 6)));
    // Another program's key is left as it was.
    let text: String = admin(LOCAL_REDIS, &["GET", &name(&garbage[0])]).await;
    assert_eq!(text, "abc");
    let kind: String = admin(LOCAL_REDIS, &["TYPE", &name(&garbage[2])]).await;
    assert_eq!(kind, "list");
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
            let replay = origin.replay_hits(&[(cell("1:x", 1_000, 1), 1)]).await;
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

/// Calls until one succeeds, `pause` apart; the last error after 10 s.
async fn until_ok<T>(
    pause: Duration,
    mut call: impl AsyncFnMut() -> Result<T, OriginError>,
) -> Result<T, OriginError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match call().await {
            Ok(answer) => return Ok(answer),
            Err(error) if Instant::now() > deadline => return Err(error),
            Err(_) => tokio::time::sleep(pause).await,
        }
    }
}

/// Reads until a read succeeds (a reconnect may cost a failed call or two).
async fn eventually_read(origin: &RedisOrigin, key: &CellKey) -> Result<CellRead, OriginError> {
    until_ok(Duration::from_millis(50), async || origin.read(key).await).await
}

/// Replays the same cumulative count twice: the G-Counter keeps the `max`, so the resend
/// counts once.
async fn assert_a_resend_counts_once(origin: &RedisOrigin, key: &CellKey) {
    for _ in 0..2 {
        assert_eq!(origin.replay_one(key, 2).await, Some(2));
    }
    assert_eq!(origin.read(key).await.ok(), Some(total_own(2, 2)));
}

/// An origin made before its server runs fails its calls (start-up does not need Redis);
/// once `start` brings the server up the origin uses it, loading the replay script on the
/// new server. Returns the server, to keep it running.
async fn assert_used_once_up<S>(origin: &RedisOrigin, start: impl FnOnce() -> S) -> S {
    let key = cell("1:late", 60_000, 1);
    assert!(matches!(
        origin.read(&key).await,
        Err(OriginError::Unavailable(_))
    ));
    assert!(origin.replay_hits(&[(key.clone(), 2)]).await.is_err());
    let server = start();
    assert_eq!(
        eventually_read(origin, &key).await.ok(),
        Some(total_own(0, 0))
    );
    assert_a_resend_counts_once(origin, &key).await;
    server
}

/// Replays until one succeeds (a cluster may need a moment to agree on its slots).
async fn eventually_replay(
    origin: &RedisOrigin,
    batch: &[(CellKey, u64)],
) -> Result<Vec<u64>, OriginError> {
    until_ok(Duration::from_millis(100), async || {
        origin.replay_hits(batch).await
    })
    .await
}

#[tokio::test]
async fn a_redis_that_comes_up_late_is_used_once_it_answers() {
    let port = free_ports(1).expect("a free port")[0];
    let origin = RedisOrigin::connect(settings(&[format!("redis://127.0.0.1:{port}")], false))
        .expect("start-up does not need Redis");
    let _redis = assert_used_once_up(&origin, || {
        PlainRedis::start_on(port).unwrap_or_else(|e| panic!("{e}"))
    })
    .await;
}

#[tokio::test]
async fn a_cluster_splits_the_batch_by_slot_keeps_batch_order_and_counts_a_resend_once() {
    let (_cluster, urls, origin) = cluster_origin();
    assert!(origin.is_cluster());

    let keys = spread_cells(200);
    let slots: std::collections::HashSet<_> = keys
        .iter()
        .map(|k| Slot::for_key(origin.redis_key(k)))
        .collect();
    assert!(
        slots.len() > 150,
        "the batch spans many slots ({})",
        slots.len()
    );

    // Each key twice in one batch: first 1, then 1 + i (the total after each entry).
    let mut batch = each(&keys, 1);
    batch.extend(
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), 1 + i as u64)),
    );
    let totals = origin.replay_hits(&batch).await.expect("cluster replay");
    let expected: Vec<u64> = (0..200).map(|_| 1).chain((0..200).map(|i| 1 + i)).collect();
    assert_eq!(totals, expected);
    // The same batch again: every entry now answers the max, nothing is added.
    for _ in 0..2 {
        let totals = origin.replay_hits(&batch).await.expect("cluster replay");
        let expected: Vec<u64> = (0..2).flat_map(|_| 1..=200).collect();
        assert_eq!(totals, expected);
    }

    // Read back through this origin and through another process seeded with one node only.
    let other = RedisOrigin::connect(RedisSettings {
        urls: vec![urls[2].clone()],
        cluster: true,
        key_prefix: origin.key_prefix.clone(),
        ..Default::default()
    })
    .expect("valid settings");
    for (i, key) in keys.iter().enumerate() {
        let n = 1 + i as u64;
        assert_eq!(
            origin.read(key).await.ok(),
            Some(total_own(n, n)),
            "{key:?}"
        );
        assert_eq!(other.read(key).await.ok(), Some(total_own(n, 0)), "{key:?}");
    }
    // The other process adds its own components.
    let its = each(&keys, 2);
    let totals = other.replay_hits(&its).await.expect("cluster replay");
    assert_eq!(totals, (3..=202).collect::<Vec<u64>>());
    for (i, key) in keys.iter().enumerate() {
        let n = 1 + i as u64;
        assert_eq!(
            origin.read(key).await.ok(),
            Some(total_own(n + 2, n)),
            "{key:?}"
        );
    }

    // Behind both: each node holds some of the 200 hashes.
    let mut per_node = Vec::new();
    for url in &urls {
        let count: i64 = admin(url, &["DBSIZE"]).await;
        per_node.push(count);
    }
    assert_eq!(per_node.iter().sum::<i64>(), 200, "{per_node:?}");
    assert!(
        per_node.iter().all(|&n| n > 0),
        "every node got keys: {per_node:?}"
    );
}

#[tokio::test]
async fn a_cluster_reloads_the_script_after_script_flush() {
    let (_cluster, urls, origin) = cluster_origin();
    let keys = spread_cells(30);
    let batch = |count: u64| each(&keys, count);
    // New nodes never saw the script: the first replay loads it.
    assert_eq!(origin.replay_hits(&batch(1)).await.ok(), Some(vec![1; 30]));
    for count in [2, 3] {
        for url in &urls {
            let _: () = admin(url, &["SCRIPT", "FLUSH"]).await;
        }
        assert_eq!(
            origin.replay_hits(&batch(count)).await.ok(),
            Some(vec![count; 30])
        );
    }
    // Only one node lost it.
    let _: () = admin(&urls[1], &["SCRIPT", "FLUSH"]).await;
    assert_eq!(origin.replay_hits(&batch(3)).await.ok(), Some(vec![3; 30]));
    for key in &keys {
        assert_eq!(
            origin.read(key).await.ok(),
            Some(total_own(3, 3)),
            "{key:?}"
        );
    }
}

#[tokio::test]
async fn a_dead_cluster_node_fails_the_batch_in_bounded_time_and_the_resend_counts_once() {
    let (mut cluster, urls, origin) = cluster_origin();
    let keys = spread_cells(60);
    let batch = |count: u64| each(&keys, count);
    assert_eq!(origin.replay_hits(&batch(1)).await.ok(), Some(vec![1; 60]));

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
    drop(doomed);
    drop(cluster.nodes.remove(0));

    // The batch fails (the engine will send the same counts again), in bounded time; the
    // live slots took the new count anyway, and sending it again does not add it twice.
    for _ in 0..3 {
        let start = Instant::now();
        let replay = origin.replay_hits(&batch(2)).await;
        assert!(replay.is_err(), "{replay:?}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
    for (key, &dead) in keys.iter().zip(&on_dead_node) {
        let read = origin.read(key).await;
        if dead {
            assert!(read.is_err(), "{key:?}: {read:?}");
        } else {
            assert_eq!(read.ok(), Some(total_own(2, 2)), "{key:?}");
        }
    }
}

#[tokio::test]
async fn a_resend_during_and_after_a_slot_migration_counts_once() {
    let (_cluster, urls, origin) = cluster_origin();
    let own = origin.process_id().to_owned();
    // Two cells of one counter: one slot, one pipeline.
    let (moved, stays) = (cell("1:m", 60_000, 1), cell("1:m", 60_000, 2));
    let (moved_name, stays_name) = (origin.redis_key(&moved), origin.redis_key(&stays));
    let batch = |count: u64| [(moved.clone(), count), (stays.clone(), count)];
    assert_eq!(origin.replay_hits(&batch(1)).await.ok(), Some(vec![1, 1]));

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
    // Whatever the answers (with redis 1.8 the batch fails: redis-rs resends the pipeline to
    // the target after ASKING, which covers only its first command), each entry may have
    // landed and been sent again: its component is 1 or 2, never more.
    for _ in 0..3 {
        let _ = origin.replay_hits(&batch(2)).await;
    }
    let on_source = fields(&source, &stays_name).await;
    let mut asking = raw(&target).await;
    let (on_target,): (HashMap<String, String>,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("HGETALL")
        .arg(&moved_name)
        .query_async(&mut asking)
        .await
        .expect("HGETALL with ASKING");
    for hash in [&on_source, &on_target] {
        assert_eq!(hash.len(), 1, "{hash:?}");
        assert!(
            matches!(hash.get(&own).map(String::as_str), Some("1" | "2")),
            "{hash:?}"
        );
    }

    // Migration done: both keys on the target, where a resend still counts once. Should a
    // redirected resend have made a copy of the staying cell on the target, that copy holds
    // the same component, so REPLACE loses nothing.
    let _: () = admin(
        &source,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port(&target),
            &stays_name,
            "0",
            "5000",
            "REPLACE",
        ],
    )
    .await;
    for url in [&source, &target] {
        let _: () = admin(url, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]).await;
    }
    for _ in 0..3 {
        let totals = eventually_replay(&origin, &batch(2)).await;
        assert_eq!(totals.ok(), Some(vec![2, 2]));
    }
    assert_eq!(origin.read(&moved).await.ok(), Some(total_own(2, 2)));
    assert_eq!(origin.read(&stays).await.ok(), Some(total_own(2, 2)));
    assert_eq!(fields(&target, &stays_name).await.len(), 1);
}

#[tokio::test]
async fn a_cluster_down_at_start_up_is_connected_once_it_answers() {
    let ports = free_ports(3).expect("free ports");
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let origin = RedisOrigin::connect(settings(&urls, true)).expect("start-up does not need Redis");
    let _cluster = assert_used_once_up(&origin, || {
        RedisCluster::start_on(&ports).unwrap_or_else(|e| panic!("{e}"))
    })
    .await;
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
    assert_a_resend_counts_once(&origin, &key).await;

    // Without the CA the server's certificate is not trusted: an error, not a panic.
    let untrusting = RedisOrigin::connect(settings(&[tls.url()], false)).expect("valid settings");
    assert!(untrusting.read(&key).await.is_err());
}

fn counter(identifier: &str) -> gcounter_engine::cell_key::CounterKey {
    cell(identifier, 60_000, 0).counter().to_owned_key()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::test]
async fn processes_share_the_penalty_box_which_keeps_the_later_moment_and_expires() {
    let a = local_redis().await;
    let b = another_process(&a, &[LOCAL_REDIS.into()]);
    let until = now_ms() + 300_000;
    assert_eq!(b.penalty_until(&counter("x")).await.ok(), Some(0));
    a.penalize(&[(counter("x"), until), (counter("y"), now_ms() + 400)])
        .await
        .expect("penalize");
    b.penalize(&[(counter("x"), until - 100_000)])
        .await
        .expect("penalize");
    assert_eq!(b.penalty_until(&counter("x")).await.ok(), Some(until));
    let ttl: i64 = admin(
        LOCAL_REDIS,
        &["PTTL", &penalty::penalty_key(&a.key_prefix, &counter("x"))],
    )
    .await;
    assert!(
        (290_000..=300_000).contains(&ttl),
        "expires at its moment: {ttl}"
    );
    // a short penalty's key expires by itself
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.penalty_until(&counter("y")).await.ok() != Some(0) {
        assert!(Instant::now() < deadline, "the key never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_cluster_holds_penalties_of_counters_in_many_slots() {
    let (_cluster, urls, a) = cluster_origin();
    let b = another_process(&a, &urls);
    let until = now_ms() + 60_000;
    let penalties: Vec<_> = (0..50).map(|i| (counter(&format!("{i}")), until)).collect();
    a.penalize(&penalties).await.expect("penalize");
    for (counter, _) in &penalties {
        assert_eq!(b.penalty_until(counter).await.ok(), Some(until));
    }
}

/// Retries `replay` until it answers (a lazily made connection, a failover), within 30 s.
async fn replayed_within_30s(origin: &RedisOrigin, batch: &[(CellKey, u64)]) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match origin.replay_hits(batch).await {
            Ok(totals) => return totals,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("replay never succeeded: {error}"),
        }
    }
}

pub(crate) fn sentinel_settings(set: &SentinelSet, password: Option<&str>) -> RedisSettings {
    RedisSettings {
        urls: set.sentinel_urls(),
        sentinel: Some(SentinelMaster {
            name: set.name.clone(),
            username: None,
            password: password.map(str::to_owned),
        }),
        ..settings(&[], false)
    }
}

/// The master the sentinels name, with passwords on the data nodes and on the sentinels
/// (upstream's REDIS_AUTH and REDIS_SENTINEL_AUTH); after `SENTINEL FAILOVER` the origin
/// finds the new master by itself, and republishing the cumulative counts brings the new
/// master up to date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_names_the_master_and_a_failover_moves_the_origin() {
    let set = SentinelSet::start_or_fail("gcrls", Some("n0de"), Some("s3nt"));
    let origin =
        RedisOrigin::connect(sentinel_settings(&set, Some("n0de"))).expect("valid settings");
    assert!(origin.is_sentinel());
    let key = cell("1:sentinel", 600_000, 1);
    assert_eq!(
        replayed_within_30s(&origin, &[(key.clone(), 5)]).await,
        vec![5]
    );
    let old = set.master_port().expect("a master");
    assert_eq!(old, set.nodes[0].port);

    assert_eq!(origin.epoch(), 0);
    let new = set.failover().unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(new, old);
    // While calls come, the origin moves to the new master (the old one is dropped when it is
    // reconfigured, or by the once-a-second recheck) and says so through its epoch.
    let deadline = Instant::now() + Duration::from_secs(15);
    while origin.epoch() == 0 {
        assert!(Instant::now() < deadline, "the origin never moved");
        let _ = origin.replay_hits(&[(key.clone(), 6)]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(origin.epoch(), 1);
    // A replay lands on the new master: it holds the cumulative count (7), whatever
    // replication had carried before.
    assert_eq!(
        replayed_within_30s(&origin, &[(key.clone(), 7)]).await,
        vec![7]
    );
    let on_new = set
        .node_cli(new, &["HGET", &origin.redis_key(&key), origin.process_id()])
        .expect("redis-cli");
    assert_eq!(on_new.trim(), "7", "the new master holds the count");
    assert_eq!(origin.read(&key).await.ok(), Some(total_own(7, 7)));

    // Wrong credentials: an error, not a panic, and never a hang.
    let wrong = RedisOrigin::connect(sentinel_settings(&set, Some("wrong"))).expect("valid");
    let failed =
        tokio::time::timeout(Duration::from_secs(10), wrong.replay_hits(&[(key, 8)])).await;
    assert!(matches!(failed, Ok(Err(_))), "{failed:?}");
}

#[test]
fn sentinel_settings_that_can_never_work_are_refused() {
    let runtime = current_thread_runtime();
    let _guard = runtime.enter();
    let with = |urls: &[&str], name: &str| RedisOrigin::connect(sentinels_on(urls, name));
    assert!(with(&["redis://s1:26379", "redis://s2:26379"], "m").is_ok());
    assert!(matches!(
        with(&["redis://s1:26379"], ""),
        Err(RedisConfigError::Sentinel(_))
    ));
    assert!(matches!(
        with(&["redis://s1:26379", "rediss://s2:26379"], "m"),
        Err(RedisConfigError::BadUrl { .. })
    ));
    assert!(matches!(
        with(&["redis://:a@s1:26379", "redis://:b@s2:26379"], "m"),
        Err(RedisConfigError::BadUrl { .. })
    ));
    assert!(matches!(
        with(&["redis+unix:///tmp/s.sock"], "m"),
        Err(RedisConfigError::BadUrl { .. })
    ));
}

/// Redis on a Unix socket with a password (upstream's REDIS_SOCKET_TYPE=unix + REDIS_AUTH):
/// `redis+unix:///path?pass=…`; a wrong password is an error, and no error text shows it.
#[tokio::test]
async fn a_unix_socket_with_a_password() {
    let redis = UnixRedis::start("s0cket pw").unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "redis+unix://{}?pass=s0cket%20pw",
        redis.socket.to_string_lossy()
    );
    let origin =
        RedisOrigin::connect(settings(std::slice::from_ref(&url), false)).expect("valid settings");
    let key = cell("1:unix", 60_000, 1);
    assert_eq!(
        replayed_within_30s(&origin, &[(key.clone(), 3)]).await,
        vec![3]
    );
    assert_eq!(origin.read(&key).await.ok(), Some(total_own(3, 3)));

    let wrong = url.replace("s0cket%20pw", "wr0ng");
    let origin = RedisOrigin::connect(settings(&[wrong], false)).expect("valid settings");
    let error = origin.read(&key).await.expect_err("wrong password");
    assert!(!error.to_string().contains("wr0ng"), "{error}");
}

/// `tls-auth-clients yes`: without a client certificate Redis refuses the connection; with
/// the one its CA signed (and the private CA for the server), replay and read work.
#[tokio::test]
async fn rediss_with_a_client_certificate() {
    install_tls_provider();
    let tls = TlsRedis::start_with(TlsOptions {
        auth_clients: true,
        ..TlsOptions::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let read = |path: &std::path::Path| std::fs::read(path).expect("read a test file");
    let with = |client: bool| {
        RedisOrigin::connect(RedisSettings {
            tls: RedisTls {
                root_ca_pem: Some(tls.ca_pem.clone()),
                client_cert_pem: client.then(|| read(&tls.client_cert_file)),
                client_key_pem: client.then(|| read(&tls.client_key_file)),
                skip_hostname_verification: false,
            },
            ..settings(&[tls.url()], false)
        })
        .expect("valid settings")
    };
    let key = cell("1:mtls", 60_000, 1);
    let origin = with(true);
    assert_eq!(
        replayed_within_30s(&origin, &[(key.clone(), 2)]).await,
        vec![2]
    );
    assert_eq!(origin.read(&key).await.ok(), Some(total_own(2, 2)));
    assert!(
        with(false).read(&key).await.is_err(),
        "no client certificate"
    );

    // A certificate without its key can never work.
    let half = RedisOrigin::connect(RedisSettings {
        tls: RedisTls {
            client_cert_pem: Some(read(&tls.client_cert_file)),
            ..RedisTls::default()
        },
        ..settings(&[tls.url()], false)
    });
    assert!(matches!(half, Err(RedisConfigError::Tls(_))));
}

/// A server certificate that does not name 127.0.0.1: refused, unless the hostname check is
/// skipped; the chain is still checked (a CA that did not sign it is refused either way).
#[tokio::test]
async fn skipping_the_hostname_check_still_checks_the_chain() {
    install_tls_provider();
    let tls = TlsRedis::start_with(TlsOptions {
        server_names: "DNS:redis.elsewhere.example",
        ..TlsOptions::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let other_ca = TlsRedis::start().unwrap_or_else(|e| panic!("{e}"));
    let with = |ca: &[u8], skip: bool| {
        RedisOrigin::connect(RedisSettings {
            tls: RedisTls {
                root_ca_pem: Some(ca.to_vec()),
                skip_hostname_verification: skip,
                ..RedisTls::default()
            },
            ..settings(&[tls.url()], false)
        })
        .expect("valid settings")
    };
    let key = cell("1:hostname", 60_000, 1);
    assert!(
        with(&tls.ca_pem, false).read(&key).await.is_err(),
        "wrong name"
    );
    let origin = with(&tls.ca_pem, true);
    assert_eq!(
        replayed_within_30s(&origin, &[(key.clone(), 4)]).await,
        vec![4]
    );
    assert!(
        with(&other_ca.ca_pem, true).read(&key).await.is_err(),
        "an unknown CA is refused even without the hostname check"
    );
    // Only one node: a cluster or Sentinel refuses it.
    let cluster = RedisOrigin::connect(RedisSettings {
        tls: RedisTls {
            skip_hostname_verification: true,
            ..RedisTls::default()
        },
        ..settings(&[tls.url()], true)
    });
    assert!(matches!(cluster, Err(RedisConfigError::Tls(_))));
}
