//! Clients bursting through real Envoys on the RLQS filter (`envoy/quota.yaml`, the limit of
//! `config/quota.yaml` raised): a lone Envoy on a fresh counter admits the room at once, and
//! several Envoys bursting on one counter together never admit more than the bound of
//! docs/rlqs.md, "Bursts" (on a fresh counter: the limit and one request of rounding per
//! Envoy, their first requests, let through before any assignment, counted in it).
//!
//! On a `never_above` limit, three Envoys admit at most the limit (docs/rlqs.md, "Never-above
//! limits").
//!
//! Each burst is kept inside one minute: the windows are aligned to the clock, and a request
//! of the next window is not counted against this one.

use gcounter_rls_integration as support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::example::Client;
use support::{Envoy, Example, Service};

const MINUTE: Duration = Duration::from_secs(60);

/// The service on `config/quota.yaml` with the limit raised to `limit` a minute; keep the
/// directory alive.
fn service(limit: u32) -> (tempfile::TempDir, Service) {
    service_with(&format!("requests_per_unit: {limit}"), &[])
}

/// The service on `config/quota.yaml` with its limit's line made `limit_lines`, and `flags`.
fn service_with(limit_lines: &str, flags: &[&str]) -> (tempfile::TempDir, Service) {
    let example = Example::load("quota");
    let (dir, limits) = example.copy_limits();
    let text = std::fs::read_to_string(&limits).expect("read the limits copy");
    let from = "requests_per_unit: 6";
    assert!(text.contains(from), "{from:?} not in {}", limits.display());
    support::replace_file(&limits, &text.replace(from, limit_lines));
    let service = example.start_service_with(&limits, flags);
    (dir, service)
}

/// An Envoy on `envoy/quota.yaml` that logs the token buckets it configures.
fn envoy(service: &Service) -> Envoy {
    envoy_with(service, &[])
}

/// [`envoy`] with `edits` to the example.
fn envoy_with(service: &Service, edits: &[(&str, &str)]) -> Envoy {
    let example = Example::load("quota");
    let envoy = Envoy::start(&example.envoy_file, service.grpc_addr.port(), edits);
    let logging = support::http_post(
        envoy.admin_addr,
        "/logging?rate_limit_quota=info",
        "text/plain",
        b"",
    )
    .expect("Envoy's admin listener");
    assert_eq!(logging.status, 200, "{}", logging.body_text());
    envoy
}

fn logged_a_token_bucket(log: &Path) -> bool {
    std::fs::read_to_string(log)
        .is_ok_and(|log| log.contains("A new TokenBucket has been configured"))
}

/// The current minute (the window's number).
fn window_now() -> u64 {
    support::now_ms() / MINUTE.as_millis() as u64
}

/// How one request was answered.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// A 200 in the window the burst started in.
    Admitted,
    /// A 200 in a later window: the next window gives the limit back, so it is not counted
    /// against this one.
    Later,
    Refused,
}

/// `n` requests of `user` through `client`, one every `every` from `start` (or as soon as the
/// one before is answered), the burst starting in `window`: each answer, and when it came
/// after `start`.
fn burst(
    client: &Client,
    user: &str,
    n: u32,
    start: Instant,
    every: Duration,
    window: u64,
) -> Vec<(Answer, Duration)> {
    let headers = [("x-api-key", user)];
    (0..n)
        .map(|k| {
            let at = start + every * k;
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            let answer = match client.get("/", &headers).status {
                200 if window_now() == window => Answer::Admitted,
                200 => Answer::Later,
                _ => Answer::Refused,
            };
            (answer, start.elapsed())
        })
        .collect()
}

fn admitted_of(answers: &[(Answer, Duration)]) -> usize {
    count(answers, Answer::Admitted)
}

fn count(answers: &[(Answer, Duration)], which: Answer) -> usize {
    answers.iter().filter(|(a, _)| *a == which).count()
}

/// One client bursting through one Envoy on a fresh counter: its first request creates the
/// bucket (let through before any assignment, and counted by the report that comes with it,
/// answered at once); the answer lends the bucket the rest of the room at once. The test
/// waits for Envoy to log that token bucket: what Envoy lets through before it applies the
/// answer (its `no_assignment_behavior`) is not the service's to bound.
fn lone_burst(limit: u32, n: u32, every: Duration) -> (usize, Vec<(Answer, Duration)>) {
    let (_dir, service) = service(limit);
    let envoy = envoy(&service);
    let client = Client::new(&envoy, vec![service.log_path.clone()]);
    support::avoid_window_boundary(MINUTE, every * n + Duration::from_secs(15));
    let user = "bursting";
    let start = Instant::now();
    let first = usize::from(client.get("/", &[("x-api-key", user)]).status == 200);
    support::wait_for(Duration::from_secs(10), "Envoy's first assignment", || {
        logged_a_token_bucket(&envoy.log_path)
    });
    let bursting = Instant::now();
    // Back to back: from now, after the first assignment; spaced: from the first request.
    let from = if every.is_zero() {
        bursting
    } else {
        start + every
    };
    let rest = burst(&client, user, n - 1, from, every, window_now());
    let took = bursting.elapsed();
    let admitted = first + admitted_of(&rest);
    let first_answer = if first == 1 {
        Answer::Admitted
    } else {
        Answer::Refused
    };
    let mut answers = vec![(first_answer, Duration::ZERO)];
    answers.extend(rest);
    println!(
        "RLQS lone burst, {limit} a minute: {admitted} of {n} admitted, the burst in {took:.1?}{}",
        if admitted == 0 {
            client.context()
        } else {
            String::new()
        }
    );
    (admitted, answers)
}

