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
fn segments_vest_exactly_the_growth_so_far() {
    let (limit, previous, window) = (600, 597, 20_000);
    let shares = max_min(&[3.0, 1.0, 1.0, 0.0, 7.0, 2.0, 5.0]);
    // every holder's rights of each stretch of 700 ms, split by its share
    let mut segments = vec![Vec::new(); shares.len()];
    for from in (0..window).step_by(700) {
        let to = (from + 700).min(window);
        let growth = budget(limit, previous, window, to) - budget(limit, previous, window, from);
        let units = interleave(&split(growth, &shares));
        for (held, vests_at) in segments.iter_mut().zip(units) {
            held.push(Segment {
                vests_at,
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
        assert_eq!(total, growth, "at {elapsed}");
    }
}

#[test]
fn interleaved_rights_take_every_unit_once_and_spread_each_holder() {
    let units = interleave(&[3, 3, 3, 1]);
    let mut all: Vec<u64> = units.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=10).collect::<Vec<_>>());
    // one holder's last right at the stretch's end, not every holder's
    let last_at_end = units.iter().filter(|u| u.last() == Some(&10)).count();
    assert_eq!(last_at_end, 1, "{units:?}");
    // each holder's rights spread over the stretch, in the order of their ideal instants
    // (1/6, 3/6, 5/6 of it for three rights; 1/2 for one)
    assert_eq!(
        units,
        vec![vec![1, 4, 8], vec![2, 5, 9], vec![3, 6, 10], vec![7]]
    );
    assert!(interleave(&[0, 2])[0].is_empty());
    assert_eq!(interleave(&[4]), vec![vec![1, 2, 3, 4]]);
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

#[test]
fn the_reserve_comes_off_the_spare_only() {
    let unit = SHARE_UNITS as f64;
    // demands of 0.1 and 0.3 of the growth: 0.6 spare, a quarter of it kept
    let demands = [0.1 * unit, 0.3 * unit, 0.0];
    let mut shares = max_min(&demands);
    let reserve = reserve_of_spare(&mut shares, &demands, 0.25);
    let near = |got: u64, want: f64| (got as f64 - want * unit).abs() <= 3.0;
    assert!(near(reserve, 0.15), "{reserve}");
    assert!(
        near(shares[0], 0.1 + 0.225) && near(shares[1], 0.3 + 0.225),
        "{shares:?}"
    );
    assert_eq!(shares[2], 0);
    assert!(shares.iter().sum::<u64>() + reserve <= SHARE_UNITS);
    // contended: every share meets a demand, nothing kept
    let contended = [0.6 * unit, 0.6 * unit];
    let mut shares = max_min(&contended);
    assert_eq!(reserve_of_spare(&mut shares, &contended, 0.25), 0);
    // no demand anywhere: taken evenly from all
    let idle = [0.0, 0.0];
    let mut shares = max_min(&idle);
    let reserve = reserve_of_spare(&mut shares, &idle, 0.5);
    assert!(
        near(reserve, 0.5) && near(shares[0], 0.25),
        "{reserve} {shares:?}"
    );
}
