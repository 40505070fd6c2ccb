//! Decoding the rows of a sync: a row this code could not have written (not UTF-8, a negative
//! number) is skipped.

use std::collections::HashMap;
use std::sync::Arc;

use sea_orm::{DbErr, QueryResult};

use gcounter_engine::cell_key::{CellKey, Scope};
use gcounter_engine::global::SyncedRow;
use gcounter_engine::pn::PnCount;

/// Shares one `Arc<str>` per distinct workspace, namespace and region, and one [`Scope`] per
/// distinct workspace and namespace, within a sync: many cells have the same ones.
#[derive(Default)]
pub(crate) struct Interner {
    strings: HashMap<Vec<u8>, Arc<str>>,
    scopes: HashMap<(Arc<str>, Arc<str>), Arc<Scope>>,
}

impl Interner {
    pub(crate) fn get(&mut self, bytes: Vec<u8>) -> Option<Arc<str>> {
        if let Some(s) = self.strings.get(&bytes) {
            return Some(Arc::clone(s));
        }
        let s: Arc<str> = std::str::from_utf8(&bytes).ok()?.into();
        self.strings.insert(bytes, Arc::clone(&s));
        Some(s)
    }

    fn scope(&mut self, workspace: Arc<str>, namespace: Arc<str>) -> Arc<Scope> {
        let scope = self
            .scopes
            .entry((workspace, namespace))
            .or_insert_with_key(|(workspace, namespace)| {
                Scope::new(Arc::clone(workspace), Arc::clone(namespace))
            });
        Arc::clone(scope)
    }
}

/// One row of a sync; `Ok(None)` when it is not a row this code could have written.
pub(crate) fn decode_synced(
    row: &QueryResult,
    interned: &mut Interner,
) -> Result<Option<SyncedRow>, DbErr> {
    let workspace: Vec<u8> = row.try_get_by_index(0)?;
    let namespace: Vec<u8> = row.try_get_by_index(1)?;
    let identifier: Vec<u8> = row.try_get_by_index(2)?;
    let duration_ms: i64 = row.try_get_by_index(3)?;
    let sequence: i64 = row.try_get_by_index(4)?;
    let region: Vec<u8> = row.try_get_by_index(5)?;
    let count: i64 = row.try_get_by_index(6)?;
    let refunds: i64 = row.try_get_by_index(7)?;
    let (
        Some(workspace),
        Some(namespace),
        Some(region),
        Ok(identifier),
        Ok(duration_ms),
        Ok(sequence),
        Ok(count),
        Ok(refunds),
    ) = (
        interned.get(workspace),
        interned.get(namespace),
        interned.get(region),
        String::from_utf8(identifier),
        u64::try_from(duration_ms),
        u64::try_from(sequence),
        u64::try_from(count),
        u64::try_from(refunds),
    )
    else {
        return Ok(None);
    };
    Ok(Some(SyncedRow {
        key: CellKey {
            scope: interned.scope(workspace, namespace),
            identifier: identifier.into(),
            duration_ms,
            sequence,
        },
        region,
        count: PnCount::new(count, refunds).capped(),
    }))
}
