use super::*;

#[test]
fn only_changes_are_said() {
    let redis = Reachability::new("Redis", "decisions go on");
    assert_eq!(redis.reached(), Some(Change::FirstReached));
    assert_eq!(redis.reached(), None);
    assert_eq!(redis.lost(&"timeout"), Some(Change::Lost));
    assert_eq!(redis.lost(&"timeout"), None);
    assert_eq!(redis.reached(), Some(Change::Regained));
    assert_eq!(redis.reached(), None);
}

#[test]
fn a_backend_down_at_start_is_said_once_then_its_first_answer() {
    let database = Reachability::new("the database", "decisions go on");
    assert_eq!(database.lost(&"refused"), Some(Change::NotReached));
    assert_eq!(database.lost(&"refused"), None);
    assert_eq!(database.reached(), Some(Change::FirstReached));
    assert_eq!(database.lost(&"refused"), Some(Change::Lost));
    assert_eq!(database.reached(), Some(Change::Regained));
}
