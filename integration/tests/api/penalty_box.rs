//! The penalty box (`penalty:` on a rate limit, our extension after Fastly's Edge Rate
//! Limiting) through the real binary: a client that went over stays denied for the penalty,
//! past its window, told how long is left (`duration_until_reset`); other clients are not
//! touched; and through a real Redis the other processes of the region hold it too, across a
//! window rollover in which the window alone would let it through.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::grpc::{Code, code, duration_ms};
use support::redis_admin::{self, LOCAL_REDIS_URL, redis_args};
use support::rls::Rls;

/// Two a second; over that, three seconds in the box.
const BOXED: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 2
      penalty: 3s
";

fn wait_until(deadline: Instant) {
    if let Some(left) = deadline.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

#[tokio::test]
async fn a_client_over_the_limit_stays_denied_for_the_penalty_and_is_told_how_long() {
    support::avoid_window_boundary(Duration::from_secs(1), Duration::from_millis(300));
    let mut rls = Rls::start(BOXED, &[]).await;
    for _ in 0..2 {
        assert_eq!(code(&rls.one("edge", &[("client", "a")]).await), Code::Ok);
    }
    let denied = rls.one("edge", &[("client", "a")]).await;
    let boxed_at = Instant::now();
    assert_eq!(code(&denied), Code::OverLimit, "{denied:?}");
    let left = duration_ms(denied.duration_until_reset.as_ref());
    assert_eq!(left, 3_000, "a fresh penalty: its whole length: {denied:?}");

    // 1.6 s later the second-long window alone would admit the client again (the previous
    // cell weighs at most 0.4 × 2); the box does not, and says what is left.
    wait_until(boxed_at + Duration::from_millis(1_600));
    let held = rls.one("edge", &[("client", "a")]).await;
    assert_eq!(code(&held), Code::OverLimit, "{held:?}");
    let left = duration_ms(held.duration_until_reset.as_ref());
    assert!(
        (1_000..=1_400).contains(&left),
        "time left in the box, about 1.4 s: {held:?}"
    );
    // Another client never went over: its window decides.
    assert_eq!(code(&rls.one("edge", &[("client", "b")]).await), Code::Ok);

    wait_until(boxed_at + Duration::from_millis(3_100));
    let out = rls.one("edge", &[("client", "a")]).await;
    assert_eq!(code(&out), Code::Ok, "out of the box: {out:?}");
}

#[test]
fn a_bad_penalty_is_refused_at_load_with_its_place() {
    let (_dir, path) = support::limits_file(&BOXED.replace("penalty: 3s", "penalty: soon"));
    let text = support::check_config::refused(&path);
    assert!(
        text.contains("rate_limit.penalty") && text.contains("not a duration"),
        "the error names the place and the problem: {text}"
    );
}

/// Two processes of one region on a real Redis: A puts the client in the box; B, which never
/// saw the client's counts (they are two windows old), holds it too, with what is left.
#[tokio::test]
async fn the_penalty_holds_across_two_processes_of_a_region_through_redis() {
    redis_admin::require_local_redis();
    let prefix = redis_admin::unique_prefix("penalty");
    let yaml = BOXED.replace("penalty: 3s", "penalty: 8s");
    let args = redis_args(
        LOCAL_REDIS_URL,
        &prefix,
        &["--replay-interval", "50ms", "--freshness", "1s"],
    );
    support::avoid_window_boundary(Duration::from_secs(1), Duration::from_millis(300));
    let mut a = Rls::start(&yaml, &args).await;
    let mut b = Rls::start(&yaml, &args).await;
    for _ in 0..2 {
        assert_eq!(code(&a.one("edge", &[("client", "c")]).await), Code::Ok);
    }
    let sent_at = Instant::now();
    let denied = a.one("edge", &[("client", "c")]).await;
    let boxed_at = Instant::now();
    assert_eq!(code(&denied), Code::OverLimit, "{denied:?}");

    // A sends the penalty with its next replay: a key under the prefix, expiring with it.
    let mut conn = redis_admin::connect(LOCAL_REDIS_URL);
    let pattern = format!("{prefix}*:penalty");
    let deadline = Instant::now() + Duration::from_secs(5);
    let key = loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query(&mut conn)
            .expect("KEYS");
        if let Some(key) = keys.into_iter().next() {
            break key;
        }
        assert!(
            Instant::now() < deadline,
            "no penalty key in Redis after 5 s\n{}",
            a.service.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let asked_at = Instant::now();
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).expect("PTTL");
    let answered_at = Instant::now();
    // The penalty runs 8 s from the moment A decided, which lies between the request and its
    // answer: the key lives exactly what is left of it (a few ms for the clocks' rounding).
    let ms =
        |since: Instant, at: Instant| i64::try_from(at.duration_since(since).as_millis()).unwrap();
    let at_most = 8_000 - ms(boxed_at, asked_at) + 5;
    let at_least = 8_000 - ms(sent_at, answered_at) - 5;
    assert!(
        (at_least..=at_most).contains(&ttl),
        "the key expires with the penalty: {ttl} ms, not within {at_least}..={at_most}"
    );

    // Two windows later the counts are out of every window: only the region's box denies.
    wait_until(boxed_at + Duration::from_millis(2_200));
    let held = b.one("edge", &[("client", "c")]).await;
    assert_eq!(
        code(&held),
        Code::OverLimit,
        "B holds the client A boxed: {held:?}"
    );
    let left = duration_ms(held.duration_until_reset.as_ref());
    assert!(
        (4_000..=6_000).contains(&left),
        "what is left of A's 8 s (about 5.8 s), not a fresh penalty of B's own: {held:?}"
    );
    assert_eq!(code(&b.one("edge", &[("client", "d")]).await), Code::Ok);
    assert_eq!(
        code(&a.one("edge", &[("client", "c")]).await),
        Code::OverLimit
    );

    wait_until(boxed_at + Duration::from_millis(8_200));
    assert_eq!(code(&b.one("edge", &[("client", "c")]).await), Code::Ok);
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}
