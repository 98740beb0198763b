//! `replay candidate`'s table: per slice and over all requests, the
//! candidate's quality by each estimator with its interval, its mean cost,
//! its escalation rate, and the paired difference against the config that
//! served the traffic.

use std::fmt::Write;

use crate::schema::{CandidateReplay, Estimate, SliceEstimate};

fn interval(estimate: &Estimate) -> String {
    match (estimate.lower, estimate.upper) {
        (Some(lower), Some(upper)) => {
            format!("{:.3} [{lower:.3}, {upper:.3}]", estimate.estimate)
        }
        _ => format!("{:.3}", estimate.estimate),
    }
}

fn row(slice: &SliceEstimate) -> Vec<String> {
    vec![
        slice.slice.clone(),
        slice.requests.to_string(),
        format!("{}/{}", slice.matched_labelled, slice.labelled),
        interval(&slice.quality.ips),
        interval(&slice.quality.snips),
        interval(&slice.quality.dr),
        format!("{:.6}", slice.mean_cost.dr.estimate),
        format!("{:.3}", slice.escalation_rate.estimate),
        interval(&slice.running_quality),
        interval(&slice.quality_difference),
    ]
}

pub fn render_candidate(document: &CandidateReplay) -> String {
    let mut out = format!(
        "candidate {} on {} requests decided by config version {} ({}), {} labelled (probability {}):\n",
        document.candidate.path,
        document.overall.requests,
        document.logged_by.version,
        document.logged_by.path,
        document.labels.rows,
        document.labels.inclusion_probability,
    );
    let rows = document
        .slices
        .iter()
        .chain(std::iter::once(&document.overall))
        .map(row);
    out.push_str(&crate::terminal::table(
        [
            "slice",
            "requests",
            "matched/labelled",
            "quality IPS",
            "SNIPS",
            "DR",
            "cost DR (USD)",
            "escalation",
            "running IPS",
            "difference",
        ],
        rows,
    ));
    let _ = writeln!(
        out,
        "\nintervals: empirical Bernstein at confidence {}, each side at half the error; cost has no interval (no range known in advance)",
        document.confidence
    );
    out
}
