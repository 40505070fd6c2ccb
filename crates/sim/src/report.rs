//! The simulator's output: one JSON line per scenario, or a markdown table.

use crate::bounded::BoundedReport;
use crate::sim::Report;

pub const MARKDOWN_HEADER: &str = "| scenario | regions / processes | floor | flush / sync | per window min / median / max | worst sliding | onset window / sliding | denied | false denials | upserts/s | rows written/s | syncs/s | rows read/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";

pub fn markdown_row(r: &Report) -> String {
    format!(
        "| {} | {} / {} | {} | {} / {} s{} | {:.2} / {:.2} / {:.2} | {:.2} | {:.2} / {:.2} | {:.1} % | {} | {:.1} | {:.0} | {:.1} | {:.0} |",
        r.scenario,
        r.regions,
        r.processes,
        r.publish_floor,
        r.flush_ms as f64 / 1_000.0,
        r.sync_ms as f64 / 1_000.0,
        if r.contended_speedup > 1 {
            format!(
                " ÷≤{} from {} denied/admitted",
                r.contended_speedup, r.contended_overload
            )
        } else {
            String::new()
        },
        r.per_window.min,
        r.per_window.median,
        r.per_window.max,
        r.worst_sliding,
        r.onset_window,
        r.onset_sliding,
        r.denied_fraction * 100.0,
        r.false_denials,
        r.upserts_per_s,
        r.rows_written_per_s,
        r.syncs_per_s,
        r.rows_read_per_s,
    )
}

pub fn json_line(r: &Report) -> String {
    serde_json::to_string(r).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
}

/// The bounded mode's table: refusals against the ideal single limiter over the whole
/// windows after the first and in the first (the onset), and "never above" from the log.
pub const BOUNDED_HEADER: &str = "| scenario | regions / processes | sync | refused vs ideal | at the onset | highest effective ÷ limit | most in a window ÷ limit | above | denied (ideal) | exchanges/s | rows/s |\n|---|---|---|---|---|---|---|---|---|---|---|";

pub fn bounded_row(r: &BoundedReport) -> String {
    format!(
        "| {} | {} / {} | {} s | {:.2} % | {:.2} % | {:.3} | {:.3} | {} | {:.1} % ({:.1} %) | {:.1} | {:.0} |",
        r.scenario,
        r.regions,
        r.processes,
        r.sync_ms as f64 / 1_000.0,
        r.refused_vs_ideal * 100.0,
        r.onset_refused_vs_ideal * 100.0,
        r.never_above.max_effective,
        r.never_above.max_window,
        r.never_above.excesses,
        r.denied_fraction * 100.0,
        r.ideal_denied_fraction * 100.0,
        r.exchanges_per_s,
        r.rows_per_s,
    )
}

pub fn bounded_json_line(r: &BoundedReport) -> String {
    serde_json::to_string(r).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
}
