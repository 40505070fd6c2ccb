use super::*;

fn key_of(request: &RateLimitRequest) -> String {
    request.descriptors[0].entries[0].value.clone()
}

#[test]
fn sequential_keys_are_each_key_once_across_workers_then_none() {
    let template = RequestTemplate::one_keyed_entry(3);
    let shared = Arc::new(AtomicU64::new(0));
    let mut a = Keys::new(Some(&shared), template.key_space, 0);
    let mut b = Keys::new(Some(&shared), template.key_space, 1);
    let sent: Vec<String> = [
        a.next(&template),
        b.next(&template),
        a.next(&template),
        b.next(&template),
    ]
    .iter()
    .flatten()
    .map(key_of)
    .collect();
    assert_eq!(sent, ["0", "1", "2"]);
    assert!(a.next(&template).is_none());
}
