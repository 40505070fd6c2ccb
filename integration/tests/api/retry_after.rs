//! The exact `Retry-After` of the sliding window through the real binary: a denied request's
//! `duration_until_reset` is when the same request would pass (assuming no more hits), which
//! may be before the end of the current cell (the previous cell's weight falls) or after it
//! (at the rollover the current count becomes the previous one, still weighing); shown by
//! asking again just before and just after. The same value in our `Retry-After` /
//! `RateLimit-Reset` headers, in the IETF draft's structured headers, and in the
//! `Retry-After` a real Envoy writes from it (`enable_retry_after_header`).

use gcounter_rls_integration as support;

use std::time::Duration;

use support::grpc::{Code, RateLimitResponse, code, costing, descriptor, duration_ms, request};
use support::rls::Rls;
use support::{Envoy, Example, now_ms, sleep_until_ms};

/// 100 per 2 s.
const HUNDRED: &str = "
domain: ra
descriptors:
  - key: client
    rate_limit: { unit: second, unit_multiplier: 2, requests_per_unit: 100 }
";
const WINDOW_MS: u64 = 2_000;

/// Milliseconds of rounding between the service's clock readings and ours.
const SLACK_MS: u64 = 2;
/// Attempts at a scenario whose timing this machine did not keep (see each test).
const ATTEMPTS: usize = 3;

/// Sleeps until `at_ms` into the next 2 s cell; the cell's start (ms since the epoch).
fn into_next_cell(at_ms: u64) -> u64 {
    let now = now_ms();
    let cell = (now / WINDOW_MS + 1) * WINDOW_MS;
    sleep_until_ms(cell + at_ms);
    cell
}

/// `cost` hits of `client`: the answer, and when it was sent and received (ms since the
/// epoch): the service decided it in between.
async fn spend(rls: &mut Rls, client: &str, cost: u64) -> (RateLimitResponse, u64, u64) {
    let sent = now_ms();
    let response = rls
        .send(request("ra", vec![costing("client", client, cost)]))
        .await;
    (response, sent, now_ms())
}

/// Spends `cost` more, which must be denied: the denial and when it says the request passes.
/// `None` (this attempt is off) when the requests missed their cells: the first one,
/// answered at `filled`, not before `cell_end`, or this one not within `within` ms of it.
async fn denied_as_planned(
    rls: &mut Rls,
    client: &str,
    cost: u64,
    attempt: usize,
    (filled, cell_end): (u64, u64),
    within: u64,
) -> Option<(RateLimitResponse, PassesAt)> {
    let (denied, sent, received) = spend(rls, client, cost).await;
    if filled >= cell_end || received >= cell_end + within {
        eprintln!("attempt {attempt}: the requests did not land as planned; again");
        return None;
    }
    assert_eq!(code(&denied.statuses[0]), Code::OverLimit, "{denied:?}");
    let passes = PassesAt::answered(&denied, sent, received);
    Some((denied, passes))
}

fn first_reset_ms(r: &RateLimitResponse) -> u64 {
    duration_ms(r.statuses[0].duration_until_reset.as_ref()) as u64
}

/// When a denied request passes again as its answer says: its wait after the moment it was
/// decided, somewhere between when it was sent and received (ms since the epoch).
struct PassesAt {
    earliest: u64,
    latest: u64,
}

impl PassesAt {
    fn answered(denied: &RateLimitResponse, sent: u64, received: u64) -> PassesAt {
        let wait = first_reset_ms(denied);
        PassesAt {
            earliest: sent + wait,
            latest: received + wait,
        }
    }

    /// Asserts that the answered moment can be `expected_ms` (the window arithmetic's).
    fn assert_is(&self, expected_ms: u64, denied: &RateLimitResponse) {
        assert!(
            self.earliest <= expected_ms + SLACK_MS && expected_ms <= self.latest + SLACK_MS,
            "the denial answers a pass between {} and {} ms, the window says {expected_ms}: \
             {denied:?}",
            self.earliest,
            self.latest
        );
    }
}

/// Asks again and checks the answer against `passes`: a denial must have been sent before
/// the latest passing moment, an admission received after the earliest (so however busy the
/// machine, a right answer passes and a wrong one shows up as soon as the timing allows).
/// Whether it passed.
async fn ask_again(rls: &mut Rls, client: &str, cost: u64, passes: &PassesAt) -> bool {
    let (again, sent, received) = spend(rls, client, cost).await;
    match code(&again.statuses[0]) {
        Code::OverLimit => {
            assert!(
                sent <= passes.latest + SLACK_MS,
                "denied though sent {} ms after the answered moment: {again:?}",
                sent - passes.latest
            );
            false
        }
        Code::Ok => {
            assert!(
                received + SLACK_MS >= passes.earliest,
                "passed though answered {} ms before the answered moment: {again:?}",
                passes.earliest - received
            );
            true
        }
        other => panic!("{other:?}: {again:?}"),
    }
}

