//! The range a flag's value must lie in, shared by the byte-size and the duration parsers
//! ([`crate::byte_size_arg`], [`crate::duration_arg`]): each flag declares its own range, and
//! each parser words the refusal in its own units.

use std::fmt::Display;

/// `min..=max` of one flag.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<T> {
    min: T,
    max: T,
}

impl<T: PartialOrd + Copy> Bounds<T> {
    pub const fn new(min: T, max: T) -> Self {
        Self { min, max }
    }

    /// `value` when it lies within the bounds, else "must be between MIN and MAX", the bounds
    /// written by `show` in the flag's units.
    pub fn within<D: Display>(&self, value: T, show: impl Fn(T) -> D) -> Result<T, String> {
        if value < self.min || value > self.max {
            return Err(format!(
                "must be between {} and {}",
                show(self.min),
                show(self.max)
            ));
        }
        Ok(value)
    }
}
