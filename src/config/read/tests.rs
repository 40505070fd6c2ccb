use super::super::test_files::{symlink, temp_dir, write};
use super::*;

#[test]
fn a_file_at_the_cap_is_read_and_one_byte_more_is_refused() {
    let dir = temp_dir();
    let path = write(dir.path(), "a.yaml", &"x".repeat(100));
    assert!(read_text(&path, 100).is_ok_and(|t| t.len() == 100));
    assert!(matches!(
        read_text(&path, 99),
        Err(ReadError::TooLarge { max: 99 })
    ));
}

#[test]
fn a_symlink_to_dev_zero_is_refused_without_reading_it() {
    let dir = temp_dir();
    let path = dir.path().join("zero.yaml");
    symlink("/dev/zero", &path);
    let error = read_text(&path, u64::MAX).map(|t| t.len());
    assert!(
        matches!(error, Err(ReadError::NotRegular("a character device"))),
        "{error:?}"
    );
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = temp_dir();
    let path = dir.path().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo").arg(&path).status();
    assert!(
        made.as_ref().is_ok_and(|s| s.success()),
        "mkfifo failed: {made:?}"
    );
    // Without O_NONBLOCK the open waits for a writer forever: the test would hang.
    let error = read_text(&path, 1_000).map(|t| t.len());
    assert!(
        matches!(error, Err(ReadError::NotRegular("a FIFO"))),
        "{error:?}"
    );
}
