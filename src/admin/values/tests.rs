use super::*;

#[test]
fn hashes_are_stable_in_a_process_and_hide_the_value() {
    let display = ValueDisplay::hashed();
    let a = display.show("sk-live-0123456789abcdef");
    assert_eq!(a, display.show("sk-live-0123456789abcdef"));
    assert_ne!(a, display.show("sk-live-0123456789abcdee"));
    assert!(a.starts_with("hash:") && a.len() == 21, "{a}");
    assert!(!a.contains("sk-live"), "{a}");
    assert_eq!(ValueDisplay::Shown.show("v"), "v");
}
