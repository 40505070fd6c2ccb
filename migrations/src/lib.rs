//! The schema of gcounter-rls's global counters: `ratelimit_window_counts`, holding one row
//! per (cell, region), the region's PN-counter component of that cell (`count`, the hits, and
//! `refunds`, each grow-only), and when it last changed (`changed_at`, on the database's
//! clock); and `ratelimit_rights`, the rights of `never_above` counters taken across regions.
//!
//! Kept in its own crate because the `*` preludes of sea-orm and sea-orm-migration collide.

use sea_orm_migration::prelude::*;

mod m20261121_000001_create_window_counts;
mod m20261123_000002_add_refunds;
mod m20261128_000003_add_changed_at;
mod m20261130_000004_create_rights;

pub use m20261121_000001_create_window_counts::{
    EXPIRES_AT_INDEX, IDENTIFIER_MAX_BYTES, LOOKUP_INDEX, NAMESPACE_MAX_BYTES, REGION_MAX_BYTES,
    TABLE, UNIQUE_INDEX, WORKSPACE_ID_MAX_BYTES,
};
pub use m20261128_000003_add_changed_at::CHANGED_AT_INDEX;
pub use m20261130_000004_create_rights::{RIGHTS_EXPIRES_AT_INDEX, RIGHTS_TABLE};
pub use sea_orm_migration::MigratorTrait;

/// `ALTER TABLE` adding a `BIGINT NOT NULL` column to the table: the default gives the rows
/// written before it (and those an older binary writes beside it) their meaning.
fn add_bigint_column(column: impl IntoIden, default: i64) -> TableAlterStatement {
    Table::alter()
        .table(Alias::new(TABLE))
        .add_column(
            ColumnDef::new(column)
                .big_integer()
                .not_null()
                .default(default),
        )
        .to_owned()
}

/// `ALTER TABLE` dropping a column of the table: undoes [`add_bigint_column`].
fn drop_column(column: impl IntoIden) -> TableAlterStatement {
    Table::alter()
        .table(Alias::new(TABLE))
        .drop_column(column)
        .to_owned()
}

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261121_000001_create_window_counts::Migration),
            Box::new(m20261123_000002_add_refunds::Migration),
            Box::new(m20261128_000003_add_changed_at::Migration),
            Box::new(m20261130_000004_create_rights::Migration),
        ]
    }
}
