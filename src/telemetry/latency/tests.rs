use super::*;

#[test]
fn observations_land_in_their_bucket_and_the_sum() {
    let histogram = LatencyHistogram::default();
    histogram.observe(Duration::from_micros(3));
    histogram.observe(Duration::from_micros(5));
    histogram.observe(Duration::from_micros(30));
    histogram.observe(Duration::from_secs(20));
    let snapshot = histogram.snapshot();
    assert_eq!(snapshot.count, 4);
    assert_eq!(snapshot.cumulative.first(), Some(&(0.000_005, 2)));
    // 30 µs is in (25 µs, 50 µs]
    assert_eq!(snapshot.cumulative.get(2), Some(&(0.000_025, 2)));
    assert_eq!(snapshot.cumulative.get(3), Some(&(0.000_05, 3)));
    assert_eq!(snapshot.cumulative.last(), Some(&(10.0, 3)));
    assert!((snapshot.sum_seconds - 20.000_038).abs() < 1e-9);
}

#[test]
fn every_default_bucket_and_its_thousandth_is_a_bound() {
    let bounds: Vec<f64> = BOUNDS_NS.iter().map(|ns| *ns as f64 / 1e9).collect();
    for bucket in DEFAULT_BUCKETS {
        for seconds in [bucket, bucket / 1_000.0] {
            assert!(
                bounds.iter().any(|b| (b - seconds).abs() < seconds * 1e-9),
                "{seconds} is not a bound"
            );
        }
    }
}

#[test]
fn rebucketing_in_seconds_and_milliseconds_is_exact() {
    let histogram = LatencyHistogram::default();
    // 2 µs, 700 µs, 30 ms, 20 s
    for micros in [2, 700, 30_000, 20_000_000] {
        histogram.observe(Duration::from_micros(micros));
    }
    let snapshot = histogram.snapshot();
    let seconds = snapshot.rebucketed(&DEFAULT_BUCKETS, 1.0);
    // 2 µs and 700 µs under 5 ms; 30 ms under 50 ms; 20 s above 10 s
    assert_eq!(seconds.first(), Some(&(0.005, 2)));
    assert_eq!(seconds.get(3), Some(&(0.05, 1)));
    assert_eq!(seconds.last(), Some(&(f64::INFINITY, 1)));
    assert_eq!(seconds.iter().map(|(_, n)| n).sum::<u64>(), 4);
    // In milliseconds: 2 µs = 0.002 ms ≤ 0.005; 700 µs = 0.7 ms ≤ 1; 30 ms ≤ 50 ms? no:
    // above 10 (ms), as is 20 s.
    let millis = snapshot.rebucketed(&DEFAULT_BUCKETS, 1_000.0);
    assert_eq!(millis.first(), Some(&(0.005, 1)));
    assert_eq!(millis.get(7), Some(&(1.0, 1)));
    assert_eq!(millis.last(), Some(&(f64::INFINITY, 2)));
}
