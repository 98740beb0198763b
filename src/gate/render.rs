//! The gate report for people: candidates side by side on the terminal, and
//! Markdown for a pull request or `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write;

use crate::markdown::{code, table, text};

use crate::schema::gate_report::{escalated_cell, optional_cell};
use crate::schema::{CandidateReport, GateReport, ScoresFrom, SliceRegression, comparison_rows};

/// The cells of one slice's paired comparison with the deployed config:
/// slice, rows, right only before, right only now, difference [interval],
/// p-value, cost difference per 1k requests [interval], verdict.
fn regression_cells(regression: &SliceRegression) -> [String; 8] {
    let [low, high] = regression.difference_interval;
    let verdict = regression
        .verdict
        .reading(regression.better, regression.difference);
    let [cost_low, cost_high] = regression.cost_difference_interval;
    [
        regression.slice.clone(),
        regression.n.to_string(),
        regression.baseline_only.to_string(),
        regression.candidate_only.to_string(),
        format!("{:+.4} [{low:+.4}, {high:+.4}]", regression.difference),
        if regression.p_value >= 0.001 {
            format!("{:.3}", regression.p_value)
        } else {
            format!("{:.1e}", regression.p_value)
        },
        format!(
            "{:+.4} [{:+.4}, {:+.4}]",
            regression.cost_difference * 1000.0,
            cost_low * 1000.0,
            cost_high * 1000.0
        ),
        verdict.to_owned(),
    ]
}

const REGRESSION_HEADER: [&str; 8] = [
    "slice",
    "rows",
    "right only before",
    "right only now",
    "quality change",
    "p",
    "$/1k change",
    "verdict",
];

/// With a baseline, the change leads: for the chosen candidate (or each
/// candidate when none was chosen), one line per slice with quality and
/// cost before and after, the paired intervals, and the verdict.
fn change_first(out: &mut String, report: &GateReport) {
    let Some(baseline) = &report.baseline else {
        return;
    };
    let chosen: Vec<&CandidateReport> = report
        .candidates
        .iter()
        .filter(|candidate| {
            report.chosen.is_none() || report.chosen.as_deref() == Some(candidate.file.as_str())
        })
        .filter(|candidate| !candidate.regressions.is_empty())
        .collect();
    for candidate in chosen {
        let _ = writeln!(
            out,
            "**The change:** {} against the deployed version {} (paired on the same rows, margin {}):\n",
            code(&file_name(&candidate.file)),
            baseline.version,
            report.max_regression
        );
        for regression in &candidate.regressions {
            let Some(after) = candidate
                .slices
                .iter()
                .find(|metrics| metrics.slice == regression.slice)
            else {
                continue;
            };
            let before_quality = after.quality - regression.difference;
            let before_cost = after.mean_cost - regression.cost_difference;
            let cells = regression_cells(regression);
            let _ = writeln!(
                out,
                "- {}: quality {before_quality:.4} → {:.4} ({}), $/1k {:.4} → {:.4} ({}): **{}**",
                code(&regression.slice),
                after.quality,
                cells[4],
                before_cost * 1000.0,
                after.mean_cost * 1000.0,
                cells[6],
                cells[7]
            );
        }
        out.push('\n');
    }
}

