//! A window cell: consume, refund, merges, replay state, publication and the
//! remembered previous total.

use super::*;

#[test]
fn denied_requests_consume_nothing() {
    let changes = SealedChanges::default();
    let cell = WindowCell::seeded(PnCount::hits(10), PnCount::hits(0));
    let (d, need) = cell.try_consume(0, 0, 1_000, 1, 10, false, &changes);
    assert!(!d.allowed);
    assert_eq!(need, ReplayNeed::None);
    assert_eq!(cell.regional(), 10);
    assert_eq!(cell.take_for_replay().hits, 0);
}

#[test]
fn merges_never_move_a_count_back() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    cell.try_consume(0, 0, 1_000, 3, 10, false, &changes);
    cell.merge_regional(PnCount::hits(1), &changes);
    assert_eq!(cell.regional(), 3);
    cell.merge_regional(PnCount::hits(7), &changes);
    cell.merge_global(PnCount::hits(4), &changes);
    cell.merge_global(PnCount::hits(2), &changes);
    assert_eq!((cell.regional(), cell.global(), cell.total()), (7, 4, 11));
}

/// Accept a hit of cost 1 (limit 10): what the caller must do with the replay queue.
fn accept_one(cell: &WindowCell, changes: &SealedChanges) -> ReplayNeed {
    cell.try_consume(0, 0, 1_000, 1, 10, false, changes).1
}

#[test]
fn a_cell_is_queued_once_per_replay_cycle() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    assert_eq!(accept_one(&cell, &changes), ReplayNeed::Enqueue);
    assert_eq!(
        cell.try_consume(0, 0, 1_000, 2, 10, false, &changes).1,
        ReplayNeed::None
    );
    assert_eq!(cell.take_for_replay().hits, 3);
    assert_eq!(accept_one(&cell, &changes), ReplayNeed::Enqueue);
    assert_eq!(cell.take_for_replay().hits, 4, "cumulative, not a delta");
}

#[test]
fn a_failed_replay_queues_the_cell_once() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    cell.try_consume(0, 0, 1_000, 2, 10, false, &changes);
    assert_eq!(cell.take_for_replay().hits, 2);
    assert!(cell.requeue(), "nobody re-queued it");
    assert_eq!(accept_one(&cell, &changes), ReplayNeed::None);
    assert!(!cell.requeue());
    assert_eq!(cell.take_for_replay().hits, 3);
}

#[test]
fn an_overflowed_cell_is_queued_again_once() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    assert_eq!(accept_one(&cell, &changes), ReplayNeed::Enqueue);
    cell.mark_overflowed();
    assert!(cell.is_overflowed() && cell.deserves_protection());
    // the recovery walk and a later accept race: exactly one of them queues it
    assert!(cell.claim_overflowed());
    assert!(!cell.claim_overflowed());
    assert_eq!(accept_one(&cell, &changes), ReplayNeed::None);
    assert_eq!(cell.take_for_replay().hits, 2);
    assert!(
        !cell.deserves_protection(),
        "replayed and far from its limit"
    );
    cell.try_consume(0, 0, 1_000, 6, 10, false, &changes);
    assert!(cell.deserves_protection(), "8 of 10 is near the limit");
}

#[test]
fn a_reseeded_cell_resumes_its_own_component() {
    let changes = SealedChanges::default();
    let cell = WindowCell::seeded(PnCount::hits(9), PnCount::hits(4));
    cell.try_consume(0, 0, 1_000, 1, 20, false, &changes);
    assert_eq!((cell.regional(), cell.own()), (10, 5));
    cell.merge_own(PnCount::hits(3), &changes);
    assert_eq!(cell.own(), 5, "never backwards");
}

#[test]
fn only_success_makes_a_cell_fresh() {
    let cell = WindowCell::default();
    assert!(cell.is_stale(5));
    cell.mark_fresh_until(100);
    assert!(!cell.is_stale(99));
    cell.mark_fresh_until(50);
    assert!(cell.is_stale(100), "freshness never moves back");
    assert!(cell.begin_refresh());
    assert!(!cell.begin_refresh(), "one read at a time");
    cell.end_refresh();
    assert!(cell.begin_refresh());
}

