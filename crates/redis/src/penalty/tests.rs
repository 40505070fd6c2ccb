use super::*;

#[test]
fn a_penalty_key_shares_its_counters_slot_and_is_no_cell_key() {
    let counter = CounterKey {
        scope: gcounter_engine::cell_key::Scope::new("d", "1:k/"),
        identifier: "1:a".into(),
        duration_ms: 60_000,
    };
    let key = penalty_key("rl:", &counter);
    let cell = crate::key::redis_key(
        "rl:",
        &CellKey {
            scope: gcounter_engine::cell_key::Scope::new("d", "1:k/"),
            identifier: "1:a".into(),
            duration_ms: 60_000,
            sequence: 7,
        },
    );
    assert!(key.ends_with(":60000:penalty"), "{key}");
    assert_eq!(
        redis::cluster_routing::Slot::for_key(&key),
        redis::cluster_routing::Slot::for_key(&cell)
    );
}
