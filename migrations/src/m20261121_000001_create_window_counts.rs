//! `ratelimit_window_counts`: each region's component of each window cell.
//!
//! The three strings and the region are binary (`VARBINARY` on MySQL/MariaDB, `bytea` on
//! PostgreSQL, `BLOB` on SQLite): keys compare byte for byte everywhere. A utf8mb4 `VARCHAR`
//! would take the server's collation, and the usual ones (`utf8mb4_general_ci`, any `PAD SPACE`
//! one) make `A` = `a` and `a` = `a ` inside the unique key, merging counters that the design
//! requires to stay apart.
//!
//! Index budget (limits in bytes; the store skips longer strings instead of failing a batch):
//! - MySQL/MariaDB InnoDB, 3072 bytes per key: 255 + 1024 + 1024 + 8 + 8 + 48 = 2367 bytes
//!   (2375 with the 2-byte length of each variable column) for the unique key.
//! - PostgreSQL B-tree, 2704 bytes per index entry: the same 2367 bytes plus per-value headers
//!   stay below it, so a row with every string at its limit still indexes.

use sea_orm_migration::prelude::*;

pub const TABLE: &str = "ratelimit_window_counts";
pub const UNIQUE_INDEX: &str = "ratelimit_window_counts_unique_window_region";
pub const EXPIRES_AT_INDEX: &str = "ratelimit_window_counts_expires_at_idx";
pub const LOOKUP_INDEX: &str = "ratelimit_window_counts_lookup_idx";

/// Column limits in bytes of UTF-8.
pub const WORKSPACE_ID_MAX_BYTES: u32 = 255;
pub const NAMESPACE_MAX_BYTES: u32 = 1024;
pub const IDENTIFIER_MAX_BYTES: u32 = 1024;
pub const REGION_MAX_BYTES: u32 = 48;

#[derive(DeriveIden)]
enum RatelimitWindowCounts {
    Table,
    Pk,
    WorkspaceId,
    Namespace,
    Identifier,
    DurationMs,
    Sequence,
    Region,
    Count,
    ExpiresAt,
    UpdatedAt,
}

use RatelimitWindowCounts as T;

/// Named after this file, as the migrations table records it.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// An index named `name` on a cell's key, (workspace, namespace, identifier, duration,
/// sequence), in that order: the unique key (with the region after them) and the lookup share it.
fn cell_key_index(name: &str) -> IndexCreateStatement {
    Index::create()
        .name(name)
        .col(T::WorkspaceId)
        .col(T::Namespace)
        .col(T::Identifier)
        .col(T::DurationMs)
        .col(T::Sequence)
        .to_owned()
}

fn unique_index() -> IndexCreateStatement {
    cell_key_index(UNIQUE_INDEX)
        .unique()
        .col(T::Region)
        .to_owned()
}

/// A `NOT NULL` binary column of at most `max_bytes` (see the module's doc for why binary).
fn binary(column: T, max_bytes: u32) -> ColumnDef {
    ColumnDef::new(column)
        .var_binary(max_bytes)
        .not_null()
        .to_owned()
}

/// A `NOT NULL` `BIGINT` column.
fn bigint(column: T) -> ColumnDef {
    ColumnDef::new(column).big_integer().not_null().to_owned()
}

fn expires_at_index() -> IndexCreateStatement {
    Index::create()
        .name(EXPIRES_AT_INDEX)
        .table(T::Table)
        .col(T::ExpiresAt)
        .to_owned()
}

fn lookup_index() -> IndexCreateStatement {
    cell_key_index(LOOKUP_INDEX).table(T::Table).to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mysql = manager.get_database_backend() == sea_orm::DbBackend::MySql;
        let mut table = Table::create();
        table
            .table(T::Table)
            .if_not_exists()
            .col(
                ColumnDef::new(T::Pk)
                    .big_integer()
                    .not_null()
                    .auto_increment()
                    .primary_key(),
            )
            .col(binary(T::WorkspaceId, WORKSPACE_ID_MAX_BYTES))
            .col(binary(T::Namespace, NAMESPACE_MAX_BYTES))
            .col(binary(T::Identifier, IDENTIFIER_MAX_BYTES))
            .col(bigint(T::DurationMs))
            .col(bigint(T::Sequence))
            .col(binary(T::Region, REGION_MAX_BYTES))
            .col(bigint(T::Count))
            .col(bigint(T::ExpiresAt))
            .col(bigint(T::UpdatedAt))
            .index(&mut unique_index());
        if mysql {
            // MySQL has no CREATE INDEX IF NOT EXISTS: declaring every index in the
            // CREATE TABLE IF NOT EXISTS keeps a rerun (or a concurrent run) harmless.
            table
                .index(&mut expires_at_index())
                .index(&mut lookup_index());
        }
        manager.create_table(table).await?;
        if !mysql {
            manager
                .create_index(expires_at_index().if_not_exists().to_owned())
                .await?;
            manager
                .create_index(lookup_index().if_not_exists().to_owned())
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(T::Table).if_exists().to_owned())
            .await
    }
}
