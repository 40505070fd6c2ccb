use super::*;

fn over(roles: &[Role]) -> bool {
    let mut tally = Tally::default();
    for role in roles {
        tally.add(*role);
    }
    tally.over_limit()
}

#[test]
fn quota_descriptors_are_over_only_together() {
    use Role::*;
    assert!(!over(&[]));
    assert!(!over(&[Unlimited, Regular { over: false }]));
    assert!(over(&[Regular { over: true }, Quota { over: false }]));
    assert!(over(&[Quota { over: true }]));
    assert!(!over(&[Quota { over: true }, Quota { over: false }]));
    assert!(over(&[
        Quota { over: true },
        Quota { over: true },
        Unlimited
    ]));
    // A regular descriptor within its limit does not rescue nor sink quotas.
    assert!(over(&[Quota { over: true }, Regular { over: false }]));
}
