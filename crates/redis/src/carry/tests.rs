//! Carried components and the count reader against the machine's Redis (127.0.0.1:6379),
//! each test under its own key prefix.

use std::time::Duration;

use super::*;
use crate::testing::{HOW_TO_START_REDIS, unique_prefix};
use gcounter_engine::pn::PnCount;
use gcounter_engine::regional::RegionalOrigin;

const LOCAL_REDIS: &str = "redis://127.0.0.1:6379";

async fn reachable() {
    let connected = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect("127.0.0.1:6379"),
    )
    .await;
    if !matches!(connected, Ok(Ok(_))) {
        panic!("Redis is missing: nothing answers on 127.0.0.1:6379. {HOW_TO_START_REDIS}");
    }
}

fn settings(prefix: &str) -> RedisSettings {
    RedisSettings {
        urls: vec![LOCAL_REDIS.into()],
        key_prefix: prefix.to_owned(),
        ..Default::default()
    }
}

async fn raw(cmd: &redis::Cmd) -> redis::Value {
    let client = redis::Client::open(LOCAL_REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
}

#[tokio::test]
async fn a_region_seeds_a_cell_once_and_replays_count_on_top() {
    reachable().await;
    let prefix = unique_prefix("carry");
    let one = RedisOrigin::connect(settings(&prefix)).unwrap();
    let two = RedisOrigin::connect(settings(&prefix)).unwrap();
    let key = CellKey::new("domain", "3:key/", "1:a", 60_000, 29_000_000);

    let seeded = one.seed(&key, 7).await.unwrap();
    assert_eq!(seeded.total, PnCount::new(7, 0));
    // Another process read a different count later: the region's first seed stays.
    let again = two.seed(&key, 9).await.unwrap();
    assert_eq!(again.total, PnCount::new(7, 0));
    assert_eq!(two.read(&key).await.unwrap().total, PnCount::new(7, 0));

    // The processes' own counts add to it, in replay and in reads.
    let totals = one
        .replay(&[(key.clone(), PnCount::hits(2))])
        .await
        .unwrap();
    assert_eq!(totals, vec![PnCount::new(9, 0)]);
    assert_eq!(two.read(&key).await.unwrap().total, PnCount::new(9, 0));

    // A hash made by a seed expires like any cell's.
    let ttl = raw(redis::cmd("PTTL").arg(one.redis_key(&key))).await;
    let redis::Value::Int(ttl) = ttl else {
        panic!("PTTL answered {ttl:?}");
    };
    assert!(ttl > 0 && ttl <= 180_000, "TTL {ttl} ms");
}

#[tokio::test]
async fn the_reader_reads_integer_keys_and_never_writes_them() {
    reachable().await;
    let prefix = unique_prefix("carry-reader");
    let counted = format!("{prefix}domain_key_value_1700000000");
    let text = format!("{prefix}domain_key_text_1700000000");
    raw(redis::cmd("SET").arg(&counted).arg("7")).await;
    raw(redis::cmd("SET").arg(&text).arg("seven")).await;
    let reader = CountReader::connect(settings("")).unwrap();

    assert_eq!(reader.count(&counted).await.unwrap(), Some(7));
    assert_eq!(
        reader
            .count(&format!("{prefix}domain_key_other_1700000000"))
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        reader.count(&text).await,
        Err(OriginError::InvalidValue(_))
    ));
    // A value longer than any count is refused after reading COUNT_BYTES + 1 of it.
    let long = format!("{prefix}domain_key_long_1700000000");
    raw(redis::cmd("SET").arg(&long).arg("7".repeat(1 << 20))).await;
    assert!(matches!(
        reader.count(&long).await,
        Err(OriginError::InvalidValue(_))
    ));
    raw(redis::cmd("DEL").arg(&long)).await;
    // Read-only: the key still holds upstream's count.
    let after = raw(redis::cmd("GET").arg(&counted)).await;
    assert_eq!(after, redis::Value::BulkString(b"7".to_vec()));
    raw(redis::cmd("DEL").arg(&counted).arg(&text)).await;
}
