use super::*;
use crate::test_support::clap_refusal;

#[test]
fn refuses_zero_and_the_absurd_and_keeps_the_rest() {
    let range = DurationRange::new(millis(1), hours(24));
    assert_eq!(range.parse("100ms"), Ok(millis(100)));
    assert_eq!(range.parse("24h"), Ok(hours(24)));
    assert!(range.parse("0s").is_err());
    assert!(range.parse("25h").is_err());
    assert!(range.parse("soon").is_err());
}

#[test]
fn clap_names_the_flag_and_the_range() {
    #[derive(clap::Parser, Debug)]
    struct Args {
        #[arg(long, value_parser = DurationRange::new(millis(1), hours(1)).parser())]
        every: Duration,
    }
    let error = clap_refusal::<Args>(&["t", "--every", "0s"]);
    assert!(error.contains("--every"), "{error}");
    assert!(error.contains("'0s'"), "{error}");
    assert!(error.contains("must be between 1ms and 1h"), "{error}");
}
