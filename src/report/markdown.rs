//! The report's Markdown summary, sized for a pull-request comment or
//! `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write;

use super::decision::{Decision, Guarantee, GuaranteeRow, Signed, four_places};
use super::kit::ReportInputs;
use crate::markdown::{code, table, text};
use crate::stats::PairedVerdict;

pub fn summary(inputs: &ReportInputs<'_>, decision: &Decision, html_path: &str) -> String {
    let mut out = format!("## {}\n\n", text(inputs.title));
    let _ = writeln!(
        out,
        "{}: {} rows. Full report with charts: {}.\n",
        code(inputs.results_path),
        inputs.rows,
        code(html_path)
    );
    decision_summary(&mut out, decision);
    let mut also: Vec<String> = Vec::new();
    for certified in &decision.certified {
        also.push(certified_line(certified));
    }
    for calibration in inputs.calibrations.iter().chain(inputs.tiered) {
        also.extend(audit_line(calibration));
    }
    if let Some(change) = inputs.change {
        also.push(change_line(change));
        also.extend(changed_slices(change));
    }
    if let Some(records) = inputs.records {
        records_lines(&mut also, records);
    }
    if let Some(replay) = inputs.replay {
        also.push(replay_line(replay));
    }
    if let Some(drift) = inputs.drift {
        also.push(format!("**Drift:** {}", drift_line(drift)));
    }
    with_findings(out, also)
}

/// Lines a pull request shows at most, the summary's marker line included.
const MAX_LINES: usize = 30;

