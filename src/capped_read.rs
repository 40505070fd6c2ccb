//! Reading at most a given number of bytes. Every file the service reads (limits files, PEM
//! files, cgroup files) is input that may be far larger than any real one, or have no end at
//! all (a symlink to `/dev/zero`): each read is capped, and past the cap refused.

use std::io::{self, Read};

/// Everything `reader` holds, or `None` when that is more than `max` bytes. One byte past the
/// cap is read, which tells "exactly at the cap" from "over it", and no more.
pub fn read_at_most(reader: impl Read, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    reader.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}
