//! The statements of each backend's SQL dialect (MySQL/MariaDB, PostgreSQL, SQLite): the
//! upsert of own components, the sync of foreign components, the bounded delete of expired
//! rows.
//! Building them only; [`crate::SqlStore`] runs them.

use std::fmt::Write as _;

use migration::TABLE;
use sea_orm::{DbBackend, Statement, Value};

use gcounter_engine::global::{PreparedRow, clamp};

/// Bound values per upserted row (the ten columns other than `pk`).
pub(crate) const PARAMS_PER_ROW: usize = 10;

/// A window cell's key columns: the unique index is these and then `region`.
pub(crate) const CELL_KEY_COLUMNS: [&str; 5] = [
    "workspace_id",
    "namespace",
    "identifier",
    "duration_ms",
    "sequence",
];

/// A backend's way of writing the store's statements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect(pub(crate) DbBackend);

impl Dialect {
    fn quote(self, name: &str) -> String {
        match self.0 {
            DbBackend::MySql => format!("`{name}`"),
            _ => format!("\"{name}\""),
        }
    }

    /// The two-argument minimum: SQLite's scalar `MIN`, the others' `LEAST`.
    fn least(self) -> &'static str {
        if self.0 == DbBackend::Sqlite {
            "MIN"
        } else {
            "LEAST"
        }
    }

    /// Writes the `n`th placeholder (1-based).
    pub(crate) fn placeholder(self, sql: &mut String, n: usize) {
        match self.0 {
            DbBackend::Postgres => {
                let _ = write!(sql, "${n}");
            }
            _ => sql.push('?'),
        }
    }

    fn upsert_sql(self, rows: usize) -> String {
        const COLUMNS: [&str; PARAMS_PER_ROW] = [
            "workspace_id",
            "namespace",
            "identifier",
            "duration_ms",
            "sequence",
            "region",
            "count",
            "expires_at",
            "updated_at",
            "refunds",
        ];
        let q = |c: &str| self.quote(c);
        let table = q(TABLE);
        let columns: Vec<String> = COLUMNS.iter().map(|c| q(c)).collect();
        let mut sql = String::with_capacity(200 + rows * PARAMS_PER_ROW * 5);
        let changed_at = q("changed_at");
        let _ = write!(
            sql,
            "INSERT INTO {table} ({}, {changed_at}) VALUES ",
            columns.join(", ")
        );
        // Stamped with the database's clock, never the writer's (see `sync_sql`).
        let stamp = self.clock_ms();
        let mut n = 0;
        for r in 0..rows {
            sql.push_str(if r == 0 { "(" } else { ", (" });
            for _ in 0..PARAMS_PER_ROW {
                n += 1;
                self.placeholder(&mut sql, n);
                sql.push_str(", ");
            }
            sql.push_str(stamp);
            sql.push(')');
        }
        let (count, updated_at, refunds) = (q("count"), q("updated_at"), q("refunds"));
        // Both halves of the PN-counter component keep their greatest value; refunds never
        // above the row's hits (the refund rule, enforced here as well as by the engine).
        match self.0 {
            DbBackend::MySql => {
                // MySQL assigns left to right: `refunds` is set before `count` moves, so it
                // is capped by the greater of the old and the new hits, like the others do.
                let _ = write!(
                    sql,
                    " ON DUPLICATE KEY UPDATE \
                     {refunds} = LEAST(GREATEST({refunds}, VALUES({refunds})), \
                     GREATEST({count}, VALUES({count}))), \
                     {count} = GREATEST({count}, VALUES({count})), \
                     {updated_at} = GREATEST({updated_at}, VALUES({updated_at})), \
                     {changed_at} = GREATEST({changed_at}, VALUES({changed_at}))"
                );
            }
            _ => {
                let (greatest, least) = if self.0 == DbBackend::Postgres {
                    ("GREATEST", "LEAST")
                } else {
                    ("MAX", "MIN")
                };
                // The unique key: the first six columns.
                let key = columns
                    .iter()
                    .take(6)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = write!(
                    sql,
                    " ON CONFLICT ({key}) DO UPDATE SET \
                     {count} = {greatest}({table}.{count}, excluded.{count}), \
                     {refunds} = {least}({greatest}({table}.{refunds}, excluded.{refunds}), \
                     {greatest}({table}.{count}, excluded.{count})), \
                     {updated_at} = {greatest}({table}.{updated_at}, excluded.{updated_at}), \
                     {changed_at} = {greatest}({table}.{changed_at}, excluded.{changed_at})"
                );
            }
        }
        sql
    }

    /// The upsert of `rows` (this region's own components), keeping the greater of each half.
    pub(crate) fn upsert(self, region: &str, rows: &[PreparedRow<'_>], now_ms: u64) -> Statement {
        let updated_at = clamp(now_ms);
        let mut values: Vec<Value> = Vec::with_capacity(rows.len() * PARAMS_PER_ROW);
        for row in rows {
            let key = row.key;
            values.extend([
                Value::from(key.workspace().as_bytes().to_vec()),
                Value::from(key.namespace().as_bytes().to_vec()),
                Value::from(key.identifier.as_bytes().to_vec()),
                Value::from(clamp(key.duration_ms)),
                Value::from(clamp(key.sequence)),
                Value::from(region.as_bytes().to_vec()),
                Value::from(row.count),
                Value::from(row.expires_at),
                Value::from(updated_at),
                Value::from(row.refunds),
            ]);
        }
        Statement::from_sql_and_values(self.0, self.upsert_sql(rows.len()), values)
    }

    /// The database's clock in ms since the Unix epoch, as one BIGINT: what rows are stamped
    /// with and reads are marked at. A statement's (PostgreSQL: its transaction's) start, so
    /// a write's stamp is never after its commit and a read's mark never after what it sees.
    fn clock_ms(self) -> &'static str {
        match self.0 {
            DbBackend::MySql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
            DbBackend::Postgres => "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)",
            _ => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
    }

    /// A row as sync and `own_rows` read it: the key, the region, hits, and refunds at most
    /// hits (the refund rule, whoever wrote the row); `t` the table's alias.
    fn row_columns(self) -> String {
        let t = |c: &str| format!("t.{}", self.quote(c));
        let (count, refunds) = (t("count"), t("refunds"));
        format!(
            "{}, {}, {count}, {}({refunds}, {count})",
            CELL_KEY_COLUMNS.map(t).join(", "),
            t("region"),
            self.least(),
        )
    }

    /// The sync: live rows, a region's component each, in two parts. The foreign rows
    /// (`changed`: only those stamped at or after a mark, found through the `changed_at`
    /// index), and this region's own row of each cell one of them belongs to (a join on
    /// those cells' distinct keys, each own row looked up by key): so the database reads the
    /// rows it returns, not every row of a changed cell (ACCURACY.md has the plans). The last
    /// column is the database's clock, the next read's mark before its overlap.
    fn sync_sql(self, changed: bool) -> String {
        let q = |c: &str| self.quote(c);
        let t = |c: &str| format!("t.{}", self.quote(c));
        let mut n = 0;
        let mut placeholder = || {
            let mut p = String::new();
            n += 1;
            self.placeholder(&mut p, n);
            p
        };
        let table = q(TABLE);
        let (expires_at, changed_at, region) = (q("expires_at"), q("changed_at"), q("region"));
        let mut foreign_rows = |alias: &str| {
            let live = placeholder();
            let since = if changed {
                format!(" AND {alias}{changed_at} >= {}", placeholder())
            } else {
                String::new()
            };
            format!(
                "{alias}{expires_at} > {live}{since} AND {alias}{region} <> {}",
                placeholder()
            )
        };
        let foreign = foreign_rows("t.");
        let foreign_cells = foreign_rows("");
        let (own_region, own_live) = (placeholder(), placeholder());
        let on = CELL_KEY_COLUMNS
            .map(|c| format!("{} = c.{}", t(c), q(c)))
            .join(" AND ");
        let select = format!(
            "SELECT {}, {} FROM {table} t",
            self.row_columns(),
            self.clock_ms()
        );
        // Only cells another region wrote: a cell only this region wrote has nothing to
        // import (its own row is a copy of what the regional origin holds), and returning it
        // made every process read back every row its region published.
        format!(
            "{select} WHERE {foreign} UNION ALL {select} JOIN (SELECT DISTINCT {} FROM {table} \
             WHERE {foreign_cells}) c ON {on} WHERE {} = {own_region} AND {} > {own_live}",
            CELL_KEY_COLUMNS.map(q).join(", "),
            t("region"),
            t("expires_at"),
        )
    }

    /// This region's view: the live rows of the cells another region wrote (with `since`,
    /// only the foreign rows stamped at or after it and this region's rows of their cells),
    /// and the database's clock.
    pub(crate) fn sync(self, region: &str, now_ms: u64, since: Option<i64>) -> Statement {
        let region = || Value::from(region.as_bytes().to_vec());
        let now = || Value::from(clamp(now_ms));
        let foreign = || match since {
            Some(since) => vec![now(), Value::from(since), region()],
            None => vec![now(), region()],
        };
        let mut values = foreign();
        values.extend(foreign());
        values.extend([region(), now()]);
        Statement::from_sql_and_values(self.0, self.sync_sql(since.is_some()), values)
    }

    /// This region's own live rows, shaped like a sync's (without the clock), so one decoder
    /// reads both: read once at start (see `GlobalStore::own_rows`).
    pub(crate) fn own_rows(self, region: &str, now_ms: u64) -> Statement {
        let q = |c: &str| self.quote(c);
        let (mut p1, mut p2) = (String::new(), String::new());
        self.placeholder(&mut p1, 1);
        self.placeholder(&mut p2, 2);
        let sql = format!(
            "SELECT {} FROM {} t WHERE t.{} = {p1} AND t.{} > {p2}",
            self.row_columns(),
            q(TABLE),
            q("region"),
            q("expires_at"),
        );
        Statement::from_sql_and_values(
            self.0,
            sql,
            [
                Value::from(region.as_bytes().to_vec()),
                Value::from(clamp(now_ms)),
            ],
        )
    }

    /// The database's clock in microseconds since the Unix epoch, as one BIGINT. SQLite
    /// runs in this process and reads its clock (to the millisecond).
    pub(crate) fn clock_us(self) -> Statement {
        let sql = match self.0 {
            DbBackend::MySql => "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)",
            DbBackend::Postgres => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
            }
            _ => "SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
        };
        Statement::from_string(self.0, sql)
    }

    /// One bounded `DELETE` of expired rows.
    pub(crate) fn delete_expired(self, now_ms: u64, batch: u64) -> Statement {
        let q = |c: &str| self.quote(c);
        let (table, expires_at) = (q(TABLE), q("expires_at"));
        let sql = match self.0 {
            // MySQL refuses LIMIT inside an IN sub-select, but has DELETE … LIMIT.
            DbBackend::MySql => {
                format!("DELETE FROM {table} WHERE {expires_at} <= ? ORDER BY {expires_at} LIMIT ?")
            }
            // PostgreSQL has no DELETE … LIMIT; SQLite only when compiled with it.
            _ => {
                let (mut p1, mut p2) = (String::new(), String::new());
                self.placeholder(&mut p1, 1);
                self.placeholder(&mut p2, 2);
                let pk = q("pk");
                format!(
                    "DELETE FROM {table} WHERE {pk} IN (SELECT {pk} FROM {table} \
                     WHERE {expires_at} <= {p1} ORDER BY {expires_at} LIMIT {p2})"
                )
            }
        };
        Statement::from_sql_and_values(
            self.0,
            sql,
            [Value::from(clamp(now_ms)), Value::from(clamp(batch.max(1)))],
        )
    }
}