/// `head` and then each finding as a list item, as many as fit within
/// [`MAX_LINES`]; the rest are counted in a last item that points at the
/// report.
fn with_findings(mut out: String, mut findings: Vec<String>) -> String {
    while out.ends_with("\n\n") {
        out.pop();
    }
    if !findings.is_empty() {
        out.push('\n');
    }
    // The marker line, then what is written so far.
    let room = MAX_LINES.saturating_sub(1 + out.lines().count());
    if findings.len() > room {
        let kept = room.saturating_sub(1);
        let left = findings.len() - kept;
        findings.truncate(kept);
        findings.push(format!("{left} more findings in the report."));
    }
    for line in findings {
        // Nested lines bring their own indent and bullet.
        if line.starts_with("  - ") {
            let _ = writeln!(out, "{line}");
        } else {
            let _ = writeln!(out, "- {line}");
        }
    }
    // One line break at the end, however the last part ended.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// The first screen: what was signed, each candidate, the cost, and the
/// per-slice guarantee, most doubtful slices first.
fn decision_summary(out: &mut String, decision: &Decision) {
    let mut signed = match &decision.signed {
        Signed::Config {
            file,
            config_id,
            version,
            sha256,
            expires_at,
        } => format!(
            "**Signed** {}: {}version {version}, sha256 {}, {}.",
            code(file),
            if config_id.is_empty() {
                String::new()
            } else {
                format!("{} ", code(config_id))
            },
            code(sha256),
            expires_at.as_deref().map_or_else(
                || "expiry not read".to_owned(),
                |at| format!("expires {at}")
            )
        ),
        Signed::Unsigned { chosen } => format!(
            "**Chose** {} and signed nothing: the gate ran without a key.",
            code(chosen)
        ),
        Signed::NothingPassed { candidates } => {
            format!("**Nothing signed:** none of the {candidates} candidates passed every rule.")
        }
        Signed::NoGate => {
            "**No gate report:** a calibration's thresholds, not a signed config.".to_owned()
        }
    };
    if let Some(cost) = &decision.cost {
        let _ = write!(
            signed,
            " Costs ${:.4} per 1,000 requests against ${:.4} for always-large ({:.1}% saved).",
            cost.cost_per_1k,
            cost.large_per_1k,
            cost.saved() * 100.0
        );
    }
    if let Some(running) = &decision.running {
        let _ = write!(
            signed,
            " Against running version {}: quality {} → {:.4}, $/1k {} → {:.4}.",
            running.version,
            four_places(running.quality_before),
            running.quality_after,
            four_places(running.cost_before_per_1k),
            running.cost_after_per_1k
        );
    }
    let _ = writeln!(out, "{signed}\n");
    if !decision.candidates.is_empty() {
        let shown = decision
            .candidates
            .iter()
            .take(MAX_CANDIDATES)
            .map(|candidate| {
                vec![
                    code(&candidate.name),
                    candidate.verdict.name().to_owned(),
                    format!("{:.4}", candidate.quality),
                    format!("{:.4}", candidate.cost_per_1k),
                    text(&candidate.reason),
                ]
            });
        out.push_str(&table(
            &["candidate", "verdict", "quality", "$/1k req", "why"],
            shown,
            2..4,
        ));
        more_line(out, decision.candidates.len(), MAX_CANDIDATES, "candidates");
        out.push('\n');
    }
    if let Some(guarantee) = &decision.guarantee {
        let _ = writeln!(
            out,
            "**Guaranteed per slice**, {}, target {}{}:\n",
            text(&guarantee.source),
            guarantee.target,
            guarantee
                .confidence
                .map(|c| format!(", lower bounds at confidence {c}"))
                .unwrap_or_else(|| ", not certified".into())
        );
        guarantee_table(out, guarantee);
        out.push('\n');
    }
}

/// Candidates and slices beyond these are in the report: the summary
/// stays within 30 lines.
const MAX_CANDIDATES: usize = 4;
const MAX_SLICES: usize = 5;

fn more_line(out: &mut String, total: usize, shown: usize, what: &str) {
    if total > shown {
        let _ = writeln!(out, "\n{} in the report.", more(total - shown, what));
    }
}

/// `1 more slice`, `3 more slices`.
fn more(count: usize, what: &str) -> String {
    let noun = if count == 1 {
        what.strip_suffix('s').unwrap_or(what)
    } else {
        what
    };
    format!("{count} more {noun}")
}

/// The guarantee's slices, those with no bound or a note first.
fn guarantee_table(out: &mut String, guarantee: &Guarantee) {
    let mut rows: Vec<&GuaranteeRow> = guarantee.rows.iter().collect();
    rows.sort_by_key(|row| {
        (
            row.lower_bound.is_some() || guarantee.confidence.is_none(),
            row.note.is_empty(),
        )
    });
    let dash = || "-".to_owned();
    let cells = rows.iter().take(MAX_SLICES).map(|row| {
        vec![
            text(&row.slice),
            row.n.to_string(),
            text(&row.threshold),
            row.quality.map_or_else(dash, |q| format!("{q:.4}")),
            row.lower_bound.map_or_else(dash, |b| format!("{b:.4}")),
            row.cost_per_1k.map_or_else(dash, |c| format!("{c:.4}")),
            text(&row.note),
        ]
    });
    out.push_str(&table(
        &[
            "slice",
            "n",
            "threshold",
            "quality",
            "lower bound",
            "$/1k req",
            "note",
        ],
        cells,
        1..6,
    ));
    more_line(out, rows.len(), MAX_SLICES, "slices");
}

/// A certified calibration the guarantee is not drawn from, in one line.
fn certified_line(certified: &Guarantee) -> String {
    let uncertified = certified.uncertified();
    let mut line = format!(
        "**{}**: {} of {} slices certified at target {}",
        text(&certified.source),
        certified.rows.len() - uncertified.len(),
        certified.rows.len(),
        certified.target
    );
    for row in certified
        .rows
        .iter()
        .filter(|row| row.lower_bound.is_none())
    {
        let _ = write!(line, "; {}: {}", code(&row.slice), text(&row.note));
    }
    line.push('.');
    line
}

fn change_line(change: &super::change::Change) -> String {
    let count = |verdict: PairedVerdict| {
        change
            .slices
            .iter()
            .filter(|slice| slice.test.verdict == verdict)
            .map(|slice| code(&slice.slice))
            .collect::<Vec<_>>()
    };
    let regressed = count(PairedVerdict::Regressed);
    let unknown = count(PairedVerdict::TooSmallToTell);
    format!(
        "**The change** from the deployed version {} to {} (paired, margin {}): {} of {} slices regressed{}{}.",
        change.deployed_version,
        text(&change.proposal),
        change.margin,
        regressed.len(),
        change.slices.len(),
        if regressed.is_empty() {
            String::new()
        } else {
            format!(" ({})", regressed.join(", "))
        },
        if unknown.is_empty() {
            String::new()
        } else {
            format!("; too few rows to tell for {}", unknown.join(", "))
        }
    )
}

/// The change's slices, regressed first, as nested lines: at most
/// [`MAX_CHANGED`], the rest in the report.
fn changed_slices(change: &super::change::Change) -> Vec<String> {
    let rank = |verdict: PairedVerdict| match verdict {
        PairedVerdict::Regressed => 0,
        PairedVerdict::TooSmallToTell => 1,
        PairedVerdict::NotWorse => 2,
    };
    let mut slices: Vec<&super::change::SliceChange> = change.slices.iter().collect();
    slices.sort_by_key(|slice| rank(slice.test.verdict));
    let mut lines: Vec<String> = slices
        .iter()
        .take(MAX_CHANGED)
        .map(|slice| {
            let change = slice.text();
            format!(
                "  - {}: threshold {}; quality {} ({}); $/1k {} ({}); escalated {}: **{}**",
                code(&slice.slice),
                change.threshold,
                change.quality,
                change.quality_change,
                change.cost,
                change.cost_change,
                change.escalated,
                change.verdict
            )
        })
        .collect();
    if slices.len() > MAX_CHANGED {
        lines.push(format!(
            "  - {} in the report.",
            more(slices.len() - MAX_CHANGED, "slices")
        ));
    }
    lines
}

const MAX_CHANGED: usize = 3;

/// How a calibration's grader did against the humans' verdicts, its
/// audited slices in one line, each cell named by its column.
fn audit_line(calibration: &crate::schema::CalibrationDocument) -> Option<String> {
    let rows = crate::schema::audit_rows(calibration);
    if rows.is_empty() {
        return None;
    }
    let header = &crate::schema::AUDIT_HEADER;
    let slices: Vec<String> = rows
        .iter()
        .take(MAX_SLICES)
        .map(|row| {
            let cells: Vec<String> = header[1..]
                .iter()
                .zip(&row[1..])
                .map(|(name, cell)| format!("{name} {}", text(cell)))
                .collect();
            format!("{}: {}", code(&row[0]), cells.join(", "))
        })
        .collect();
    Some(format!(
        "**The grader against the humans' verdicts** ({}){}: {}",
        text(&super::decision::calibration_label(calibration)),
        if rows.len() > MAX_SLICES {
            format!(", {} of {} audited slices", MAX_SLICES, rows.len())
        } else {
            String::new()
        },
        slices.join("; ")
    ))
}

fn drift_line(drift: &crate::schema::DriftDocument) -> String {
    format!(
        "{}{}",
        drift.verdict.name(),
        flagged(
            drift
                .slices
                .iter()
                .map(|slice| (slice.slice.as_str(), slice.verdict))
        )
    )
}

/// `: ` and the slices whose verdict is not ok, each with its verdict;
/// empty when every slice is ok.
fn flagged<'a>(slices: impl Iterator<Item = (&'a str, crate::schema::Verdict)>) -> String {
    let flagged: Vec<String> = slices
        .filter(|(_, verdict)| *verdict != crate::schema::Verdict::Ok)
        .map(|(slice, verdict)| format!("{} ({})", code(slice), verdict.name()))
        .collect();
    if flagged.is_empty() {
        String::new()
    } else {
        format!(": {}", flagged.join(", "))
    }
}

