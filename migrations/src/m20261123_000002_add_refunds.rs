//! `refunds`: the second half of each region's PN-counter component (hits stay in `count`).
//!
//! Added with a default of 0, so the rows written before it keep their meaning (hits, no
//! refunds) and an older binary that never writes the column keeps working beside a newer one
//! during a rolling deploy (its rows simply carry no refunds).

use sea_orm_migration::prelude::*;

use crate::TABLE;

#[derive(DeriveIden)]
enum RatelimitWindowCounts {
    Refunds,
}

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261123_000002_add_refunds"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // A concurrent migrator may have added it: adding it again would fail.
        if manager.has_column(TABLE, "refunds").await? {
            return Ok(());
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new(TABLE))
                    .add_column(
                        ColumnDef::new(RatelimitWindowCounts::Refunds)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Alias::new(TABLE))
                    .drop_column(RatelimitWindowCounts::Refunds)
                    .to_owned(),
            )
            .await
    }
}
