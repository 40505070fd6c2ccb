//! One value parser for every byte-size setting: a plain number of bytes (`1048576`) or a
//! number with a unit (`256KiB`, `1MiB`, `1.5GiB`; `KB`/`MB` are powers of 1000), within
//! bounds.
//!
//! Each byte flag declares the range that makes sense for it, and clap refuses anything
//! outside at start, naming the flag: `invalid value '1KiB' for '--max-request-bytes <..>'`.

use std::fmt;

use clap::builder::TypedValueParser;

/// Parses a byte size and refuses it outside `min..=max`.
#[derive(Debug, Clone, Copy)]
pub struct ByteSizeRange {
    min: u64,
    max: u64,
}

impl ByteSizeRange {
    pub const fn new(min: u64, max: u64) -> Self {
        Self { min, max }
    }

    /// The check alone, for values that do not come from the command line.
    pub fn check(&self, value: u64) -> Result<u64, String> {
        if value < self.min || value > self.max {
            return Err(format!(
                "must be between {} and {}, got {}",
                Bytes(self.min),
                Bytes(self.max),
                Bytes(value)
            ));
        }
        Ok(value)
    }

    /// `text` as a number of bytes, within the range.
    pub fn parse(&self, text: &str) -> Result<u64, String> {
        let value = text
            .trim()
            .parse::<bytesize::ByteSize>()
            .map_err(|_| format!("{text:?} is not a size (e.g. 1048576, 256KiB, 1MiB)"))?
            .as_u64();
        self.check(value)
    }

    /// The clap value parser, for a field of type `T` (`u64`, `usize`, `u32`): its error
    /// names the flag, the value and the range.
    pub fn parser<T>(self) -> impl TypedValueParser<Value = T>
    where
        T: TryFrom<u64> + Clone + Send + Sync + 'static,
    {
        move |text: &str| {
            let value = self.parse(text)?;
            T::try_from(value).map_err(|_| format!("{} is too large here", Bytes(value)))
        }
    }
}

/// A byte count written exactly: in the largest binary unit that divides it, else in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (1 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ];
        for (size, unit) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// Kibibytes, for bounds.
pub const fn kib(n: u64) -> u64 {
    n << 10
}

/// Mebibytes, for bounds.
pub const fn mib(n: u64) -> u64 {
    n << 20
}

/// Gibibytes, for bounds.
pub const fn gib(n: u64) -> u64 {
    n << 30
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let parse = |argv: &[&str]| <Args as clap::Parser>::try_parse_from(argv);
        let args = parse(&["t", "--size", "256KiB"]).map(|a| a.size);
        assert_eq!(args.ok(), Some(256 << 10));
        let error = parse(&["t", "--size", "512"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("--size"), "{error}");
        assert!(error.contains("'512'"), "{error}");
        assert!(error.contains("must be between 1KiB and 64MiB"), "{error}");
        let error = parse(&["t", "--size", "1KiB", "--small", "4GiB"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("--small"), "{error}");
    }
}
