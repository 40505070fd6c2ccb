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
