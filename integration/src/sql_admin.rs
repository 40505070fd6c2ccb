//! Throw-away databases for the global (SQL) layer's end-to-end tests, driven through the
//! `mysql`/`mariadb` and `psql` command-line clients (no SQL driver in the test binary).
//!
//! A [`TestDb`] is created empty (the service creates the table with `--migrate`) and dropped
//! with its handle. A missing server or client fails the test saying what is missing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// MariaDB (or MySQL) of the machine, as root without a password.
pub const MARIADB_ADDR: &str = "127.0.0.1:3306";
/// PostgreSQL of the machine, as `postgres` without a password.
pub const POSTGRES_ADDR: &str = "127.0.0.1:5432";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    MariaDb,
    Postgres,
    Sqlite,
}

/// One database (or SQLite file) of one test; dropped with the handle.
pub struct TestDb {
    pub backend: Backend,
    /// The database's name (the file name for SQLite).
    pub name: String,
    /// Kept alive for SQLite: the directory holding the file.
    dir: Option<tempfile::TempDir>,
    path: Option<PathBuf>,
}

fn unique_name(test: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("gcrls_e2e_{}_{}_{n}", std::process::id(), test)
}

fn run(program: &str, args: &[&str], what: &str) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{what}: cannot run `{program}` ({e}); install the client \
             (apt-get install mariadb-client postgresql-client)"
            )
        });
    assert!(
        output.status.success(),
        "{what}: `{program} {}` failed ({}): {}\n(is the server running? MariaDB is expected on \
         {MARIADB_ADDR} as root without a password, PostgreSQL on {POSTGRES_ADDR} as postgres)",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn mariadb(database: Option<&str>, sql: &str, what: &str) -> String {
    let mut args = vec!["-uroot", "-h127.0.0.1", "-P3306", "-N", "-B"];
    if let Some(db) = database {
        args.push(db);
    }
    args.extend(["-e", sql]);
    run("mysql", &args, what)
}

fn postgres(database: &str, sql: &str, what: &str) -> String {
    run(
        "psql",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            "5432",
            "-U",
            "postgres",
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-c",
            sql,
        ],
        what,
    )
}

impl TestDb {
    /// A new empty database (a new file path for SQLite), named after `test`.
    pub fn create(backend: Backend, test: &str) -> TestDb {
        let name = unique_name(test);
        let (dir, path) = match backend {
            Backend::MariaDb => {
                mariadb(
                    None,
                    &format!("CREATE DATABASE `{name}`"),
                    "MariaDB is missing",
                );
                (None, None)
            }
            Backend::Postgres => {
                postgres(
                    "postgres",
                    &format!("CREATE DATABASE \"{name}\""),
                    "PostgreSQL is missing",
                );
                (None, None)
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir for the SQLite file");
                let path = dir.path().join("g.db");
                (Some(dir), Some(path))
            }
        };
        TestDb {
            backend,
            name,
            dir,
            path,
        }
    }

    /// The `--database-url` reaching the database directly.
    pub fn url(&self) -> String {
        match self.backend {
            Backend::MariaDb => format!("mysql://root@{MARIADB_ADDR}/{}", self.name),
            Backend::Postgres => format!("postgres://postgres@{POSTGRES_ADDR}/{}", self.name),
            Backend::Sqlite => format!(
                "sqlite://{}?mode=rwc",
                self.path.as_ref().expect("SQLite path").display()
            ),
        }
    }

    /// The `--database-url` reaching the database through `addr` (a proxy), not for SQLite.
    pub fn url_via(&self, addr: SocketAddr) -> String {
        match self.backend {
            Backend::MariaDb => format!("mysql://root@{addr}/{}", self.name),
            Backend::Postgres => format!("postgres://postgres@{addr}/{}", self.name),
            Backend::Sqlite => panic!("SQLite has no network address to proxy"),
        }
    }

    /// The server's address (to put a proxy in front of it).
    pub fn server_addr(&self) -> SocketAddr {
        match self.backend {
            Backend::MariaDb => MARIADB_ADDR.parse().expect("address"),
            Backend::Postgres => POSTGRES_ADDR.parse().expect("address"),
            Backend::Sqlite => panic!("SQLite has no server"),
        }
    }

