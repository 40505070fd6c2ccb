//! One value parser for every byte-size setting: a plain number of bytes (`1048576`) or a
//! number with a unit (`256KiB`, `1MiB`, `1.5GiB`; `KB`/`MB` are powers of 1000), within
//! bounds.
//!
//! Each byte flag declares the range that makes sense for it, and clap refuses anything
//! outside at start, naming the flag: `invalid value '1KiB' for '--max-request-bytes <..>'`.

use std::fmt;

use clap::builder::TypedValueParser;

use crate::bounded_arg::Bounds;

/// Parses a byte size and refuses it outside `min..=max`.
pub type ByteSizeRange = Bounds<u64>;

impl ByteSizeRange {
    /// The check alone, for values that do not come from the command line.
    pub fn check(&self, value: u64) -> Result<u64, String> {
        self.within(value, Bytes)
            .map_err(|refusal| format!("{refusal}, got {}", Bytes(value)))
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
mod tests;
