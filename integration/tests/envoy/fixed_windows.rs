//! Upstream's semantics (`--windows fixed --count-denied`) through a real Envoy: the
//! `per-client-ip` example on a limit of 3 per second. What a client sees is upstream's: 3
//! admitted, then Envoy's 429 with `x-ratelimit-reset: 1` (the window's end in whole seconds,
//! not when a sliding window would let it pass), and the whole limit back just after the
//! boundary (a sliding window would still weigh the previous second's hits).

use gcounter_rls_integration as support;

use std::time::Duration;

use support::Example;
use support::example::Client;

const POLICY: &str = "3, 3;w=1";

#[test]
fn through_envoy_a_fixed_window_ends_on_the_second() {
    let example = Example::load("per-client-ip");
    let (_dir, limits) = support::limits_file(&support::one_rule(
        "per-client-ip",
        "remote_address",
        "second",
        1,
        3,
    ));
    let service = example.start_service_with(&limits, &["--windows", "fixed", "--count-denied"]);
    let envoy = example.start_envoy(&service);
    let client = Client::new(&envoy, vec![service.log_path.clone()]);
    // Connections and the counter's cells warm before the measured second.
    client.get("/", &[]);

    let start = support::into_fresh_window(Duration::from_secs(1));
    for remaining in [2, 1, 0] {
        client.admitted("/", &[], POLICY, remaining);
    }
    let denied = client.limited("/", &[], POLICY);
    assert_eq!(
        denied.header("x-ratelimit-reset"),
        Some("1"),
        "the 429's reset: {:?}",
        denied.headers
    );
    assert!(
        support::now_ms() < start + 1_000,
        "the four requests took the whole second: the machine is too loaded for this test"
    );

    support::sleep_until_ms(start + 1_020);
    client.admitted("/", &[], POLICY, 2);
}
