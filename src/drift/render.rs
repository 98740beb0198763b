//! The drift document for people: a terminal table and Markdown for an
//! issue, a pull request or `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write;

use crate::markdown::{code, table, text};

use crate::schema::{DriftDocument, SliceDrift};

fn cells(slice: &SliceDrift) -> Vec<String> {
    let percent = |value: f64| format!("{:.1}%", value * 100.0);
    vec![
        slice.slice.clone(),
        slice.n.to_string(),
        slice.verdict.name().to_owned(),
        match (&slice.thresholds, slice.threshold) {
            (Some(thresholds), _) => thresholds
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            (None, Some(threshold)) => threshold.to_string(),
            (None, None) => "-".to_owned(),
        },
        percent(slice.escalation_rate),
        slice
            .escalation_rate_at_calibration
            .map_or_else(|| "-".to_owned(), percent),
        format!("{:.4}", slice.quality),
        format!("{:.4}", slice.quality_lower_bound),
        slice
            .score_shift
            .map_or_else(|| "-".to_owned(), |shift| format!("{:.3}", shift.psi)),
        slice.score_shift.map_or_else(
            || "-".to_owned(),
            |shift| format!("{:.2e}", shift.ks_p_value),
        ),
    ]
}

const HEADER: [&str; 10] = [
    "slice",
    "n",
    "verdict",
    "threshold",
    "escalated",
    "at calibration",
    "quality",
    "lower bound",
    "PSI",
    "KS p",
];

pub fn terminal(document: &DriftDocument) -> String {
    let table = crate::terminal::table(HEADER, document.slices.iter().map(cells));
    let mut out = format!("{table}\n");
    let _ = writeln!(
        out,
        "{} version {}, target {}: {}",
        document.config.config_id,
        document.config.version,
        document.target,
        document.verdict.name()
    );
    if let Some(line) = monitor_line(document) {
        let _ = writeln!(out, "{line}");
    }
    for slice in &document.slices {
        for reason in &slice.reasons {
            let _ = writeln!(out, "{} {}: {reason}", slice.verdict.name(), slice.slice);
        }
    }
    out
}

/// With `--state`: what the anytime-valid monitor has counted and how close
/// each slice is to an alarm.
fn monitor_line(document: &DriftDocument) -> Option<String> {
    let monitor = document.sequential.as_ref()?;
    let largest = monitor
        .slices
        .iter()
        .map(|slice| {
            slice
                .quality_e_value
                .max(slice.escalation_e_value.unwrap_or(0.0))
        })
        .fold(0.0, f64::max);
    let mut line = format!(
        "anytime-valid monitor ({}): run {}, largest e-value {largest:.3} of the {:.0} that alarms",
        monitor.state,
        monitor.runs,
        1.0 / monitor.level
    );
    if !monitor.left_out.is_empty() {
        let _ = write!(
            line,
            "; not monitored (new since its first run): {}",
            monitor.left_out.join(", ")
        );
    }
    Some(line)
}

pub fn markdown(document: &DriftDocument) -> String {
    let mut out = format!(
        "## routeval drift: {}\n\nRoute config {} version {} on {} ({} rows), target {}.\n\n",
        document.verdict.name(),
        code(&document.config.config_id),
        document.config.version,
        code(&document.results.path),
        document.results.rows,
        document.target
    );
    let rows = document.slices.iter().map(|slice| {
        let mut cells = cells(slice);
        cells[0] = text(&slice.slice);
        cells
    });
    out.push_str(&table(&HEADER, rows, 1..));
    if let Some(line) = monitor_line(document) {
        let _ = writeln!(out, "\n{}", text(&line));
    }
    let flagged: Vec<&SliceDrift> = document
        .slices
        .iter()
        .filter(|slice| !slice.reasons.is_empty())
        .collect();
    if !flagged.is_empty() {
        out.push_str("\n### Why\n\n");
        for slice in flagged {
            for reason in &slice.reasons {
                let _ = writeln!(
                    out,
                    "- **{}** {}: {}",
                    slice.verdict.name(),
                    code(&slice.slice),
                    text(reason)
                );
            }
        }
    }
    out
}