/// Asks again from shortly before the answered moment until the request passes, every
/// answer checked by [`ask_again`]: denied before, admitted after.
async fn passes_exactly_then(rls: &mut Rls, client: &str, cost: u64, passes: &PassesAt) {
    sleep_until_ms(passes.earliest.saturating_sub(150));
    let deadline = passes.latest + 5_000;
    while !ask_again(rls, client, cost, passes).await {
        assert!(
            now_ms() < deadline,
            "still denied 5 s after the answered moment"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_denial_answers_a_wait_shorter_than_the_cell_when_the_previous_cell_slides_out() {
    let mut rls = Rls::start(HUNDRED, &[]).await;
    for attempt in 0..ATTEMPTS {
        let client = format!("a{attempt}");
        let cell = into_next_cell(20);
        let (full, _, filled) = spend(&mut rls, &client, 100).await;
        assert_eq!(code(&full.statuses[0]), Code::Ok, "{full:?}");
        // 100 ms into the next cell the 100 still weigh 95: 30 more are denied until
        // floor(100 × w / 2000) ≤ 70, i.e. 581 ms into the cell: ~480 ms, not the ~1.9 s
        // left. Both requests must land where planned: the 100 in the first cell, the 30
        // well before 581 ms into the next; on a machine too busy for that, again.
        let next = cell + WINDOW_MS;
        sleep_until_ms(next + 100);
        let planned = denied_as_planned(&mut rls, &client, 30, attempt, (filled, next), 400);
        let Some((denied, passes)) = planned.await else {
            continue;
        };
        passes.assert_is(next + 581, &denied);
        passes_exactly_then(&mut rls, &client, 30, &passes).await;
        return;
    }
    panic!("the requests missed their cells {ATTEMPTS} times");
}

#[tokio::test]
async fn a_denial_answers_a_wait_past_the_cell_when_the_count_weighs_after_the_rollover() {
    let mut rls = Rls::start(HUNDRED, &["--response-headers"]).await;
    for attempt in 0..ATTEMPTS {
        let client = format!("b{attempt}");
        let cell = into_next_cell(100);
        let (full, _, filled) = spend(&mut rls, &client, 100).await;
        assert_eq!(code(&full.statuses[0]), Code::Ok);
        let cell_end = cell + WINDOW_MS;
        // 40 more: at the rollover the 100 weigh 100; they pass once
        // floor(100 × w / 2000) ≤ 60, 781 ms into the next cell, where the cell ends
        // ~1.9 s from now. The 100 must land in the planned cell; on a machine too busy
        // for that, again.
        let planned = denied_as_planned(&mut rls, &client, 40, attempt, (filled, cell_end), 600);
        let Some((denied, passes)) = planned.await else {
            continue;
        };
        passes.assert_is(cell_end + 781, &denied);
        // Our headers carry the same wait, rounded up to whole seconds.
        let wait = first_reset_ms(&denied);
        let header = |name: &str| {
            denied
                .response_headers_to_add
                .iter()
                .find(|h| h.key.eq_ignore_ascii_case(name))
                .map(|h| h.value.clone())
        };
        let seconds = wait.div_ceil(1_000).to_string();
        assert_eq!(
            header("Retry-After").as_deref(),
            Some(seconds.as_str()),
            "{denied:?}"
        );
        assert_eq!(
            header("RateLimit-Reset").as_deref(),
            Some(seconds.as_str()),
            "{denied:?}"
        );
        // Past the cell's end (the old answer) it is still over.
        sleep_until_ms(cell_end + 100);
        ask_again(&mut rls, &client, 40, &passes).await;
        passes_exactly_then(&mut rls, &client, 40, &passes).await;
        return;
    }
    panic!("the requests missed their cells {ATTEMPTS} times");
}

#[tokio::test]
async fn the_structured_header_style_writes_the_drafts_policy_and_state() {
    let yaml = "
domain: st
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 2, name: per_k }
";
    let mut rls = Rls::start(
        yaml,
        &[
            "--response-headers",
            "--response-header-style",
            "structured",
        ],
    )
    .await;
    support::stay_in_one_minute(Duration::from_secs(10));
    let headers = |r: &RateLimitResponse| -> Vec<(String, String)> {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    let ok = rls.check("st", vec![descriptor(&[("k", "x")])]).await;
    let reset = (duration_ms(ok.statuses[0].duration_until_reset.as_ref()) as u64).div_ceil(1_000);
    assert_eq!(
        headers(&ok),
        [
            (
                "RateLimit-Policy".to_owned(),
                "\"per_k\";q=2;w=60".to_owned()
            ),
            ("RateLimit".to_owned(), format!("\"per_k\";r=1;t={reset}")),
        ],
        "{ok:?}"
    );
    rls.check("st", vec![descriptor(&[("k", "x")])]).await;
    let over = rls.check("st", vec![descriptor(&[("k", "x")])]).await;
    let wait = (duration_ms(over.statuses[0].duration_until_reset.as_ref()) as u64).div_ceil(1_000);
    let got = headers(&over);
    assert_eq!(got.len(), 3, "{over:?}");
    assert_eq!(got[1].1, format!("\"per_k\";r=0;t={wait}"));
    assert_eq!(got[2], ("Retry-After".to_owned(), wait.to_string()));
}

#[test]
fn the_structured_style_refuses_renamed_draft03_headers() {
    let (_dir, path) = support::limits_file(HUNDRED);
    let output = std::process::Command::new(support::binary())
        .args(["serve", "--config"])
        .arg(&path)
        .args([
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--response-headers",
            "--response-header-style",
            "structured",
            "--limit-header",
            "X-Limit",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run gcounter-rls");
    let text = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "an invalid setting: {text}");
    assert!(
        text.contains("--response-header-style structured"),
        "{text}"
    );
}

/// Envoy 1.40's `enable_retry_after_header` writes `Retry-After` from the largest
/// `duration_until_reset` of the over-limit statuses: through the `hits-addend` example, a
/// request costing 5 on a spent budget of 10 per minute must wait until 24 s into the next
/// minute (floor(10 × w / 60 s) ≤ 5), and Envoy's header says so, equal to what the service
/// answers for the same request (Envoy truncates it to whole seconds; ours round up).
#[tokio::test]
async fn envoys_retry_after_is_our_computed_wait() {
    let example = Example::load("hits-addend");
    let service = example.start_service(&[]);
    let envoy = Envoy::start(
        &example.envoy_file,
        service.grpc_addr.port(),
        &[(
            "enable_x_ratelimit_headers: DRAFT_VERSION_03",
            "enable_x_ratelimit_headers: DRAFT_VERSION_03\n                      enable_retry_after_header: true",
        )],
    );
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(10));
    let client = support::example::Client::new(&envoy, vec![service.log_path.clone()]);
    for _ in 0..2 {
        let r = client.get("/reports", &[]);
        assert_eq!(r.status, 200, "{:?}{}", r.headers, client.context());
    }
    let r = client.get("/reports", &[]);
    let left_in_minute = 60 - (now_ms() / 1_000) % 60;
    assert_eq!(r.status, 429, "{:?}{}", r.headers, client.context());
    let envoys: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After from Envoy: {:?}", r.headers));

    // The same request straight to the service (a denial consumes nothing).
    let mut grpc = support::grpc::rls_client(service.grpc_addr).await;
    let mut d = descriptor(&[("remote_address", "127.0.0.1")]);
    d.hits_addend = Some(support::grpc::UInt64Value { value: 5 });
    let ours = support::grpc::should_rate_limit(&mut grpc, request("hits-addend", vec![d])).await;
    assert_eq!(code(&ours.statuses[0]), Code::OverLimit, "{ours:?}");
    let wait_ms = duration_ms(ours.statuses[0].duration_until_reset.as_ref()) as u64;
    assert!(
        wait_ms / 1_000 >= left_in_minute + 22,
        "24 s past the minute's end ({left_in_minute} s away): {wait_ms} ms"
    );
    println!("Envoy's Retry-After {envoys} s; the service's wait {wait_ms} ms");
    // Envoy's is a few ms older; it rounds to whole seconds.
    let candidates = [
        wait_ms / 1_000,
        wait_ms.div_ceil(1_000),
        (wait_ms + 100).div_ceil(1_000),
    ];
    assert!(
        candidates.contains(&envoys),
        "Envoy's Retry-After {envoys} s, ours {wait_ms} ms{}",
        client.context()
    );
}
