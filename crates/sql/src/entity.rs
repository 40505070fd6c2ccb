//! The sea-orm entity of `ratelimit_window_counts` (schema: the `migration` crate).
//!
//! The hot statements (the `GREATEST`/`MAX` upsert, the grouped sync, the bounded delete) are
//! hand-written SQL in `sql.rs`: the query builder has no portable form for them. The entity
//! serves plain reads (tests, tooling). The strings are binary columns, hence `Vec<u8>`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "ratelimit_window_counts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub pk: i64,
    pub workspace_id: Vec<u8>,
    pub namespace: Vec<u8>,
    pub identifier: Vec<u8>,
    pub duration_ms: i64,
    pub sequence: i64,
    pub region: Vec<u8>,
    /// The hits half of the region's component.
    pub count: i64,
    pub expires_at: i64,
    pub updated_at: i64,
    /// The refunds half (migration `m20261123_000002_add_refunds`), at most `count`.
    pub refunds: i64,
    /// When the row last changed, on the database's clock in ms (migration
    /// `m20261128_000003_add_changed_at`); `i64::MAX` for rows written before it.
    pub changed_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
