//! What one global sync reads from a real database at the design's shape of cells: a benchmark,
//! not a test (ACCURACY.md, "Reads").
//!
//! ```sh
//! mysql -uroot -h127.0.0.1 -e 'DROP DATABASE IF EXISTS sync_rows; CREATE DATABASE sync_rows'
//! cargo run --release -p gcounter-sql --example sync_rows -- mysql://root@127.0.0.1:3306/sync_rows 24000
//! ```
//!
//! Migrates the database at the URL (use an empty one: the rows stay), publishes `cells` live
//! cells through the real `SqlStore` for 10 regions (each cell from one home region, 5 % from
//! 2–3 regions, like `gcounter-sim`'s `rfc` scenario), and as many already-expired ones, then
//! syncs as region `r0` five times and prints the rows (and the cells they belong to)
//! returned and the time per sync.

use std::time::{Duration, Instant};

use gcounter_engine::cell_key::CellKey;
use gcounter_engine::global::{GlobalStore, SyncQuery};
use gcounter_engine::pn::PnCount;
use gcounter_sql::SqlStore;

const REGIONS: usize = 10;
const MINUTE: u64 = 60_000;
/// The live window: rows expire at (LIVE + 2) minutes, after `NOW`.
const LIVE: u64 = 1_000;
const NOW: u64 = LIVE * MINUTE;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: sync_rows <database-url> [cells]")?;
    let cells: u64 = args.next().map_or(Ok(24_000), |n| n.parse())?;
    let store = SqlStore::connect(&url).await?;
    store.migrate().await?;

    let mut rng = fastrand::Rng::with_seed(1);
    let mut by_region: Vec<Vec<(CellKey, PnCount)>> = vec![Vec::new(); REGIONS];
    // The live window and one that has expired (cleanup has not run yet).
    for sequence in [LIVE, 10] {
        for k in 0..cells {
            let home = rng.usize(..REGIONS);
            let mut used = vec![home];
            if rng.f64() < 0.05 {
                let n = 2 + rng.usize(..2);
                while used.len() < n {
                    let other = rng.usize(..REGIONS);
                    if !used.contains(&other) {
                        used.push(other);
                    }
                }
            }
            let key = CellKey::new("w", "3:key/", &format!("k{k}"), MINUTE, sequence);
            for region in used {
                if let Some(rows) = by_region.get_mut(region) {
                    rows.push((key.clone(), PnCount::hits(1 + rng.u64(..100))));
                }
            }
        }
    }
    let mut written = 0;
    for (region, rows) in by_region.iter().enumerate() {
        let report = store.publish(&format!("r{region}"), rows, 1).await?;
        if let Some(e) = report.errors().next() {
            return Err(format!("publish: {e}").into());
        }
        written += report.published();
    }
    let own_live = by_region.first().map_or(0, |rows| {
        rows.iter().filter(|(k, _)| k.sequence == LIVE).count()
    });
    println!(
        "{}: {written} rows ({cells} live cells and {cells} expired, 10 regions); r0 wrote {own_live} live rows",
        store.name()
    );
    let mut took = Vec::new();
    let (mut returned, mut read_cells) = (0, 0);
    for _ in 0..5 {
        let started = Instant::now();
        let read = store.sync(SyncQuery::full("r0", NOW)).await?;
        took.push(started.elapsed());
        (returned, read_cells) = (read.rows.len(), read.cells("r0").len());
    }
    took.sort();
    let median = took.get(took.len() / 2).copied().unwrap_or(Duration::ZERO);
    println!(
        "sync as r0: {returned} rows of {read_cells} cells returned, median {median:.1?} over 5 syncs"
    );
    Ok(())
}
