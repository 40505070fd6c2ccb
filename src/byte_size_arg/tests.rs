use super::*;
use crate::test_support::clap_refusal;

#[test]
fn plain_numbers_and_units_are_accepted_within_the_range() {
    let range = ByteSizeRange::new(kib(1), mib(64));
    assert_eq!(range.parse("1048576"), Ok(mib(1)));
    assert_eq!(range.parse("256KiB"), Ok(kib(256)));
    assert_eq!(range.parse("256 KiB"), Ok(kib(256)));
    assert_eq!(range.parse("1MiB"), Ok(mib(1)));
    assert_eq!(range.parse("1.5MiB"), Ok(mib(3) / 2));
    assert_eq!(range.parse("64MiB"), Ok(mib(64)));
    assert_eq!(range.parse("2KB"), Ok(2_000));
    assert!(range.parse("1023").is_err());
    assert!(range.parse("64MiB").is_ok());
    assert!(range.parse("67108865").is_err());
    assert!(range.parse("lots").is_err());
    assert!(range.parse("-1").is_err());
    assert!(range.parse("99999999999TiB").is_err());
}

#[test]
fn bounds_are_written_exactly() {
    assert_eq!(Bytes(65_535).to_string(), "65535B");
    assert_eq!(Bytes(kib(64)).to_string(), "64KiB");
    assert_eq!(Bytes(mib(256)).to_string(), "256MiB");
    assert_eq!(Bytes(0).to_string(), "0B");
}

#[test]
fn clap_names_the_flag_and_the_range() {
    #[derive(clap::Parser, Debug)]
    struct Args {
        #[arg(long, value_parser = ByteSizeRange::new(kib(1), mib(64)).parser::<usize>())]
        size: usize,
        #[arg(long, value_parser = ByteSizeRange::new(1, u64::MAX).parser::<u32>())]
        small: Option<u32>,
    }
    let args = <Args as clap::Parser>::try_parse_from(["t", "--size", "256KiB"]).map(|a| a.size);
    assert_eq!(args.ok(), Some(256 << 10));
    let error = clap_refusal::<Args>(&["t", "--size", "512"]);
    assert!(error.contains("--size"), "{error}");
    assert!(error.contains("'512'"), "{error}");
    assert!(error.contains("must be between 1KiB and 64MiB"), "{error}");
    let error = clap_refusal::<Args>(&["t", "--size", "1KiB", "--small", "4GiB"]);
    assert!(error.contains("--small"), "{error}");
}
