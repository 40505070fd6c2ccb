use super::*;

#[test]
fn the_budget_grows_from_what_the_previous_cell_leaves_to_the_limit() {
    assert_eq!(budget(600, 600, 20_000, 0), 0);
    assert_eq!(budget(600, 600, 20_000, 10_000), 300);
    assert_eq!(budget(600, 600, 20_000, 20_000), 600);
    assert_eq!(budget(600, 0, 20_000, 0), 600);
    // the single process's arithmetic: ⌊600 × 19,999 ÷ 20,000⌋ = 599 weighs, 1 is free
    assert_eq!(budget(600, 600, 20_000, 1), 1);
}

#[test]
fn segments_never_vest_more_than_the_growth_and_all_of_it_at_their_end() {
    let (limit, previous, window) = (600, 597, 20_000);
    let shares = max_min(&[3.0, 1.0, 1.0, 0.0, 7.0, 2.0, 5.0]);
    // every holder's rights of each stretch of 700 ms, split by its share
    let mut segments = vec![Vec::new(); shares.len()];
    for from in (0..window).step_by(700) {
        let to = (from + 700).min(window);
        let growth = budget(limit, previous, window, to) - budget(limit, previous, window, from);
        for (held, rights) in segments.iter_mut().zip(split(growth, &shares)) {
            held.push(Segment {
                rights,
                from_ms: from,
                to_ms: to,
            });
        }
    }
    for elapsed in (0..=window).step_by(37).chain([700, 1_400, window]) {
        let total: u64 = segments
            .iter()
            .map(|held| vested(held, limit, previous, window, elapsed))
            .sum();
        let growth = budget(limit, previous, window, elapsed) - budget(limit, previous, window, 0);
        assert!(total <= growth, "{total} > {growth} at {elapsed}");
        assert!(total + shares.len() as u64 >= growth, "{total} ≪ {growth}");
        if elapsed % 700 == 0 || elapsed == window {
            assert_eq!(total, growth, "at a stretch's end everything vested");
        }
    }
}

#[test]
fn a_split_sums_to_its_total() {
    assert_eq!(split(10, &[1, 1, 1]), vec![4, 3, 3]);
    assert_eq!(split(7, &[0, 0]), vec![4, 3]);
    assert_eq!(split(5, &[0, 9, 1]), vec![0, 5, 0]);
    assert_eq!(split(0, &[3, 4]), vec![0, 0]);
    assert!(split(3, &[]).is_empty());
}

#[test]
fn max_min_meets_small_demands_and_splits_the_rest() {
    let unit = SHARE_UNITS as f64;
    let shares = max_min(&[0.1 * unit, 2.0 * unit, 0.1 * unit]);
    let near = |got: u64, want: f64| (got as f64 - want * unit).abs() <= 2.0;
    assert!(near(shares[0], 0.1) && near(shares[2], 0.1), "{shares:?}");
    assert!(near(shares[1], 0.8), "{shares:?}");
    // no demand anywhere: even shares; one demand alone: all of it
    assert!(max_min(&[0.0, 0.0]).iter().all(|&s| near(s, 0.5)));
    let lone = max_min(&[0.0, 0.2 * unit, 0.0]);
    assert!(near(lone[1], 1.0), "{lone:?}");
    for demands in [
        vec![1e30, 1e30, 3.0],
        vec![0.3 * unit; 7],
        vec![-1.0, f64::NAN],
    ] {
        assert!(max_min(&demands).iter().sum::<u64>() <= SHARE_UNITS);
    }
}