/// The records documents, a line each: production estimates, drift from
/// records, and that the replays are in the report.
fn records_lines(lines: &mut Vec<String>, records: &super::RecordsDocuments) {
    lines.extend(
        records
            .candidates
            .iter()
            .map(super::records::production_line),
    );
    if let Some(drift) = &records.drift {
        lines.push(format!(
            "**Drift from records** ({} records): {}{}",
            drift.records.rows,
            drift.verdict.name(),
            flagged(
                drift
                    .slices
                    .iter()
                    .map(|slice| (slice.slice.as_str(), slice.verdict))
            )
        ));
    }
    if records.fallback.is_some() || records.hedge.is_some() {
        lines.push("Breakers and hedging replayed on the records: in the report.".to_owned());
    }
}

fn replay_line(replay: &crate::schema::ReplayDocument) -> String {
    let best = replay
        .policies
        .iter()
        .max_by(|a, b| a.hit_rate.total_cmp(&b.hit_rate));
    format!(
        "**Replica routing** on {} ({} requests): best hit rate {} against a ceiling of {:.1}%.",
        code(&replay.trace.path),
        replay.trace.requests,
        best.map_or_else(
            || "-".to_owned(),
            |best| format!("{:.1}% ({})", best.hit_rate * 100.0, code(&best.name))
        ),
        replay.trace.ceiling_hit_rate * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_past_the_line_budget_are_counted_not_shown() {
        let head = "## report\n\n".to_owned() + &"a line\n".repeat(20) + "\n";
        let findings: Vec<String> = (0..30).map(|i| format!("finding {i}")).collect();
        let out = with_findings(head, findings);
        // The marker line is written before the summary.
        assert_eq!(out.lines().count() + 1, MAX_LINES, "{out}");
        assert!(
            out.ends_with("- 25 more findings in the report.\n"),
            "{out}"
        );
        assert!(out.contains("- finding 4\n") && !out.contains("finding 5"));
    }

    #[test]
    fn findings_that_fit_are_all_shown() {
        let out = with_findings("## report\n\n".to_owned(), vec!["one".into(), "two".into()]);
        assert_eq!(out, "## report\n\n- one\n- two\n");
    }
}
