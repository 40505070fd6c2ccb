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
