//! The oracle of a `never_above` limit seen from its clients (docs/bounded-counter.md, "The
//! guarantee"): from each admitted call's send and receive times alone, the least
//! `effective` it can have had. The service decided each call at a millisecond between its
//! `sent_ms` and `received_ms` (one clock, one machine), so an admission counts in its cell
//! only the admissions certainly before it in that cell (answered before it was sent), in
//! the previous cell only those certainly in it, weighted at the latest instant it can have
//! been decided; the smaller of its two cells when its call straddles a boundary. The true
//! `effective` is at least this, so a value above the limit is an admission above the rule,
//! whatever the calls' latencies.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::Service;
use crate::grpc::{self, RlsClient};
use crate::load::Sent;

/// The admitted calls of `sent`: when each was sent and answered (ms since the epoch).
pub fn admitted<'a>(sent: impl IntoIterator<Item = &'a Sent>) -> Vec<(u64, u64)> {
    sent.into_iter()
        .filter(|s| {
            s.first_status()
                .is_some_and(|status| status.code == Code::Ok as i32)
        })
        .map(|s| (s.sent_ms, s.received_ms))
        .collect()
}

/// `per_service` clients on each of `services`, each its own connection, interleaved (a
/// paced load's calls go round them: every service gets its share).
pub async fn clients(services: &[Service], per_service: usize) -> Vec<RlsClient> {
    let mut clients = Vec::new();
    for _ in 0..per_service {
        for service in services {
            clients.push(grpc::rls_client(service.grpc_addr).await);
        }
    }
    clients
}

/// Sends `count` hits of `domain`'s `key` = `value` one after another through `client`: how
/// many were admitted.
pub async fn burst(
    client: &mut RlsClient,
    count: usize,
    (domain, key, value): (&str, &str, &str),
) -> usize {
    let mut admitted = 0;
    for _ in 0..count {
        let answer = grpc::should_rate_limit(client, grpc::hit(domain, key, value)).await;
        admitted += usize::from(grpc::overall(&answer) == Code::Ok);
    }
    admitted
}

/// The least `effective` of the admission `at` (sent, received ms) among `admissions`, on a
/// sliding window of `window_ms`.
pub fn least_effective(admissions: &[(u64, u64)], at: (u64, u64), window_ms: u64) -> u64 {
    let (sent_ms, received_ms) = at;
    let cells = [sent_ms / window_ms, received_ms / window_ms];
    let within = |cell: u64, (s, r): (u64, u64)| s / window_ms == cell && r / window_ms == cell;
    cells
        .iter()
        .map(|&cell| {
            let current = admissions
                .iter()
                .filter(|&&(s, r)| within(cell, (s, r)) && r < sent_ms)
                .count() as u64;
            let previous = match cell.checked_sub(1) {
                Some(previous) => admissions.iter().filter(|&&a| within(previous, a)).count(),
                None => 0,
            } as u64;
            let latest = received_ms.min((cell + 1) * window_ms - 1);
            let elapsed = latest - cell * window_ms;
            1 + current + previous * (window_ms - elapsed) / window_ms
        })
        .min()
        .unwrap_or(0)
}

/// Every admission whose least `effective` is above `limit`, described.
pub fn above_the_rule(admissions: &[(u64, u64)], window_ms: u64, limit: u64) -> Vec<String> {
    admissions
        .iter()
        .map(|&a| (a, least_effective(admissions, a, window_ms)))
        .filter(|&(_, effective)| effective > limit)
        .map(|((s, r), effective)| format!("sent {s} answered {r}: effective ≥ {effective}"))
        .collect()
}

/// The highest least `effective` of the admissions sent in window `cell`: how near the
/// limit the oracle came there (a check that never comes near it proves nothing).
pub fn most_in_window(admissions: &[(u64, u64)], cell: u64, window_ms: u64) -> u64 {
    admissions
        .iter()
        .filter(|a| a.0 / window_ms == cell)
        .map(|&a| least_effective(admissions, a, window_ms))
        .max()
        .unwrap_or(0)
}

