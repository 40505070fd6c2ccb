use super::*;

const LIMIT: u64 = 10;
const W: u64 = 1_000;

fn at(key: usize, times: &[u64]) -> Vec<Admission> {
    times
        .iter()
        .map(|&at_ms| Admission { key, at_ms })
        .collect()
}

#[test]
fn the_limit_in_a_window_is_within_it_and_one_more_is_not() {
    let ten = at(0, &[100; 10]);
    let judged = judge(LIMIT, W, &ten);
    assert_eq!((judged.excesses, judged.max_effective), (0, 1.0));
    let mut eleven = ten.clone();
    eleven.push(Admission { key: 0, at_ms: 999 });
    let judged = judge(LIMIT, W, &eleven);
    assert_eq!(judged.excesses, 1);
    assert_eq!(
        judged.first_excess,
        Some(Excess {
            key: 0,
            at_ms: 999,
            effective: 11
        })
    );
}

#[test]
fn the_previous_window_weighs_as_the_single_process_weighs_it() {
    // 10 at the end of window 0; at 1,500 the previous weighs ⌊10 × 500 / 1,000⌋ = 5
    let mut log = at(0, &[900; 10]);
    log.extend(at(0, &[1_500; 5]));
    assert_eq!(judge(LIMIT, W, &log).excesses, 0);
    log.push(Admission {
        key: 0,
        at_ms: 1_500,
    });
    assert_eq!(judge(LIMIT, W, &log).excesses, 1);
    // a fixed window's count alone would have allowed it: the weight is what refuses
    assert!((judge(LIMIT, W, &log).max_window - 1.0).abs() < 1e-9);
}

#[test]
fn keys_are_judged_apart_and_the_log_may_come_in_any_order() {
    let mut log = at(1, &[10; 10]);
    log.extend(at(2, &[10; 10]));
    log.reverse();
    assert_eq!(judge(LIMIT, W, &log).excesses, 0);
}
