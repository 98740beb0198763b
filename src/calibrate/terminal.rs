//! The calibration as a table for people: one row per slice, then why any
//! infeasible slice is infeasible.

use std::fmt::Write;

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use super::document::{CalibrationDocument, SliceCalibration};

pub fn render_table(document: &CalibrationDocument) -> String {
    let certified = document.confidence.is_some();
    let holdout = document.holdout.is_some();
    let mut header = vec!["slice", "n", "threshold", "quality"];
    if certified {
        header.push("lower bound");
    }
    header.extend([
        "$/1k req",
        "escalated",
        "small q",
        "large q",
        "$/1k large",
        "saved",
    ]);
    if holdout {
        header.extend(["holdout n", "holdout q"]);
    }
    let mut builder = Builder::default();
    builder.push_record(header);
    for slice in &document.slices {
        builder.push_record(row(slice, certified, holdout));
    }
    let mut table = builder.build();
    table
        .with(Style::sharp())
        .modify(Columns::new(1..), Alignment::right());

    let mut out = table.to_string();
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
    out
}

fn row(slice: &SliceCalibration, certified: bool, holdout: bool) -> Vec<String> {
    let quality =
        |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |value| format!("{value:.4}"));
    let per_thousand = |value: Option<f64>| {
        value.map_or_else(|| "-".to_owned(), |value| format!("{:.4}", value * 1000.0))
    };
    let percent = |value: Option<f64>| {
        value.map_or_else(|| "-".to_owned(), |value| format!("{:.1}%", value * 100.0))
    };
    let mut cells = vec![
        slice.slice.clone(),
        slice.n.to_string(),
        slice.threshold.map_or_else(
            || "infeasible".to_owned(),
            |threshold| format!("{threshold}"),
        ),
        quality(slice.quality),
    ];
    if certified {
        cells.push(quality(slice.quality_lower_bound));
    }
    cells.extend([
        per_thousand(slice.mean_cost),
        percent(slice.escalation_rate),
        quality(Some(slice.baselines.always_small.quality)),
        quality(Some(slice.baselines.always_large.quality)),
        per_thousand(Some(slice.baselines.always_large.mean_cost)),
        percent(slice.savings_vs_always_large),
    ]);
    if holdout {
        let result = slice.holdout.as_ref();
        cells.push(result.map_or_else(|| "-".to_owned(), |result| result.n.to_string()));
        cells.push(quality(result.and_then(|result| result.quality)));
    }
    cells
}
