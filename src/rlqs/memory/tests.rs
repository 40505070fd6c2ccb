use super::*;

#[test]
fn charges_fit_under_the_cap_and_go_back_when_dropped() {
    let pool = Arc::new(BucketBytes::new(1_000));
    let a = pool.try_charge(600).expect("fits");
    assert!(pool.try_charge(500).is_none(), "over the cap");
    let b = pool.try_charge(400).expect("fits exactly");
    assert_eq!(pool.used(), 1_000);
    let forced = pool.charge(50);
    assert_eq!(pool.used(), 1_050);
    drop((a, b, forced));
    assert_eq!(pool.used(), 0);
}
