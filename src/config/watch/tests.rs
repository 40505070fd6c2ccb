//! The watcher's filter (reads are not changes) and its debounce on a real directory: a
//! burst of saves ends with the last one running, merged into fewer reloads than saves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use notify::EventKind;
use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify_debouncer_full::DebouncedEvent;

use super::{is_change, watch};
use crate::config::{LoadOptions, load_path};
use crate::telemetry::Metrics;

fn batch(kinds: &[EventKind]) -> Vec<DebouncedEvent> {
    kinds
        .iter()
        .map(|kind| DebouncedEvent::new(notify::Event::new(*kind), Instant::now()))
        .collect()
}

#[test]
fn reads_alone_are_not_a_change() {
    let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
    let close_read = EventKind::Access(AccessKind::Close(AccessMode::Read));
    assert!(!is_change(&batch(&[open, close_read])));
    assert!(!is_change(&[]));
}

#[test]
fn a_write_or_a_rename_among_reads_is_a_change() {
    let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    let write = EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any));
    let create = EventKind::Create(CreateKind::File);
    for kind in [rename, write, create] {
        assert!(is_change(&batch(&[open, kind, open])), "{kind:?}");
    }
}

fn limits(requests_per_unit: u32) -> String {
    format!(
        "domain: watch\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: minute, requests_per_unit: {requests_per_unit} }}\n"
    )
}

/// Replaces `path` as editors save: a temporary file renamed over it.
fn save(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the temporary file");
    std::fs::rename(&tmp, path).expect("rename it over the config");
}

/// `rls_config_reloads_total{result}` from the metrics' text (0 before the first).
fn reloads(metrics: &Metrics, result: &str) -> u64 {
    let series = format!("rls_config_reloads_total{{result=\"{result}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |value| value.trim().parse().expect("a counter's value"))
}

/// Twenty saves in a row, far faster than the 250 ms debounce: the config that runs in the
/// end is the last one saved, every reload succeeded (none read a half-written file), and
/// the debounce merged the burst (twenty saves needing more than 5 s would be needed for
/// one reload each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_saves_ends_with_the_last_one_in_fewer_reloads() {
    const SAVES: u32 = 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("limits.yaml");
    save(&path, &limits(1));
    let options = LoadOptions::default();
    let first = load_path(&path, &options).expect("the first config loads");
    let running = Arc::new(ArcSwap::from_pointee(first));
    let metrics = Arc::new(Metrics::new());
    let reload_loop =
        watch(&path, options, Arc::clone(&running), Arc::clone(&metrics)).expect("watch");
    let task = tokio::spawn(reload_loop);

    for n in 2..=SAVES + 1 {
        save(&path, &limits(n));
    }
    let last = format!("requests_per_unit={},", SAVES + 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !running.load().dump().contains(&last) {
        assert!(
            Instant::now() < deadline,
            "the last save is not running after 10 s: {}",
            running.load().dump()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ok = reloads(&metrics, "ok");
    assert_eq!(reloads(&metrics, "error"), 0, "a reload failed");
    assert!(
        (1..u64::from(SAVES)).contains(&ok),
        "{ok} reloads for {SAVES} saves"
    );
    task.abort();
}
