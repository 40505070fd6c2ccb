//! `refunds`: the second half of each region's PN-counter component (hits stay in `count`).
//!
//! Added with a default of 0, so the rows written before it keep their meaning (hits, no
//! refunds) and an older binary that never writes the column keeps working beside a newer one
//! during a rolling deploy (its rows simply carry no refunds).

use sea_orm_migration::prelude::*;

use crate::{TABLE, add_bigint_column, drop_column};

#[derive(DeriveIden)]
enum RatelimitWindowCounts {
    Refunds,
}

/// Named after this file, as the migrations table records it.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // A concurrent migrator may have added it: adding it again would fail.
        if manager.has_column(TABLE, "refunds").await? {
            return Ok(());
        }
        manager
            .alter_table(add_bigint_column(RatelimitWindowCounts::Refunds, 0))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(drop_column(RatelimitWindowCounts::Refunds))
            .await
    }
}
