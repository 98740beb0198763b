//! The report's Markdown summary, sized for a pull-request comment or
//! `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write;

use super::kit::ReportInputs;
use crate::markdown::{code, table, table_aligned, text};
use crate::schema::{CalibrationDocument, GateReport};

pub fn summary(inputs: &ReportInputs<'_>, html_path: &str) -> String {
    let mut out = format!("## {}\n\n", text(inputs.title));
    let _ = writeln!(
        out,
        "{}: {} rows. Full report with charts: {}.\n",
        code(inputs.results_path),
        inputs.rows,
        code(html_path)
    );
    if let Some(change) = inputs.change {
        change_summary(&mut out, change);
    }
    for calibration in inputs.tiered {
        tiered_summary(&mut out, calibration);
    }
    for calibration in inputs.calibrations {
        calibration_summary(&mut out, calibration);
    }
    if let Some(gate) = inputs.gate {
        gate_summary(&mut out, gate);
    }
    if let Some(replay) = inputs.replay {
        super::replay::replay_summary(&mut out, replay);
    }
    if let Some(records) = inputs.records {
        super::records::records_summary(&mut out, records);
    }
    if let Some(drift) = inputs.drift {
        let flagged: Vec<String> = drift
            .slices
            .iter()
            .filter(|slice| slice.verdict != crate::schema::Verdict::Ok)
            .map(|slice| format!("{} ({})", code(&slice.slice), slice.verdict.name()))
            .collect();
        let _ = writeln!(
            out,
            "**Drift:** {}{}\n",
            drift.verdict.name(),
            if flagged.is_empty() {
                String::new()
            } else {
                format!(": {}", flagged.join(", "))
            }
        );
    }
    out
}

/// The deployed config against the proposal, per slice.
fn change_summary(out: &mut String, change: &super::change::Change) {
    let _ = writeln!(
        out,
        "**The change:** the deployed config (version {}) against {}, on the same rows (paired, margin {}):\n",
        change.deployed_version,
        text(&change.proposal),
        change.margin
    );
    for slice in &change.slices {
        let change = slice.text();
        let _ = writeln!(
            out,
            "- {}: threshold {}; quality {} ({}); $/1k {} ({}); escalated {}: **{}**",
            code(&slice.slice),
            change.threshold,
            change.quality,
            change.quality_change,
            change.cost,
            change.cost_change,
            change.escalated,
            change.verdict
        );
    }
    out.push('\n');
}

/// A calibration of more than two tiers, per slice.
fn tiered_summary(out: &mut String, calibration: &CalibrationDocument) {
    let tiers = calibration.tiers.as_deref().unwrap_or_default();
    let _ = writeln!(
        out,
        "**Calibration of {} tiers** ({} {}, target {}{}):\n",
        tiers.len(),
        calibration.policy.name(),
        text(&super::kit::tier_path(calibration)),
        calibration.target,
        calibration
            .confidence
            .map(|c| format!(" at confidence {c}"))
            .unwrap_or_default(),
    );
    let served = format!("served {}", text(&tiers.join(" / ")));
    let rows = super::kit::tiered_rows(calibration)
        .into_iter()
        .map(|row| row.iter().map(|cell| text(cell)).collect());
    out.push_str(&table(
        &["slice", "n", "thresholds", "quality", "$/1k req", &served],
        rows,
        1..,
    ));
    out.push('\n');
}

/// A two-tier calibration, per slice, with its audits.
fn calibration_summary(out: &mut String, calibration: &CalibrationDocument) {
    let feasible = calibration
        .slices
        .iter()
        .filter(|slice| slice.feasible)
        .count();
    let _ = writeln!(
        out,
        "**Calibration** ({} policy, target {}{}): {feasible} of {} slices feasible.\n",
        calibration.policy.name(),
        calibration.target,
        calibration
            .confidence
            .map(|c| format!(" at confidence {c}"))
            .unwrap_or_default(),
        calibration.slices.len()
    );
    let dash = || "-".to_owned();
    let rows = calibration.slices.iter().map(|slice| {
        vec![
            text(&slice.slice),
            slice.n.to_string(),
            slice
                .threshold
                .map_or_else(|| "**infeasible**".to_owned(), |t| t.to_string()),
            slice.quality.map_or_else(dash, |q| format!("{q:.4}")),
            slice
                .mean_cost
                .map_or_else(dash, |c| format!("{:.4}", c * 1000.0)),
            slice
                .escalation_rate
                .map_or_else(dash, |e| format!("{:.1}%", e * 100.0)),
            slice
                .savings_vs_always_large
                .map_or_else(dash, |s| format!("{:.1}%", s * 100.0)),
        ]
    });
    out.push_str(&table(
        &[
            "slice",
            "n",
            "threshold",
            "quality",
            "$/1k req",
            "escalated",
            "saved vs large",
        ],
        rows,
        1..,
    ));
    out.push('\n');
    let audits = crate::schema::audit_rows(calibration);
    if !audits.is_empty() {
        out.push_str("The grader against the humans' verdicts on the audited rows (the quality corrected by them, and the audited rows that would bring its bound within ±W):\n\n");
        let rows = audits.into_iter().map(|mut row| {
            row[0] = text(&row[0]);
            row
        });
        // How the rows were drawn (the third column) is a word.
        out.push_str(&table_aligned(
            &crate::schema::AUDIT_HEADER,
            rows,
            |column| column != 0 && column != 2,
        ));
        out.push('\n');
    }
}

/// What the gate chose and emitted.
fn gate_summary(out: &mut String, gate: &GateReport) {
    match (&gate.chosen, &gate.emitted) {
        (Some(chosen), Some(emitted)) => {
            let _ = writeln!(
                out,
                "**Gate:** chose {} of {} candidates; emitted version {} (sha256 `{}`).\n",
                code(chosen),
                gate.candidates.len(),
                emitted.version,
                emitted.sha256
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "**Gate:** none of {} candidates passed.\n",
                gate.candidates.len()
            );
        }
    }
}
