//! The calibration as tables for people: the chosen threshold per slice, the
//! baselines it is measured against, then why any infeasible slice is
//! infeasible.

use std::fmt::Write;

use crate::terminal::table;

use crate::schema::{
    AUDIT_HEADER, CalibrationDocument, HoldoutResult, HoldoutVerdict, Point, SliceCalibration,
    audit_rows,
};

pub fn render_table(document: &CalibrationDocument) -> String {
    let certified = document.confidence.is_some();
    let holdout = document.holdout.is_some();

    let tiers = document.tiers.as_ref();
    let served = tiers.map(|tiers| format!("served {}", tiers.join(" / ")));
    let mut header = vec![
        "slice",
        "n",
        if tiers.is_some() {
            "thresholds"
        } else {
            "threshold"
        },
        "quality",
    ];
    if certified {
        header.push("lower bound");
    }
    header.extend([
        "$/1k req",
        served.as_deref().unwrap_or("escalated"),
        "saved vs large",
    ]);
    if holdout {
        header.extend(["holdout n", "holdout q"]);
    }
    let chosen = table(
        header,
        document
            .slices
            .iter()
            .map(|slice| chosen_row(slice, certified, holdout)),
    );
    let (first, last) = tiers.map_or(("small".to_owned(), "large".to_owned()), |tiers| {
        (tiers[0].clone(), tiers[tiers.len() - 1].clone())
    });
    let (always_first, always_last) = (format!("always {first} q"), format!("always {last} q"));
    let baselines = table(
        vec![
            "slice",
            &always_first,
            "$/1k",
            &always_last,
            "$/1k",
            "oracle q",
            "$/1k",
            "frontier points",
        ],
        document.slices.iter().map(baseline_row),
    );

    let mut out = chosen;
    let feasible = document
        .slices
        .iter()
        .filter(|slice| slice.feasible)
        .count();
    let _ = write!(
        out,
        "\n{} policy, target {}",
        document.policy.name(),
        document.target
    );
    if let Some(confidence) = document.confidence {
        let _ = write!(out, " certified at confidence {confidence}");
    }
    let _ = writeln!(
        out,
        ": {feasible} of {} slices feasible",
        document.slices.len()
    );
    for slice in document.slices.iter().filter(|slice| !slice.feasible) {
        if let Some(reason) = &slice.reason {
            let _ = writeln!(out, "infeasible: {}: {reason}", slice.slice);
        }
    }
    let _ = writeln!(out, "\nbaselines ($ per 1,000 requests):\n{baselines}");
    if let Some(audits) = audit_table(document) {
        let _ = writeln!(
            out,
            "\nthe grader against the humans' verdicts (audited rows; quality corrected by them):\n{audits}"
        );
    }
    out
}

fn audit_table(document: &CalibrationDocument) -> Option<String> {
    let rows = audit_rows(document);
    (!rows.is_empty()).then(|| table(AUDIT_HEADER, rows))
}

fn quality(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{value:.4}"))
}

fn per_thousand(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{:.4}", value * 1000.0))
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{:.1}%", value * 100.0))
}

fn chosen_row(slice: &SliceCalibration, certified: bool, holdout: bool) -> Vec<String> {
    let thresholds = match &slice.tiered {
        Some(tiered) if slice.feasible => tiered
            .thresholds
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        Some(_) => "infeasible".to_owned(),
        None => slice.threshold.map_or_else(
            || "infeasible".to_owned(),
            |threshold| threshold.to_string(),
        ),
    };
    let mut cells = vec![
        slice.slice.clone(),
        slice.n.to_string(),
        thresholds,
        quality(slice.quality),
    ];
    if certified {
        cells.push(quality(slice.quality_lower_bound));
    }
    let served = match &slice.tiered {
        Some(tiered) if slice.feasible => tiered
            .served
            .iter()
            .map(|share| format!("{:.1}%", share * 100.0))
            .collect::<Vec<_>>()
            .join(" / "),
        Some(_) => "-".to_owned(),
        None => percent(slice.escalation_rate),
    };
    cells.extend([
        per_thousand(slice.mean_cost),
        served,
        percent(slice.savings_vs_always_large),
    ]);
    if holdout {
        let result = slice.holdout.as_ref();
        cells.push(result.map_or_else(|| "-".to_owned(), |result| result.n.to_string()));
        cells.push(result.map_or_else(|| "-".to_owned(), holdout_quality));
    }
    cells
}

/// The held-out quality with its interval, and what it says of the target.
fn holdout_quality(result: &HoldoutResult) -> String {
    let Some(value) = result.quality else {
        return "-".to_owned();
    };
    let mut text = quality(Some(value));
    if let Some([low, high]) = result.quality_interval {
        let _ = write!(text, " [{low:.4}, {high:.4}]");
    }
    match result.verdict {
        Some(HoldoutVerdict::BelowWithinNoise) => {
            text.push_str(" below target, by no more than noise explains");
        }
        Some(HoldoutVerdict::BelowTarget) => text.push_str(" below target"),
        _ => {}
    }
    text
}

fn baseline_row(slice: &SliceCalibration) -> Vec<String> {
    let mut cells = vec![slice.slice.clone()];
    let baselines = &slice.baselines;
    for Point {
        quality: q,
        mean_cost,
    } in [
        baselines.always_small,
        baselines.always_large,
        baselines.oracle,
    ] {
        cells.push(quality(Some(q)));
        cells.push(per_thousand(Some(mean_cost)));
    }
    cells.push(slice.frontier_points.to_string());
    cells
}
