//! The token-budget example (`guarantee: never_above`, refunds at the stream's end) in two
//! regions, each its own service and Envoy, both on one database: clients on both sides
//! reserve and give back tokens at once, and the hour's budget is never exceeded; once the
//! rights left idle went back, the two regions spend it to the last token.

use gcounter_rls_integration as support;

use std::time::Duration;

use support::example::{Example, Stack};
use support::sql_admin::FAST_GLOBAL;

const BUDGET: i64 = 1_000;

/// Net tokens a request through `stack` spent: its estimate less what the response says it
/// did not use; 0 when refused.
fn spend(stack: &Stack, estimate: i64, unused: i64) -> i64 {
    let (estimate_text, unused_text) = (estimate.to_string(), unused.to_string());
    let r = stack.client().get(
        "/",
        &[
            ("x-api-key", "team"),
            ("x-token-estimate", &estimate_text),
            ("x-test-unused", &unused_text),
        ],
    );
    match r.status {
        200 => estimate - unused,
        429 => 0,
        other => panic!("status {other}{}", stack.client().context()),
    }
}

#[test]
fn the_token_budget_holds_exactly_across_two_regions() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("global.db").display()
    );
    let example = Example::load("token-budget");
    let region = |name: &'static str| {
        let mut flags = vec![
            "--database-url",
            url.as_str(),
            "--region",
            name,
            "--migrate",
        ];
        flags.extend_from_slice(&FAST_GLOBAL);
        Stack::start(&example, &flags)
    };
    let (east, west) = (region("east"), region("west"));
    support::avoid_window_boundary(Duration::from_secs(3_600), Duration::from_secs(60));
    // Both regions at once, two clients each: estimates of 10 to 90 tokens, a third of them
    // unused, far more than the budget holds.
    let spent: i64 = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..4)
            .map(|c| {
                let stack = if c % 2 == 0 { &east } else { &west };
                scope.spawn(move || {
                    (0..40)
                        .map(|i| {
                            let estimate = 10 + (i * 7 + c * 13) % 81;
                            spend(stack, estimate, estimate / 3)
                        })
                        .sum::<i64>()
                })
            })
            .collect();
        clients
            .into_iter()
            .map(|c| c.join().expect("a client thread"))
            .sum()
    });
    println!("{spent} tokens spent under load, of {BUDGET}");
    assert!(
        spent <= BUDGET,
        "{spent} tokens spent of a budget of {BUDGET}"
    );
    // The refunds land at the streams' end and the rights left idle go back within a second
    // or two: then single tokens, alternating regions until both refuse for 3 s (longer than
    // the second a region rests after a take that failed on a busy machine), spend the rest.
    std::thread::sleep(Duration::from_secs(3));
    let mut rest = 0;
    let mut refused_in_a_row = 0;
    for i in 0..4_000 {
        let stack = if i % 2 == 0 { &east } else { &west };
        let got = spend(stack, 1, 0);
        rest += got;
        refused_in_a_row = if got == 0 { refused_in_a_row + 1 } else { 0 };
        if refused_in_a_row == 12 {
            break;
        }
        if got == 0 {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    println!("{rest} more single tokens");
    assert_eq!(
        spent + rest,
        BUDGET,
        "the budget spent to the last token, and no more"
    );
}