/// 10 a minute, 5 requests a second for 8 s: RLS v3 admits 10. The bucket admits 9 or 10,
/// never more than the limit and one request of rounding, 9 of them in the first 2 s.
/// Spread over two reporting intervals, the room came at 0.9 a second: 5 of the first 10.
#[test]
fn an_rlqs_envoy_admits_a_burst_what_the_limit_allows() {
    const LIMIT: usize = 10;
    let (admitted, answers) = lone_burst(LIMIT as u32, 40, Duration::from_millis(200));
    let at_once = admitted_of(&answers[..10]);
    println!("RLQS burst: {admitted} of 40 admitted, {at_once} of the first 10, limit {LIMIT}");
    assert!(
        at_once >= LIMIT - 1 && (LIMIT - 1..=LIMIT + 1).contains(&admitted),
        "{admitted} of 40 admitted in 8 s, {at_once} of the first 10, on a limit of {LIMIT}"
    );
}

/// 60 a minute, 30 requests back to back: all of them are within the limit, and a bucket
/// alone on its counter is lent the whole room, not a capped part of it: at least 90 %
/// admitted within 2 s. Lent at most 10, it admits 11 at once and the rest at its rate of
/// about 5 a second.
#[test]
fn a_lone_rlqs_envoy_on_a_larger_limit_admits_its_burst_at_once() {
    const BURST: u32 = 30;
    let (_, answers) = lone_burst(60, BURST, Duration::ZERO);
    let in_two_seconds = answers
        .iter()
        .filter(|(answer, at)| *answer == Answer::Admitted && *at <= Duration::from_secs(2))
        .count();
    assert!(
        in_two_seconds * 10 >= BURST as usize * 9,
        "{in_two_seconds} of {BURST} admitted in 2 s on a limit of 60 a minute: {answers:?}"
    );
}

/// Three Envoys on one fresh counter (30 a minute), each with one client sending 30
/// requests, one every 100 ms or as soon as the one before is answered (90 in all). The first Envoy's bucket is alone when its first
/// report comes: it is lent the whole room, and taken back as the others join. What all
/// three admit, as their clients see it and as their upstreams received it, stays within
/// the bound: the limit and one request of rounding per Envoy. Lending each Envoy the room
/// it sees, without charging what the others were lent, admits far more.
#[test]
fn rlqs_envoys_bursting_together_stay_within_the_bound() {
    const LIMIT: usize = 30;
    const ENVOYS: usize = 3;
    const EACH: u32 = 30;
    const EVERY: Duration = Duration::from_millis(100);
    let (_dir, service) = service(LIMIT as u32);
    let envoys: Vec<Envoy> = (0..ENVOYS).map(|_| envoy(&service)).collect();
    let clients: Vec<Client> = envoys
        .iter()
        .map(|envoy| Client::new(envoy, vec![service.log_path.clone()]))
        .collect();
    let user = "together";
    // A refused request takes up to a second to be answered here: the burst spreads over
    // up to half a minute.
    support::avoid_window_boundary(MINUTE, Duration::from_secs(55));
    let window = window_now();
    // Each Envoy's first request: let through, counted by its first report, answered at
    // once. Bursting starts once the service has counted all three.
    let firsts = clients
        .iter()
        .filter(|client| client.get("/", &[("x-api-key", user)]).status == 200)
        .count();
    let counted = || service.sliding_count("quota", &format!("api_key%3D{user}"));
    support::wait_for(
        Duration::from_secs(10),
        "every first report counted",
        || counted() >= firsts as u64,
    );
    support::wait_for(
        Duration::from_secs(10),
        "the first Envoy's token bucket",
        || logged_a_token_bucket(&envoys[0].log_path),
    );
    let start = Instant::now() + Duration::from_millis(200);
    let started = Instant::now();
    let answers: Vec<Vec<(Answer, Duration)>> = std::thread::scope(|scope| {
        let bursts: Vec<_> = clients
            .iter()
            .map(|client| scope.spawn(move || burst(client, user, EACH, start, EVERY, window)))
            .collect();
        bursts
            .into_iter()
            .map(|burst| burst.join().expect("a burst"))
            .collect()
    });
    let per_envoy: Vec<usize> = answers.iter().map(|a| admitted_of(a)).collect();
    let total = firsts + per_envoy.iter().sum::<usize>();
    let later: usize = answers.iter().map(|a| count(a, Answer::Later)).sum();
    let upstream: Vec<u64> = envoys
        .iter()
        .map(|envoy| envoy.stat("cluster.upstream.upstream_rq_200").unwrap_or(0))
        .collect();
    println!(
        "{ENVOYS} RLQS Envoys bursting together, {LIMIT} a minute: {total} admitted \
         ({firsts} first requests, then {per_envoy:?} in {:.1?}; {later} more in the next \
         window), upstreams received {upstream:?}, bound {LIMIT} + {ENVOYS}",
        started.elapsed()
    );
    let upstream: u64 = upstream.iter().sum();
    let context: String = clients.iter().map(Client::context).collect();
    assert!(
        total <= LIMIT + ENVOYS,
        "{total} admitted ({per_envoy:?}), over {LIMIT} + {ENVOYS}{context}"
    );
    assert_eq!(
        upstream,
        (total + later) as u64,
        "the upstreams received what the clients saw admitted"
    );
    assert!(total > firsts, "the room is handed out: {total}{context}");
}

