//! `replay candidate`'s table: per slice and over all requests, the
//! candidate's quality by each estimator with its interval, its mean cost,
//! its escalation rate, and the paired difference against the config that
//! served the traffic.

use std::fmt::Write;

use crate::schema::CandidateReplay;

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
    let (header, rows) = document.table();
    out.push_str(&crate::terminal::table(header, rows));
    let _ = writeln!(
        out,
        "\nintervals: {} at confidence {}, each side at half the error; cost has no interval (no range known in advance)",
        document.bound_described(),
        document.confidence
    );
    if let Some(comparison) = &document.comparison {
        let _ = writeln!(out, "against the running config: {}", comparison.message);
    }
    out
}
