use super::*;
use crate::scenario::named;

fn short(name: &str, windows: u64) -> Scenario {
    let Some(mut scenario) = named(name, 7) else {
        panic!("{name} is a scenario")
    };
    scenario.run_ms = windows * scenario.window_ms;
    scenario
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let scenario = short("three-x5", 4);
    let a = serde_json::to_string(&run(&scenario, 7).expect("the scenario runs")).ok();
    let b = serde_json::to_string(&run(&scenario, 7).expect("the scenario runs")).ok();
    let c = serde_json::to_string(&run(&scenario, 8).expect("the scenario runs")).ok();
    assert!(a.is_some());
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed draws other arrivals");
}

// "Never above" is judged by `never_above::judge` from the log of admissions, not by the
// rights: a fleet that spends rights twice must show up.

#[test]
fn rights_granted_twice_are_caught_above_the_bound() {
    let scenario = short("even-10x5", 4);
    let honest = run(&scenario, 7).expect("the scenario runs");
    assert_eq!(honest.never_above.excesses, 0, "{honest:?}");
    assert!(honest.never_above.max_effective > 0.95, "{honest:?}");
    let doubled = run_double_granting(&scenario, 7).expect("the scenario runs");
    assert!(doubled.never_above.excesses > 0, "{doubled:?}");
    assert!(doubled.never_above.max_effective > 1.0, "{doubled:?}");
}

// A request that finds no right waits for its region's ask, as the service's decision waits
// for its take: far below the limit, where the ideal admits everything, so does the fleet
// once its first window is over.

#[test]
fn requests_far_below_the_limit_wait_for_rights_and_pass() {
    let mut scenario = short("three-x2", 6);
    for source in &mut scenario.sources {
        // 2× the limit shared by three regions, down to a fifth of the limit.
        source.rate /= 10.0;
    }
    let report = run(&scenario, 7).expect("the scenario runs");
    assert_eq!(report.never_above.excesses, 0, "{report:?}");
    // After the first window (a request refused while its ask travelled: 586 of 594): not one refusal the ideal would not make.
    assert_eq!(report.admitted, report.ideal_admitted, "{report:?}");
}
