//! Expired global rows deleted from a real database (MariaDB): by the `cleanup` subcommand,
//! in batches of `--batch`, and by `serve` itself with `--global-cleanup-interval`; rows
//! whose window is still live stay.

use gcounter_rls_integration as support;

use std::process::Command;
use std::time::Duration;

use support::Service;
use support::process::run_within;
use support::sql_admin::{Backend, TestDb};

/// Three rows long expired (window cells of 1970) and one that expires in a day.
fn insert_rows(db: &TestDb) {
    let live_until = support::now_ms() + 86_400_000;
    let mut values = Vec::new();
    for (identifier, expires_at) in [
        ("old-1", 3_000),
        ("old-2", 3_000),
        ("old-3", 3_000),
        ("live", live_until),
    ] {
        values.push(format!(
            "('w', 'n', '{identifier}', 1000, 1, 'a', 5, {expires_at}, 0)"
        ));
    }
    db.query(&format!(
        "INSERT INTO ratelimit_window_counts \
         (workspace_id, namespace, identifier, duration_ms, sequence, region, count, \
          expires_at, updated_at) VALUES {}",
        values.join(", ")
    ));
}

/// The identifiers left in the table, sorted.
fn identifiers(db: &TestDb) -> Vec<String> {
    let mut left: Vec<String> = db
        .query("SELECT CAST(identifier AS CHAR) FROM ratelimit_window_counts")
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    left.sort();
    left
}

fn run(args: &[&str]) -> String {
    let (output, text, ended) = run_within(
        Command::new(support::binary()).args(args),
        Duration::from_secs(30),
    );
    assert!(ended, "`gcounter-rls {}` still running after 30 s", args[0]);
    assert!(
        output.status.success(),
        "`gcounter-rls {args:?}` failed: {text}"
    );
    text
}

/// A new MariaDB database named after `name`, migrated by the binary, with the test's rows;
/// and its URL.
fn migrated_with_rows(name: &str) -> (TestDb, String) {
    let db = TestDb::create(Backend::MariaDb, name);
    let url = db.url();
    run(&["migrate", "--database-url", &url]);
    insert_rows(&db);
    (db, url)
}

#[test]
fn the_cleanup_subcommand_deletes_expired_rows_in_batches() {
    let (db, url) = migrated_with_rows("cleanup");
    let text = run(&["cleanup", "--database-url", &url, "--batch", "2"]);
    assert!(
        text.contains("3 expired row(s) deleted"),
        "cleanup's report: {text}"
    );
    assert_eq!(identifiers(&db), ["live"]);
    let text = run(&["cleanup", "--database-url", &url]);
    assert!(text.contains("0 expired row(s) deleted"), "{text}");
}

#[test]
fn serve_deletes_expired_rows_every_cleanup_interval() {
    let (db, url) = migrated_with_rows("serve-cleanup");
    let (_dir, path) = support::limits_file(&support::one_rule("c", "k", "minute", 1, 10));
    let service = Service::start(
        &path,
        &[
            "--region",
            "a",
            "--database-url",
            &url,
            "--global-cleanup-interval",
            "1s",
        ],
    );
    service.wait_until(
        Duration::from_secs(15),
        "the expired rows deleted by serve",
        || {
            let left = identifiers(&db);
            (left == ["live"]).then_some(()).ok_or(format!("{left:?}"))
        },
    );
}
