//! The rights of `never_above` counters in `ratelimit_rights` (schema: the `migration`
//! crate): one row per counter, changed by compare-and-swap on its `version`. A take reads the
//! row, applies `RightsRow::take` (the engine's rule, the same for every store) and writes
//! the result only if nobody changed the row since; on a lost race it reads again. Plain
//! statements, one at a time: no transaction to hold, the same on MySQL/MariaDB, PostgreSQL
//! and SQLite.

use migration::RIGHTS_TABLE;
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use gcounter_engine::global::{StoreError, clamp};
use gcounter_engine::regional::{RightsAsk, RightsReturn, RightsRow, counter_id};

use crate::dialect::Dialect;
use crate::{SqlStore, db_error};

/// Reads and writes of one take or give-back before it gives up: a counter this contended
/// gets no rights this time (refused, never over).
const ATTEMPTS: usize = 8;

impl Dialect {
    /// The first `N` placeholders in this dialect.
    fn placeholders<const N: usize>(self) -> [String; N] {
        std::array::from_fn(|i| {
            let mut p = String::new();
            self.placeholder(&mut p, i + 1);
            p
        })
    }

    fn select_rights(self, id: &[u8; 16]) -> Statement {
        let [counter] = self.placeholders();
        let sql = format!(
            "SELECT newest, taken, previous_taken, version FROM {RIGHTS_TABLE} \
             WHERE counter = {counter}"
        );
        Statement::from_sql_and_values(self.0, sql, [Value::from(id.to_vec())])
    }

    fn insert_rights(self, id: &[u8; 16], row: &RightsRow, expires_at: u64) -> Statement {
        let [counter, newest, taken, previous, expires] = self.placeholders();
        let columns = "(counter, newest, taken, previous_taken, version, expires_at)";
        let values = format!("({counter}, {newest}, {taken}, {previous}, 0, {expires})");
        let sql = match self.0 {
            DbBackend::MySql => {
                format!("INSERT IGNORE INTO {RIGHTS_TABLE} {columns} VALUES {values}")
            }
            DbBackend::Postgres => format!(
                "INSERT INTO {RIGHTS_TABLE} {columns} VALUES {values} ON CONFLICT (counter) DO NOTHING"
            ),
            _ => format!("INSERT OR IGNORE INTO {RIGHTS_TABLE} {columns} VALUES {values}"),
        };
        let values = [
            Value::from(id.to_vec()),
            Value::from(clamp(row.newest)),
            Value::from(clamp(row.taken)),
            Value::from(clamp(row.previous_taken)),
            Value::from(clamp(expires_at)),
        ];
        Statement::from_sql_and_values(self.0, sql, values)
    }

    fn update_rights(
        self,
        id: &[u8; 16],
        row: &RightsRow,
        version: i64,
        expires_at: u64,
    ) -> Statement {
        let [newest, taken, previous, expires, counter, current] = self.placeholders();
        let sql = format!(
            "UPDATE {RIGHTS_TABLE} SET newest = {newest}, taken = {taken}, \
             previous_taken = {previous}, expires_at = {expires}, version = version + 1 \
             WHERE counter = {counter} AND version = {current}"
        );
        let values = [
            Value::from(clamp(row.newest)),
            Value::from(clamp(row.taken)),
            Value::from(clamp(row.previous_taken)),
            Value::from(clamp(expires_at)),
            Value::from(id.to_vec()),
            Value::from(version),
        ];
        Statement::from_sql_and_values(self.0, sql, values)
    }

    /// One bounded `DELETE` of rows no take weighs any more.
    pub(crate) fn delete_expired_rights(self, now_ms: u64, batch: u64) -> Statement {
        let [now, batch_size] = self.placeholders();
        let sql = match self.0 {
            DbBackend::MySql => format!(
                "DELETE FROM {RIGHTS_TABLE} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?"
            ),
            _ => format!(
                "DELETE FROM {RIGHTS_TABLE} WHERE counter IN (SELECT counter FROM {RIGHTS_TABLE} \
                 WHERE expires_at <= {now} ORDER BY expires_at LIMIT {batch_size})"
            ),
        };
        Statement::from_sql_and_values(
            self.0,
            sql,
            [Value::from(clamp(now_ms)), Value::from(clamp(batch.max(1)))],
        )
    }
}

/// A stored row and its version.
type Versioned = (RightsRow, i64);

fn non_negative(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl SqlStore {
    async fn rights_row(&self, id: &[u8; 16]) -> Result<Option<Versioned>, StoreError> {
        let stmt = self.dialect().select_rights(id);
        let Some(row) = self.query_one(stmt).await? else {
            return Ok(None);
        };
        let column = |i: usize| row.try_get_by_index::<i64>(i).map_err(db_error);
        let stored = RightsRow {
            newest: non_negative(column(0)?),
            taken: non_negative(column(1)?),
            previous_taken: non_negative(column(2)?),
        };
        Ok(Some((stored, column(3)?)))
    }

    /// Writes `next` over `current` if nobody changed the row since it was read.
    async fn swap_rights(
        &self,
        id: &[u8; 16],
        current: Option<Versioned>,
        next: &RightsRow,
        duration_ms: u64,
    ) -> Result<bool, StoreError> {
        let expires_at = next.expires_at_ms(duration_ms);
        let stmt = match current {
            None => self.dialect().insert_rights(id, next, expires_at),
            Some((_, version)) => self.dialect().update_rights(id, next, version, expires_at),
        };
        let result = self.run(|| self.db.execute_raw(stmt.clone())).await?;
        Ok(result.rows_affected() == 1)
    }

    pub(crate) async fn take_rights_now(&self, ask: &RightsAsk) -> Result<u64, StoreError> {
        let id = counter_id(&ask.cell);
        for _ in 0..ATTEMPTS {
            let current = self.rights_row(&id).await?;
            let (granted, next) = RightsRow::take(current.map(|(row, _)| row), ask);
            let Some(next) = next else {
                return Ok(granted);
            };
            if self
                .swap_rights(&id, current, &next, ask.cell.duration_ms)
                .await?
            {
                return Ok(granted);
            }
        }
        Ok(0)
    }

    pub(crate) async fn give_back_rights_now(
        &self,
        returns: &[RightsReturn],
    ) -> Result<(), StoreError> {
        for returned in returns {
            let id = counter_id(&returned.cell);
            for _ in 0..ATTEMPTS {
                let Some(current) = self.rights_row(&id).await? else {
                    break;
                };
                let Some(next) = current.0.give_back(returned.cell.sequence, returned.count) else {
                    break;
                };
                if self
                    .swap_rights(&id, Some(current), &next, returned.cell.duration_ms)
                    .await?
                {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Deletes the rights rows no take weighs any more, a batch per statement.
    pub(crate) async fn cleanup_rights(&self, now_ms: u64, batch: u64) -> Result<u64, StoreError> {
        let mut deleted = 0;
        loop {
            let stmt = self.dialect().delete_expired_rights(now_ms, batch);
            let n = self
                .run(|| self.db.execute_raw(stmt.clone()))
                .await?
                .rows_affected();
            deleted += n;
            if n < batch.max(1) {
                return Ok(deleted);
            }
            tokio::task::yield_now().await;
        }
    }
}