/// Three Envoys on one counter of a `never_above` limit (30 a minute, fixed windows), their
/// fallbacks denying as such a limit needs, three clients each sending 30 requests, one every
/// 100 ms or as soon as the one before is answered. Every token bucket is taken from the
/// counter before it is sent, so together they admit at most the limit in the window, as
/// their clients see it and as their upstreams received it; and at least half the room is
/// handed out.
#[test]
fn rlqs_envoys_on_a_never_above_limit_admit_at_most_the_limit() {
    const LIMIT: usize = 30;
    const ENVOYS: usize = 3;
    const CLIENTS_PER_ENVOY: usize = 3;
    const EACH: u32 = 30;
    const EVERY: Duration = Duration::from_millis(100);
    let (_dir, service) = service_with(
        &format!("requests_per_unit: {LIMIT}\n      guarantee: never_above"),
        &["--windows", "fixed"],
    );
    let denying = [("blanket_rule: ALLOW_ALL", "blanket_rule: DENY_ALL")];
    let envoys: Vec<Envoy> = (0..ENVOYS)
        .map(|_| envoy_with(&service, &denying))
        .collect();
    let clients: Vec<Client> = envoys
        .iter()
        .map(|envoy| Client::new(envoy, vec![service.log_path.clone()]))
        .collect();
    let user = "bounded";
    // A refused request takes up to a second to be answered here.
    support::avoid_window_boundary(MINUTE, Duration::from_secs(50));
    let window = window_now();
    let start = Instant::now() + Duration::from_millis(200);
    let started = Instant::now();
    // Each Envoy's clients' answers, together.
    let answers: Vec<Vec<(Answer, Duration)>> = std::thread::scope(|scope| {
        let bursts: Vec<Vec<_>> = clients
            .iter()
            .map(|client| {
                (0..CLIENTS_PER_ENVOY)
                    .map(|_| scope.spawn(move || burst(client, user, EACH, start, EVERY, window)))
                    .collect()
            })
            .collect();
        bursts
            .into_iter()
            .map(|of_envoy| {
                of_envoy
                    .into_iter()
                    .flat_map(|burst| burst.join().expect("a burst"))
                    .collect()
            })
            .collect()
    });
    let per_envoy: Vec<usize> = answers.iter().map(|a| admitted_of(a)).collect();
    let total: usize = per_envoy.iter().sum();
    let later: usize = answers.iter().map(|a| count(a, Answer::Later)).sum();
    let upstream: Vec<u64> = envoys
        .iter()
        .map(|envoy| envoy.stat("cluster.upstream.upstream_rq_200").unwrap_or(0))
        .collect();
    let sent = ENVOYS * CLIENTS_PER_ENVOY * EACH as usize;
    println!(
        "{ENVOYS} RLQS Envoys on a never_above limit of {LIMIT} a minute: {total} of {sent} \
         admitted ({per_envoy:?} in {:.1?}; {later} more in the next window), upstreams \
         received {upstream:?}",
        started.elapsed()
    );
    let upstream: u64 = upstream.iter().sum();
    let context: String = clients.iter().map(Client::context).collect();
    assert!(
        total <= LIMIT,
        "{total} admitted ({per_envoy:?}) on a never_above limit of {LIMIT}{context}"
    );
    assert_eq!(
        upstream,
        (total + later) as u64,
        "the upstreams received what the clients saw admitted"
    );
    // A held bucket traded for a slower one at every reassignment left 11 to 16 admitted.
    assert!(
        total * 2 >= LIMIT,
        "{total} admitted: less than half of {LIMIT}{context}"
    );
}
