use super::*;

fn map(entries: &[(&str, &str)]) -> HashMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_same_entries_make_the_same_key_whatever_their_order() {
    let a = BucketKey::new(&map(&[("b", "2"), ("a", "1")])).expect("small");
    let b = BucketKey::new(&map(&[("a", "1"), ("b", "2")])).expect("small");
    assert_eq!(a, b);
    assert_eq!(
        a.entries().collect::<Vec<_>>(),
        vec![("a", "1"), ("b", "2")]
    );
}

#[test]
fn boundaries_keep_keys_apart_that_concatenate_alike() {
    let a = BucketKey::new(&map(&[("ab", "c")])).expect("small");
    let b = BucketKey::new(&map(&[("a", "bc")])).expect("small");
    assert_ne!(a, b);
    let c = BucketKey::new(&map(&[("a", ""), ("b", "c")])).expect("small");
    assert_ne!(a, c);
}

#[test]
fn the_id_sent_back_is_the_id_received() {
    let sent = map(&[("name", "users"), ("user", "é-42"), ("empty", "")]);
    let key = BucketKey::new(&sent).expect("small");
    assert_eq!(key.id().bucket, sent);
}

#[test]
fn a_key_counts_its_text_once_whatever_its_clones() {
    let key = BucketKey::new(&map(&[("k", &"v".repeat(1_000))])).expect("small");
    let clone = key.clone();
    assert_eq!(key.heap_bytes(), clone.heap_bytes());
    assert!(key.heap_bytes() >= 1_001 && key.heap_bytes() < 1_001 + 128);
}
