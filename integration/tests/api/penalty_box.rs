//! The penalty box (`penalty:` on a rate limit, our extension after Fastly's Edge Rate
//! Limiting) through the real binary: a client that went over stays denied for the penalty,
//! past its window, told how long is left (`duration_until_reset`); other clients are not
//! touched; and through a real Redis the other processes of the region hold it too, across a
//! window rollover in which the window alone would let it through.

use gcounter_rls_integration as support;

use std::time::{Duration, Instant};

use support::grpc::{Code, code, duration_ms};
use support::now_ms;
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

/// Asserts that `left` (a held request's `duration_until_reset`) is what remains of a penalty
/// of `penalty_ms` decided between `boxed` (sent, received) for a request decided between
/// `held` (sent, received), all in ms since the epoch, give or take the clocks' rounding.
fn assert_left(left: i64, penalty_ms: u64, boxed: (u64, u64), held: (u64, u64), what: &str) {
    let most = penalty_ms + 5 - held.0.saturating_sub(boxed.1);
    let least = (penalty_ms - 5).saturating_sub(held.1 - boxed.0);
    let left = u64::try_from(left).expect("a wait is not negative");
    assert!(
        (least..=most).contains(&left),
        "{what}: {left} ms left, not within {least}..={most}"
    );
}

#[tokio::test]
async fn a_client_over_the_limit_stays_denied_for_the_penalty_and_is_told_how_long() {
    let mut rls = Rls::start(BOXED, &[]).await;
    // The three requests inside one second.
    support::into_fresh_window(Duration::from_secs(1));
    for _ in 0..2 {
        assert_eq!(code(&rls.one("edge", &[("client", "a")]).await), Code::Ok);
    }
    let sent = now_ms();
    let denied = rls.one("edge", &[("client", "a")]).await;
    let boxed = (sent, now_ms());
    assert_eq!(code(&denied), Code::OverLimit, "{denied:?}");
    let left = duration_ms(denied.duration_until_reset.as_ref());
    assert_eq!(left, 3_000, "a fresh penalty: its whole length: {denied:?}");

    // 1.6 s later the second-long window alone would admit the client again (the previous
    // cell weighs at most 0.4 × 2); the box does not, and says what is left.
    support::sleep_until_ms(boxed.1 + 1_600);
    let sent = now_ms();
    let held = rls.one("edge", &[("client", "a")]).await;
    let held_at = (sent, now_ms());
    assert_eq!(code(&held), Code::OverLimit, "{held:?}");
    let left = duration_ms(held.duration_until_reset.as_ref());
    assert_left(left, 3_000, boxed, held_at, "time left in the box");
    // Another client never went over: its window decides.
    assert_eq!(code(&rls.one("edge", &[("client", "b")]).await), Code::Ok);

    support::sleep_until_ms(boxed.1 + 3_100);
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
    let mut a = Rls::start(&yaml, &args).await;
    let mut b = Rls::start(&yaml, &args).await;
    // The three requests inside one second.
    support::into_fresh_window(Duration::from_secs(1));
    for _ in 0..2 {
        assert_eq!(code(&a.one("edge", &[("client", "c")]).await), Code::Ok);
    }
    let sent_at = Instant::now();
    let sent_ms = now_ms();
    let denied = a.one("edge", &[("client", "c")]).await;
    let boxed_at = Instant::now();
    let boxed = (sent_ms, now_ms());
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
    support::sleep_until_ms(boxed.1 + 2_200);
    let sent = now_ms();
    let held = b.one("edge", &[("client", "c")]).await;
    let held_at = (sent, now_ms());
    assert_eq!(
        code(&held),
        Code::OverLimit,
        "B holds the client A boxed: {held:?}"
    );
    let left = duration_ms(held.duration_until_reset.as_ref());
    assert_left(
        left,
        8_000,
        boxed,
        held_at,
        "what is left of A's 8 s, not a fresh penalty of B's own",
    );
    assert_eq!(code(&b.one("edge", &[("client", "d")]).await), Code::Ok);
    assert_eq!(
        code(&a.one("edge", &[("client", "c")]).await),
        Code::OverLimit
    );

    support::sleep_until_ms(boxed.1 + 8_200);
    assert_eq!(code(&b.one("edge", &[("client", "c")]).await), Code::Ok);
    redis_admin::delete_under(LOCAL_REDIS_URL, &prefix);
}
