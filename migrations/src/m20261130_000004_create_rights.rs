//! `ratelimit_rights`: the rights of `never_above` counters taken across regions (the
//! engine's `regional::rights`), one row per counter: the newest window cell taken from, its
//! takes and the cell before's, and a version each take or give-back moves (a
//! compare-and-swap: one statement per change, on every backend).
//!
//! The counter is its 128-bit hash (16 binary bytes): a row per counter, whatever its key's
//! length, and one fixed-size primary key. Two counters colliding is about as likely as a
//! hardware fault (n² / 2¹²⁹).

use sea_orm_migration::prelude::*;

pub const RIGHTS_TABLE: &str = "ratelimit_rights";
pub const RIGHTS_EXPIRES_AT_INDEX: &str = "ratelimit_rights_expires_at_idx";

#[derive(DeriveIden)]
enum RatelimitRights {
    Table,
    Counter,
    Newest,
    Taken,
    PreviousTaken,
    Version,
    ExpiresAt,
}

use RatelimitRights as T;

/// Named after this file, as the migrations table records it.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let bigint = |column: T| ColumnDef::new(column).big_integer().not_null().to_owned();
        manager
            .create_table(
                Table::create()
                    .table(T::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(T::Counter)
                            .binary_len(16)
                            .not_null()
                            .primary_key(),
                    )
                    .col(bigint(T::Newest))
                    .col(bigint(T::Taken))
                    .col(bigint(T::PreviousTaken))
                    .col(bigint(T::Version))
                    .col(bigint(T::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        // A concurrent migrator may have added it (MySQL has no CREATE INDEX IF NOT EXISTS).
        if !manager
            .has_index(RIGHTS_TABLE, RIGHTS_EXPIRES_AT_INDEX)
            .await?
        {
            manager
                .create_index(
                    Index::create()
                        .name(RIGHTS_EXPIRES_AT_INDEX)
                        .table(T::Table)
                        .col(T::ExpiresAt)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(T::Table).to_owned())
            .await
    }
}
