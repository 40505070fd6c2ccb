//! Looking at a Redis behind the service's back: is it there, what was it asked, which keys
//! does a prefix hold. Synchronous (the `redis` crate's blocking connection).

use std::collections::HashMap;
use std::time::Duration;

/// The machine's Redis, shared by tests that neither count its commands nor stop it; they
/// keep apart with a unique `--redis-prefix`.
pub const LOCAL_REDIS_URL: &str = "redis://127.0.0.1:6379";

const HOW_TO_START: &str = "install it (apt-get install redis-server) and start it with \
     `redis-server --daemonize yes --port 6379 --save '' --appendonly no` \
     (or run `bash .ci/services.sh`)";

const TIMEOUT: Duration = Duration::from_secs(5);

/// A blocking connection to `url`, panicking with what is missing.
pub fn connect(url: &str) -> redis::Connection {
    let client =
        redis::Client::open(url).unwrap_or_else(|e| panic!("invalid Redis URL {url}: {e}"));
    let conn = client
        .get_connection_with_timeout(TIMEOUT)
        .unwrap_or_else(|e| {
            panic!("Redis is missing: cannot connect to {url} ({e}); {HOW_TO_START}")
        });
    conn.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(TIMEOUT)))
        .expect("set Redis socket timeouts");
    conn
}

/// Fails the test (never skips it) when the machine's Redis does not answer PING.
pub fn require_local_redis() {
    let mut conn = connect(LOCAL_REDIS_URL);
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap_or_else(|e| {
        panic!("Redis on {LOCAL_REDIS_URL} does not answer PING ({e}); {HOW_TO_START}")
    });
    assert_eq!(
        pong, "PONG",
        "Redis on {LOCAL_REDIS_URL} answered PING with {pong:?}"
    );
}

pub use gcounter_redis::testing::unique_prefix;

/// Calls per command since the server started (`INFO commandstats`), by lower-case name
/// (`get`, `incrby`, `exec`, ...).
pub fn command_calls(url: &str) -> HashMap<String, u64> {
    let mut conn = connect(url);
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("INFO commandstats on {url}: {e}"));
    info.lines()
        .filter_map(|line| {
            // cmdstat_get:calls=12,usec=34,usec_per_call=2.83,...
            let (name, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_ascii_lowercase(), calls))
        })
        .collect()
}

/// Every cell under `prefix` on the node at `url` with its region total: the sum of the
/// per-process hits fields of its hash minus the sum of its refund fields (`r:<process>`,
/// each PN-counter component's second half). SCAN + HGETALL.
pub fn counts_under(url: &str, prefix: &str) -> Vec<(String, u64)> {
    pn_counts_under(url, prefix)
        .into_iter()
        .map(|(key, hits, refunds)| (key, hits.saturating_sub(refunds)))
        .collect()
}

/// Every cell under `prefix` on the node at `url` with its region's hits and refunds (the
/// sums of the `<process>` and of the `r:<process>` fields of its hash).
pub fn pn_counts_under(url: &str, prefix: &str) -> Vec<(String, u64, u64)> {
    let mut conn = connect(url);
    let pattern = format!("{}*", glob_escape(prefix));
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1_000)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("SCAN on {url}: {e}"));
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    // The rights of `never_above` counters (`…:<window>:rights`, `…:<window>:rights:<cell>`)
    // sit beside the cells, whose keys end in `:<window>:<cell>`.
    keys.retain(|key| {
        let mut parts = key.rsplit(':');
        let (last, before) = (parts.next(), parts.next());
        last != Some("rights") && before != Some("rights")
    });
    keys.into_iter()
        .map(|key| {
            let fields: Vec<(String, u64)> = redis::cmd("HGETALL")
                .arg(&key)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("HGETALL {key:?} on {url}: {e}"));
            let (refunds, hits): (Vec<_>, Vec<_>) = fields
                .iter()
                .partition(|(field, _)| field.starts_with("r:"));
            let sum = |fields: Vec<&(String, u64)>| fields.iter().map(|(_, n)| n).sum();
            (key, sum(hits), sum(refunds))
        })
        .collect()
}

/// The hits and the refunds summed over the cells under `prefix` whose key holds `part`
/// (a counter's name, a window's duration), on the node at `url`.
pub fn pn_sum_under(url: &str, prefix: &str, part: &str) -> (u64, u64) {
    pn_counts_under(url, prefix)
        .into_iter()
        .filter(|(key, _, _)| key.contains(part))
        .fold((0, 0), |(h, r), (_, hits, refunds)| (h + hits, r + refunds))
}

/// Deletes every key under `prefix` on the node at `url` (tidying the shared Redis).
pub fn delete_under(url: &str, prefix: &str) {
    let keys: Vec<String> = pn_counts_under(url, prefix)
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    if keys.is_empty() {
        return;
    }
    let mut conn = connect(url);
    let _: redis::RedisResult<u64> = redis::cmd("DEL").arg(&keys).query(&mut conn);
}

/// `text` with the glob characters of Redis patterns escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `serve`'s flags for the regional origin at `url` under the key prefix `prefix`, then
/// `extra`.
pub fn redis_args<'a>(url: &'a str, prefix: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--redis-url", url, "--redis-prefix", prefix];
    args.extend_from_slice(extra);
    args
}