    /// Rows of `sql`, each a tab-separated line (MariaDB, PostgreSQL; SQLite via `sqlite3`).
    pub fn query(&self, sql: &str) -> Vec<Vec<String>> {
        let text = match self.backend {
            Backend::MariaDb => mariadb(Some(&self.name), sql, "query MariaDB"),
            Backend::Postgres => {
                // psql -At separates columns with '|'.
                postgres(&self.name, sql, "query PostgreSQL").replace('|', "\t")
            }
            // A service writing at that moment holds the lock: wait for it (up to 5 s)
            // instead of failing with "database is locked".
            Backend::Sqlite => run(
                "sqlite3",
                &[
                    "-cmd",
                    ".timeout 5000",
                    "-separator",
                    "\t",
                    &self
                        .path
                        .as_ref()
                        .expect("SQLite path")
                        .display()
                        .to_string(),
                    sql,
                ],
                "query SQLite",
            ),
        };
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.split('\t').map(str::to_owned).collect())
            .collect()
    }

    /// `region → SUM(count)` over the whole table (one test's cells only: the database is
    /// the test's own). The region column is binary: cast to text for the CLIs.
    pub fn counts_by_region(&self) -> Vec<(String, u64)> {
        let (region, sum) = match self.backend {
            Backend::MariaDb => ("CAST(region AS CHAR)", "CAST(SUM(count) AS CHAR)"),
            Backend::Postgres => ("convert_from(region, 'UTF8')", "CAST(SUM(count) AS TEXT)"),
            Backend::Sqlite => ("CAST(region AS TEXT)", "CAST(SUM(count) AS TEXT)"),
        };
        let sql = format!(
            "SELECT {region}, {sum} FROM ratelimit_window_counts GROUP BY region ORDER BY region"
        );
        self.query(&sql)
            .into_iter()
            .map(|row| {
                let count = row[1]
                    .parse()
                    .unwrap_or_else(|e| panic!("a count in {row:?}: {e}"));
                (row[0].clone(), count)
            })
            .collect()
    }

    /// Whether the counts table exists: the service migrates in the background once the
    /// database answers, so a test awaits this before reading a table it did not create.
    pub fn has_schema(&self) -> bool {
        let sql = match self.backend {
            Backend::MariaDb => {
                "SELECT COUNT(*) FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'ratelimit_window_counts'"
            }
            Backend::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_catalog = current_database() AND table_name = 'ratelimit_window_counts'"
            }
            Backend::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'ratelimit_window_counts'"
            }
        };
        self.query(sql)
            .first()
            .and_then(|row| row.first())
            .map(String::as_str)
            == Some("1")
    }

    /// The sum of `region`'s components (0 without rows).
    pub fn region_count(&self, region: &str) -> u64 {
        self.counts_by_region()
            .into_iter()
            .find(|(r, _)| r == region)
            .map_or(0, |(_, c)| c)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Best effort: never panic while a failed test unwinds.
        let _ = match self.backend {
            Backend::MariaDb => Command::new("mysql")
                .args([
                    "-uroot",
                    "-h127.0.0.1",
                    "-P3306",
                    "-e",
                    &format!("DROP DATABASE IF EXISTS `{}`", self.name),
                ])
                .output(),
            Backend::Postgres => Command::new("psql")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-c",
                    &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
                ])
                .output(),
            Backend::Sqlite => {
                drop(self.dir.take());
                return;
            }
        };
    }
}

/// `serve`'s flags for region `region` on the shared database `url` (migrated at start),
/// then `extra`.
pub fn region_args<'a>(region: &'a str, url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--region", region, "--database-url", url, "--migrate"];
    args.extend_from_slice(extra);
    args
}

/// Every count published, flushed and synced every 200 ms: a region sees another's counts
/// within a second.
pub const FAST_GLOBAL: [&str; 6] = [
    "--publish-floor",
    "0",
    "--global-flush-interval",
    "200ms",
    "--global-sync-interval",
    "200ms",
];
