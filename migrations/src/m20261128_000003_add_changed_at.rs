//! `changed_at`: when a row last changed, on the database's clock (ms since the Unix epoch),
//! and its index: what an incremental sync reads from (the engine's `global::store`,
//! "Incremental sync").
//!
//! The rows written before it get `i64::MAX`, as does any row an older binary inserts during a
//! rolling deploy: they count as changed on every incremental read until they expire, so none
//! of them is missed. (A row an older binary only updates keeps its stamp; the periodic full
//! sync reads it.)

use sea_orm_migration::prelude::*;

use crate::{TABLE, add_bigint_column, drop_column};

pub const CHANGED_AT_INDEX: &str = "ratelimit_window_counts_changed_at_idx";

#[derive(DeriveIden)]
enum RatelimitWindowCounts {
    ChangedAt,
}

use RatelimitWindowCounts as T;

/// Named after this file, as the migrations table records it.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // A concurrent migrator may have added either: adding one again would fail (MySQL
        // has no ADD COLUMN / CREATE INDEX IF NOT EXISTS).
        if !manager.has_column(TABLE, "changed_at").await? {
            manager
                .alter_table(add_bigint_column(T::ChangedAt, i64::MAX))
                .await?;
        }
        if !manager.has_index(TABLE, CHANGED_AT_INDEX).await? {
            manager
                .create_index(
                    Index::create()
                        .name(CHANGED_AT_INDEX)
                        .table(Alias::new(TABLE))
                        .col(T::ChangedAt)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(CHANGED_AT_INDEX)
                    .table(Alias::new(TABLE))
                    .to_owned(),
            )
            .await?;
        manager.alter_table(drop_column(T::ChangedAt)).await
    }
}