/// A fixed window of 300 a minute on `services` (`bounded`/`api_key`/`k`): ten times the
/// limit over three connections per service, then, once the rights the processes held went
/// back idle, a second load. Asserts at most 300 under load, and exactly 300 in all.
pub async fn assert_exactly_the_limit_of_a_fixed_window(services: &[Service]) {
    let clients = clients(services, 3).await;
    crate::stay_in_one_minute(std::time::Duration::from_secs(10));
    let hit = |_| grpc::hit("bounded", "api_key", "k");
    let first = crate::load::paced(
        clients.clone(),
        2_000.0,
        std::time::Duration::from_millis(1_500),
        hit,
    )
    .await;
    crate::load::assert_no_grpc_errors(&first, "the fixed-window load");
    let during = admitted(&first).len();
    assert!(
        during <= 300,
        "{during} admitted in one window of a limit of 300"
    );
    // The rights held when the load stopped go back once idle, and the next calls spend them.
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    let second = crate::load::paced(
        clients,
        1_000.0,
        std::time::Duration::from_millis(1_000),
        hit,
    )
    .await;
    crate::load::assert_no_grpc_errors(&second, "the second load");
    let after = admitted(&second).len();
    println!("admitted {during} under load, {after} after the idle rights came back");
    assert_eq!(
        during + after,
        300,
        "{during} + {after} in one window of 300"
    );
}

/// The sliding window of [`sliding_limits`] on `services`: from the start of a window, four
/// windows at twenty times the limit over `per_service` connections to each. Asserts that
/// the limit binds, that no admission is above the rule by the oracle, and that the oracle
/// comes near the limit in every window (a check that never does proves nothing).
pub async fn assert_never_above_the_sliding_rule(services: &[Service], per_service: usize) {
    let clients = clients(services, per_service).await;
    let first_cell = crate::into_fresh_window(std::time::Duration::from_millis(SLIDING_WINDOW_MS))
        / SLIDING_WINDOW_MS;
    let sent = crate::load::paced(
        clients,
        400.0,
        std::time::Duration::from_millis(4 * SLIDING_WINDOW_MS),
        |_| grpc::hit("bounded", "api_key", "k"),
    )
    .await;
    crate::load::assert_no_grpc_errors(&sent, "the sliding-window load");
    let admissions = admitted(&sent);
    let denied = sent.len() - admissions.len();
    assert!(
        denied > sent.len() / 2,
        "the limit must bind: {denied} of {} denied",
        sent.len()
    );
    let above = above_the_rule(&admissions, SLIDING_WINDOW_MS, SLIDING_LIMIT);
    assert!(
        above.is_empty(),
        "{} admissions above the rule (limit {SLIDING_LIMIT} per {SLIDING_WINDOW_MS} ms), the \
         first: {:?}",
        above.len(),
        &above[..above.len().min(5)]
    );
    for cell in first_cell..first_cell + 4 {
        let most = most_in_window(&admissions, cell, SLIDING_WINDOW_MS);
        println!("window {cell}: least effective up to {most} of {SLIDING_LIMIT}");
        assert!(
            most >= SLIDING_LIMIT / 2,
            "window {cell}: the least effective reached only {most}"
        );
    }
}

/// `limits` (domain `bounded`) with a `ready` counter of its own, which each process takes
/// a right of ([`await_first_right`]) before a test starts.
pub fn with_ready(limits: &str) -> String {
    format!(
        "{limits}  - key: ready\n    rate_limit: {{unit: hour, requests_per_unit: 1000000, guarantee: never_above}}\n"
    )
}

/// Waits (up to 10 s) until `service` took a right of [`with_ready`]'s counter: its store
/// reached, its schema migrated, so that a test's first take is not its process's first
/// contact with the store (a failed take rests the counter for a second).
pub async fn await_first_right(service: &Service, label: &str) {
    let mut client = grpc::rls_client(service.grpc_addr).await;
    for _ in 0..100 {
        if burst(&mut client, 1, ("bounded", "ready", label)).await == 1 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{label} never took a right: {}", service.log_tail(20));
}

/// The window and limit of [`sliding_limits`].
pub const SLIDING_WINDOW_MS: u64 = 2_000;
pub const SLIDING_LIMIT: u64 = 40;

/// `bounded`/`api_key`: 40 per 2 s, `never_above`.
pub fn sliding_limits() -> String {
    format!(
        "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {{unit: second, \
         unit_multiplier: 2, requests_per_unit: {SLIDING_LIMIT}, guarantee: never_above}}\n"
    )
}