#[test]
fn only_meaningful_changed_counts_are_published() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    for _ in 0..4 {
        cell.try_consume(0, 0, 1_000, 1, 10, false, &changes);
    }
    assert_eq!(cell.to_publish(0.5), None, "4 is below half of 10");
    cell.try_consume(0, 0, 1_000, 1, 10, false, &changes);
    assert_eq!(cell.to_publish(0.5), Some(PnCount::hits(5)));
    cell.mark_published(PnCount::hits(5));
    assert_eq!(
        cell.to_publish(0.5),
        None,
        "unchanged since the last publication"
    );
    cell.merge_regional(PnCount::hits(7), &changes);
    assert_eq!(cell.to_publish(0.5), Some(PnCount::hits(7)));
    assert_eq!(cell.to_publish(0.0), Some(PnCount::hits(7)));
}

#[test]
fn a_refund_gives_back_only_what_this_process_consumed() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    assert_eq!(
        cell.refund(5, &changes),
        (0, ReplayNeed::None),
        "nothing consumed here"
    );
    assert_eq!(
        cell.try_consume(0, 0, 1_000, 8, 10, false, &changes).1,
        ReplayNeed::Enqueue
    );
    assert_eq!(cell.take_for_replay(), PnCount::new(8, 0));
    assert_eq!(
        cell.refund(3, &changes),
        (3, ReplayNeed::Enqueue),
        "a refund is replayed too"
    );
    assert_eq!(cell.total(), 5);
    assert_eq!(cell.refund(100, &changes).0, 5, "capped at own hits");
    assert_eq!(cell.refund(1, &changes).0, 0);
    assert_eq!(cell.total(), 0, "never below zero");
    assert_eq!(cell.take_for_replay(), PnCount::new(8, 8));
    // the refunded budget is there again, and a later hit counts in full
    assert!(
        cell.try_consume(0, 0, 1_000, 10, 10, false, &changes)
            .0
            .allowed
    );
    assert!(
        !cell
            .try_consume(0, 0, 1_000, 1, 10, false, &changes)
            .0
            .allowed
    );
}

#[test]
fn merges_never_move_either_half_back() {
    let changes = SealedChanges::default();
    let cell = WindowCell::seeded(PnCount::new(10, 4), PnCount::new(3, 9));
    assert_eq!(
        cell.own_count(),
        PnCount::new(3, 3),
        "a seeded component is capped"
    );
    assert_eq!(cell.regional_count(), PnCount::new(10, 4));
    cell.merge_regional(PnCount::new(8, 6), &changes);
    assert_eq!(cell.regional_count(), PnCount::new(10, 6));
    cell.merge_regional(PnCount::new(8, 6), &changes);
    assert_eq!(cell.regional_count(), PnCount::new(10, 6), "idempotent");
    cell.merge_global(PnCount::new(5, 1), &changes);
    cell.merge_global(PnCount::new(2, 3), &changes);
    assert_eq!(cell.global_count(), PnCount::new(5, 3));
    assert_eq!(cell.total(), 4 + 2);
    // refunds beyond hits (another origin's view) never make a count negative
    cell.merge_global(PnCount::new(0, 50), &changes);
    assert_eq!(cell.total(), 4);
}

#[test]
fn a_cell_stays_small_with_both_halves() {
    // The budget's CELL_OVERHEAD_BYTES counts on it (with the Arc's count: 88 B, the
    // same allocation size as the 72 B cell with std's Arc and its two counts; 72 B before
    // the remembered previous total, 56 B before refunds).
    assert_eq!(std::mem::size_of::<WindowCell>(), 80);
}

#[test]
fn refunds_are_published_even_when_hits_did_not_change() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    cell.try_consume(0, 0, 1_000, 6, 10, false, &changes);
    let first = cell.to_publish(0.5);
    assert_eq!(first, Some(PnCount::hits(6)));
    cell.mark_published(PnCount::hits(6));
    cell.refund(2, &changes);
    assert_eq!(cell.to_publish(0.5), Some(PnCount::new(6, 2)));
}