fn file_name(path: &str) -> String {
    std::path::Path::new(path).file_name().map_or_else(
        || path.to_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}

pub fn terminal(report: &GateReport) -> String {
    let mut header = vec![String::new()];
    header.extend(
        report
            .candidates
            .iter()
            .map(|candidate| file_name(&candidate.file)),
    );
    let rows = comparison_rows(report).into_iter().map(|(label, cells)| {
        let mut row = vec![label];
        row.extend(cells);
        row
    });
    let mut out = crate::terminal::table(header, rows);
    out.push('\n');
    for candidate in report
        .candidates
        .iter()
        .filter(|candidate| !candidate.regressions.is_empty())
    {
        let table = crate::terminal::table_aligned(
            REGRESSION_HEADER,
            candidate
                .regressions
                .iter()
                .map(|regression| regression_cells(regression).to_vec()),
            1..7,
        );
        let _ = writeln!(
            out,
            "{} against the deployed config (paired, margin {}):\n{table}",
            file_name(&candidate.file),
            report.max_regression
        );
    }
    for candidate in &report.candidates {
        if let Some(price) = exploration_text(candidate) {
            let _ = writeln!(
                out,
                "exploration of {}: {price}",
                file_name(&candidate.file)
            );
        }
        if let Some(production) = production_text(candidate) {
            let _ = writeln!(
                out,
                "production of {}: {production}",
                file_name(&candidate.file)
            );
        }
    }
    for candidate in &report.candidates {
        for failure in &candidate.failures {
            let slice = failure
                .slice
                .as_deref()
                .map(|slice| format!(" [{slice}]"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "rejected {}{slice}: {}",
                file_name(&candidate.file),
                failure.message
            );
        }
        for warning in &candidate.warnings {
            let _ = writeln!(out, "warning {}: {warning}", file_name(&candidate.file));
        }
    }
    match (&report.chosen, &report.emitted) {
        (Some(_), Some(emitted)) if let Some(line) = rollback_line(report, emitted) => {
            out.push_str(&line);
            out.push('\n');
        }
        (Some(chosen), Some(emitted)) => {
            let _ = writeln!(
                out,
                "chosen: {}; emitted {} (sha256 {})",
                file_name(chosen),
                emitted.config,
                emitted.sha256
            );
        }
        (Some(chosen), None) => {
            let _ = writeln!(
                out,
                "chosen: {}; not signed (no --key: evaluated only)",
                file_name(chosen)
            );
        }
        (None, _) => out.push_str("no candidate passed; nothing emitted\n"),
    }
    for candidate in &report.candidates {
        if let Some(line) = cost_words(report, candidate) {
            let _ = writeln!(out, "cost of {}: {line}", file_name(&candidate.file));
        }
    }
    out
}

/// What a rollback did, in one line: to which version, as which, replacing
/// which.
fn rollback_line(report: &GateReport, emitted: &crate::schema::Emitted) -> Option<String> {
    let rollback = report.rollback.as_ref()?;
    let replaced = report
        .baseline
        .as_ref()
        .map(|baseline| format!(", replacing the deployed version {}", baseline.version))
        .unwrap_or_default();
    Some(format!(
        "rollback: version {} ({}, sha256 {}) signed again as version {}: {} (sha256 {}){replaced}; nothing was evaluated again",
        rollback.to.version,
        rollback.to.path,
        rollback.to.sha256,
        emitted.version,
        emitted.config,
        emitted.sha256
    ))
}

/// The report's first lines: a rollback, then the target and the results.
fn markdown_head(report: &GateReport) -> String {
    let mut out = format!("{}\n", crate::schema::GATE_MARKDOWN_HEADER);
    if let Some(emitted) = &report.emitted
        && let Some(line) = rollback_line(report, emitted)
    {
        let _ = writeln!(out, "**This is a rollback.** {}.\n", text(&line));
    }
    let _ = write!(out, "Target quality **{}**", report.target);
    if let Some(confidence) = report.confidence {
        let _ = write!(out, " at confidence {confidence}");
    }
    let _ = writeln!(
        out,
        " on {} ({} rows).\n",
        code(&report.results.path),
        report.results.rows
    );
    out
}

/// What each predictive candidate's certificate is about: whose scores, on
/// which prompts.
fn scores_lines(out: &mut String, report: &GateReport) {
    for candidate in &report.candidates {
        let Some(scores) = &candidate.scores else {
            continue;
        };
        let file = code(&file_name(&candidate.file));
        match scores.scorer {
            ScoresFrom::DeployedRouter => {
                let _ = writeln!(
                    out,
                    "**Scores of {file}:** {}, the pinned router's own (sha256 `{}`), checked on every row: none of the {} rows' prompts is among the {} it was fitted on, so its measurements are about the scorer serve runs.\n",
                    code(&scores.column),
                    scores.router_sha256.as_deref().unwrap_or("?"),
                    report.results.rows,
                    scores.router_trained_on.unwrap_or(0),
                );
            }
            ScoresFrom::External => {
                let _ = writeln!(
                    out,
                    "**Scores of {file}:** {}, an external router's as the results give them. The gate cannot see what that router was trained on; its measurements assume it never saw these rows.\n",
                    code(&scores.column),
                );
            }
        }
    }
}

/// A candidate's production evidence in one sentence: its quality there and
/// its difference from the running config, over all requests.
fn production_text(candidate: &crate::schema::CandidateReport) -> Option<String> {
    let production = candidate.production.as_ref()?;
    let interval =
        |estimate: &crate::schema::Estimate, sign: bool| match (estimate.lower, estimate.upper) {
            (Some(lower), Some(upper)) if sign => {
                format!("{:+.4} [{lower:+.4}, {upper:+.4}]", estimate.estimate)
            }
            (Some(lower), Some(upper)) => {
                format!("{:.4} [{lower:.4}, {upper:.4}]", estimate.estimate)
            }
            _ if sign => format!("{:+.4}", estimate.estimate),
            _ => format!("{:.4}", estimate.estimate),
        };
    let holds = if production.bound == crate::schema::BETTING_SEQUENCE {
        "the intervals hold at every look"
    } else {
        "the intervals hold for one look"
    };
    Some(format!(
        "quality {} (doubly robust) on {} requests of the running config, {} labelled; against the running config {} (paired); {holds}",
        interval(&production.overall.quality, false),
        production.requests,
        production.labelled,
        interval(&production.overall.quality_difference, true),
    ))
}

/// What a candidate's exploration costs, in one sentence: the share, then
/// the mean cost and quality before and while exploring.
fn exploration_text(candidate: &crate::schema::CandidateReport) -> Option<String> {
    let overall = candidate.exploration.first()?;
    let own: Vec<String> = candidate.exploration[1..]
        .iter()
        .filter(|slice| slice.share != overall.share)
        .map(|slice| format!("{} {:.2}%", slice.slice, slice.share * 100.0))
        .collect();
    let own = if own.is_empty() {
        String::new()
    } else {
        format!(" ({})", own.join(", "))
    };
    Some(format!(
        "{:.2}% of requests{own} answered at a tier drawn uniformly; mean cost {:.6} to {:.6} USD per request ({:+.2}%), quality {:.4} to {:.4}, at these rows",
        overall.share * 100.0,
        overall.mean_cost,
        overall.mean_cost_exploring,
        overall.added_cost_share * 100.0,
        overall.quality,
        overall.quality_exploring,
    ))
}

fn exploration_lines(out: &mut String, report: &GateReport) {
    for candidate in &report.candidates {
        if let Some(price) = exploration_text(candidate) {
            let _ = writeln!(
                out,
                "**Exploration of {}:** {}.\n",
                code(&file_name(&candidate.file)),
                text(&price)
            );
        }
        if let Some(production) = production_text(candidate) {
            let _ = writeln!(
                out,
                "**On production, {}:** {}.\n",
                code(&file_name(&candidate.file)),
                text(&production)
            );
        }
    }
}

/// The decision, first: which candidate passed and what it costs against
/// the deployed config, whether it was signed; or that none passed, with
/// each candidate's first reason and its cost change.
fn decision(out: &mut String, report: &GateReport) {
    let chosen = report
        .candidates
        .iter()
        .find(|candidate| report.chosen.as_deref() == Some(candidate.file.as_str()));
    match chosen {
        Some(candidate) => {
            let _ = write!(
                out,
                "**Decision: {} passes every rule.**",
                code(&file_name(&candidate.file))
            );
            if let Some(line) = cost_words(report, candidate) {
                let _ = write!(out, " {line}.");
            }
            match &report.emitted {
                Some(emitted) => {
                    let _ = write!(
                        out,
                        " Signed as version {}: {} (sha256 `{}`).",
                        emitted.version,
                        code(&emitted.config),
                        emitted.sha256
                    );
                }
                None => out.push_str(
                    " Not signed: this gate ran without `--key`, to evaluate only; a trusted job signs what is merged.",
                ),
            }
            out.push_str("\n\n");
        }
        None => {
            out.push_str("**Decision: no candidate passes.** Nothing was signed.\n\n");
            for candidate in &report.candidates {
                let reasons = match candidate.failures.as_slice() {
                    [] => String::new(),
                    [first] => format!(": {}", text(&first.message)),
                    [first, rest @ ..] => {
                        format!(": {} (and {} more below)", text(&first.message), rest.len())
                    }
                };
                let cost = cost_words(report, candidate)
                    .map(|line| format!(" {line};"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "- {}:{cost} rejected{reasons}",
                    code(&file_name(&candidate.file))
                );
            }
            out.push('\n');
        }
    }
}

/// A candidate's cost against the deployed config, in words: `$2.63 → $9.91
/// per 1k requests against the deployed version 1 (+277%, ceiling +10%)`.
fn cost_words(report: &GateReport, candidate: &CandidateReport) -> Option<String> {
    let change = candidate.cost_change.as_ref()?;
    let version = report
        .baseline
        .as_ref()
        .map_or(0, |baseline| baseline.version);
    let increase = change
        .increase
        .map_or_else(|| "more than nothing".to_owned(), super::scoring::percent);
    Some(format!(
        "Cost {} → {} per 1k requests against the deployed version {version} ({increase}, ceiling {})",
        super::scoring::dollars(change.baseline_mean_cost * 1000.0),
        super::scoring::dollars(change.mean_cost * 1000.0),
        super::scoring::percent(change.ceiling)
    ))
}

pub fn markdown(report: &GateReport) -> String {
    let mut out = markdown_head(report);
    decision(&mut out, report);
    change_first(&mut out, report);
    let mut header = vec![String::new()];
    header.extend(
        report
            .candidates
            .iter()
            .map(|candidate| code(&file_name(&candidate.file))),
    );
    let rows = comparison_rows(report).into_iter().map(|(label, cells)| {
        let mut row = vec![label];
        row.extend(cells);
        row
    });
    out.push_str(&table(&header, rows, 1..));
    out.push('\n');
    scores_lines(&mut out, report);
    exploration_lines(&mut out, report);
    for candidate in report
        .candidates
        .iter()
        .filter(|candidate| !candidate.failures.is_empty())
    {
        let _ = writeln!(
            out,
            "### Why {} was rejected\n",
            code(&file_name(&candidate.file))
        );
        for failure in &candidate.failures {
            let slice = failure
                .slice
                .as_deref()
                .map(|slice| format!(" (slice {})", code(slice)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "- {:?}{slice}: {}",
                failure.rule,
                text(&failure.message)
            );
        }
        out.push('\n');
    }
    for candidate in report
        .candidates
        .iter()
        .filter(|candidate| !candidate.regressions.is_empty())
    {
        let _ = writeln!(
            out,
            "### {} against the deployed config\n\nPaired on the same rows; a slice fails when the data show its quality more than {} below the deployed config's.\n",
            code(&file_name(&candidate.file)),
            report.max_regression
        );
        let rows = candidate.regressions.iter().map(|regression| {
            let mut cells = regression_cells(regression);
            cells[0] = text(&cells[0]);
            cells.to_vec()
        });
        out.push_str(&table(&REGRESSION_HEADER, rows, 1..7));
        out.push('\n');
    }
    if let Some(chosen) = report
        .candidates
        .iter()
        .find(|candidate| report.chosen.as_deref() == Some(candidate.file.as_str()))
    {
        chosen_per_slice(&mut out, chosen);
    }
    out
}

/// The chosen candidate's metrics, per slice, as a Markdown section.
fn chosen_per_slice(out: &mut String, chosen: &CandidateReport) {
    let _ = writeln!(out, "### {} per slice\n", code(&file_name(&chosen.file)));
    let rows = chosen.slices.iter().map(|m| {
        vec![
            text(&m.slice),
            m.n.to_string(),
            format!("{:.4}", m.quality),
            optional_cell(m.quality_lower_bound, |v| format!("{v:.4}")),
            format!("{:.4}", m.mean_cost * 1000.0),
            optional_cell(m.p95_ms, |v| format!("{v:.0}")),
            escalated_cell(m),
        ]
    });
    out.push_str(&table(
        &[
            "slice",
            "n",
            "quality",
            "lower bound",
            "$/1k req",
            "p95 ms",
            "escalated",
        ],
        rows,
        1..,
    ));
}