/// The previous window's total is remembered in the current cell, and any change of the
/// previous cell after that (a late replay's total, a foreign count, a refund, a delayed
/// accept) makes the remembered total stale: the next decision reads the cell again.
#[test]
fn a_remembered_previous_total_holds_until_the_previous_cell_changes() {
    let changes = SealedChanges::default();
    let previous = WindowCell::default();
    previous.try_consume(0, 0, 1_000, 4, 10, false, &changes);
    let current = WindowCell::default();
    assert_eq!(current.previous(&changes), None, "nothing remembered yet");
    assert_eq!(current.remember_previous(&previous, &changes), (4, false));
    assert_eq!(current.previous(&changes), Some((4, false)));

    // a merge that changes nothing keeps it
    previous.merge_regional(PnCount::hits(4), &changes);
    previous.merge_global(PnCount::default(), &changes);
    assert_eq!(current.previous(&changes), Some((4, false)));

    let stale_after = |change: &dyn Fn(), expected: (u64, bool)| {
        change();
        assert_eq!(current.previous(&changes), None, "stale after a change");
        assert_eq!(current.remember_previous(&previous, &changes), expected);
        assert_eq!(current.previous(&changes), Some(expected));
    };
    stale_after(
        &|| previous.merge_regional(PnCount::hits(6), &changes),
        (6, false),
    );
    stale_after(
        &|| previous.merge_global(PnCount::hits(3), &changes),
        (9, true),
    );
    stale_after(
        &|| previous.merge_own(PnCount::hits(7), &changes),
        (10, true),
    );
    stale_after(
        &|| {
            previous.refund(2, &changes);
        },
        (8, true),
    );
    stale_after(
        &|| {
            previous.try_consume(0, 0, 1_000, 1, 100, false, &changes);
        },
        (9, true),
    );
    stale_after(&|| previous.on_leaving_table(&changes), (9, true));
}

/// Only sealed cells count: the current cell's own accepts and merges (every decision,
/// every replay) leave remembered totals valid.
#[test]
fn changes_of_unsealed_cells_keep_remembered_totals() {
    let changes = SealedChanges::default();
    let previous = WindowCell::default();
    let current = WindowCell::default();
    current.remember_previous(&previous, &changes);
    assert!(previous.is_sealed() && !current.is_sealed());
    current.try_consume(0, 0, 1_000, 1, 10, false, &changes);
    current.merge_regional(PnCount::hits(5), &changes);
    current.merge_global(PnCount::hits(1), &changes);
    current.on_leaving_table(&changes);
    assert_eq!(current.previous(&changes), Some((0, false)));
}

/// A total too large for the packed word is not remembered: the decision reads the cell.
#[test]
fn a_huge_previous_total_is_read_each_time() {
    let changes = SealedChanges::default();
    let previous = WindowCell::seeded(PnCount::hits(1 << 40), PnCount::default());
    let current = WindowCell::default();
    assert_eq!(
        current.remember_previous(&previous, &changes),
        (1 << 40, false)
    );
    assert_eq!(current.previous(&changes), None);
}

#[test]
fn foreign_counts_take_part_in_the_decision() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    cell.merge_global(PnCount::hits(9), &changes);
    assert!(
        cell.try_consume(0, 0, 1_000, 1, 10, false, &changes)
            .0
            .allowed
    );
    assert!(
        !cell
            .try_consume(0, 0, 1_000, 1, 10, false, &changes)
            .0
            .allowed
    );
    assert_eq!(cell.regional(), 1);
}

/// An exact (never_above) accept decided before its window ended that reaches the cell
/// after the next window read its total: withdrawn, so the total the next window decided
/// on stays true, and the withdrawal travels to the origin as a refund.
#[test]
fn an_accept_after_a_later_window_read_the_cell_is_withdrawn() {
    let changes = SealedChanges::default();
    let cell = WindowCell::default();
    let (d, _) = cell.try_consume(0, 500, 1_000, 1, 10, false, &changes);
    assert!(d.allowed);
    assert_eq!(
        cell.withdraw_if_sealed(1, &changes),
        None,
        "in time: stands"
    );
    let later = WindowCell::default();
    assert_eq!(later.remember_previous(&cell, &changes), (1, false));
    cell.take_for_replay();
    // Decided at 999 ms, in this window; its compare-and-swap lands after the next one read.
    let (d, _) = cell.try_consume(0, 999, 1_000, 2, 10, false, &changes);
    assert!(d.allowed);
    assert_eq!(
        cell.withdraw_if_sealed(2, &changes),
        Some(ReplayNeed::None),
        "withdrawn; the accept already queued the cell"
    );
    assert_eq!(cell.total(), 1, "what the next window read");
    let replayed = cell.take_for_replay();
    assert_eq!((replayed.hits, replayed.refunds), (3, 2));
    assert_eq!(
        later.previous(&changes),
        None,
        "its remembered total is re-read"
    );
}
