//! What a reviewer reads first with `report --baseline`: the deployed route
//! config against the proposed one, scored on the same rows by the gate's
//! evaluation, slice by slice, with the paired test and intervals of
//! `gate --baseline`.

use anyhow::Context;

use crate::calibrate::{CalibrationDocument, Policy, Threshold};
use crate::gate::{Evaluation, RouteConfig, SliceRegression, evaluate, regressions, scores_of};
use crate::policy::Metrics;
use crate::routes::{ResolvedPolicy, ResolvedTable, Thresholds};
use crate::schema::GradedTable;
use crate::stats::PairedVerdict;

/// One slice before and after.
#[derive(Debug, Clone)]
pub struct SliceChange {
    pub slice: String,
    pub threshold_before: Option<Threshold>,
    pub threshold_after: Option<Threshold>,
    pub before: Metrics,
    pub after: Metrics,
    pub test: SliceRegression,
}

/// One slice's change as text, shared by the HTML and the Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeText {
    pub threshold: String,
    pub quality: String,
    pub quality_change: String,
    pub cost: String,
    pub cost_change: String,
    pub escalated: String,
    pub verdict: &'static str,
}

impl SliceChange {
    pub fn text(&self) -> ChangeText {
        let threshold = |value: Option<Threshold>| {
            value.map_or_else(|| "-".to_owned(), |threshold| threshold.to_string())
        };
        let test = &self.test;
        let [low, high] = test.difference_interval;
        let [cost_low, cost_high] = test.cost_difference_interval;
        ChangeText {
            threshold: format!(
                "{} → {}",
                threshold(self.threshold_before),
                threshold(self.threshold_after)
            ),
            quality: format!("{:.4} → {:.4}", self.before.quality, self.after.quality),
            quality_change: format!("{:+.4} [{low:+.4}, {high:+.4}]", test.difference),
            cost: format!(
                "{:.4} → {:.4}",
                self.before.mean_cost * 1000.0,
                self.after.mean_cost * 1000.0
            ),
            cost_change: format!(
                "{:+.4} [{:+.4}, {:+.4}]",
                test.cost_difference * 1000.0,
                cost_low * 1000.0,
                cost_high * 1000.0
            ),
            escalated: format!(
                "{:.1}% → {:.1}%",
                self.before.escalation_rate * 100.0,
                self.after.escalation_rate * 100.0
            ),
            verdict: match test.verdict {
                PairedVerdict::Regressed => "regressed",
                PairedVerdict::NotWorse => "not worse",
                PairedVerdict::TooSmallToTell => "not enough rows to tell",
            },
        }
    }
}

/// The deployed config against the proposal.
#[derive(Debug, Clone)]
pub struct Change {
    pub deployed_version: u64,
    /// Where the proposal came from, for the reader.
    pub proposal: String,
    pub margin: f64,
    pub slices: Vec<SliceChange>,
}

/// The deployed table with the thresholds of the calibration of its policy
/// and score column; `None` when no calibration matches it.
pub fn proposed_from_calibration(
    deployed: &ResolvedTable,
    calibrations: &[CalibrationDocument],
) -> Option<ResolvedTable> {
    let (kind, score) = match &deployed.policy {
        ResolvedPolicy::Predictive { score, .. } => (Policy::Predictive, score),
        ResolvedPolicy::Cascade { score, .. } => (Policy::Cascade, score),
        ResolvedPolicy::Single { .. }
        | ResolvedPolicy::Static { .. }
        | ResolvedPolicy::PredictiveTiers { .. }
        | ResolvedPolicy::CascadeStages { .. } => return None,
    };
    let calibration = calibrations
        .iter()
        .find(|calibration| calibration.policy == kind && &calibration.score_column == score)?;
    let thresholds = Thresholds {
        default: None,
        slices: calibration
            .slices
            .iter()
            .filter_map(|slice| {
                slice
                    .threshold
                    .map(|threshold| (slice.slice.clone(), threshold))
            })
            .collect(),
    };
    let mut proposed = deployed.clone();
    match &mut proposed.policy {
        ResolvedPolicy::Predictive {
            thresholds: slot, ..
        }
        | ResolvedPolicy::Cascade {
            thresholds: slot, ..
        } => *slot = thresholds,
        ResolvedPolicy::Single { .. }
        | ResolvedPolicy::Static { .. }
        | ResolvedPolicy::PredictiveTiers { .. }
        | ResolvedPolicy::CascadeStages { .. } => {}
    }
    Some(proposed)
}

fn thresholds_of(table: &ResolvedTable, slice: &str) -> Option<Threshold> {
    table
        .policy
        .thresholds()
        .and_then(|thresholds| thresholds.for_slice(slice))
}

/// Scores both tables on the results each reads its scores from
/// (`results_for(column)`), and pairs them slice by slice.
pub fn change(
    deployed: &RouteConfig,
    proposed: &ResolvedTable,
    proposal: String,
    results_for: &dyn Fn(&str) -> anyhow::Result<GradedTable>,
    margin: f64,
    delta: f64,
) -> anyhow::Result<Change> {
    if deployed.table.policy.tier_routes().is_some() || proposed.policy.tier_routes().is_some() {
        anyhow::bail!(
            "--baseline: the change is drawn between two-tier configs; this one routes over more tiers"
        );
    }
    let score = |table: &ResolvedTable| -> anyhow::Result<Evaluation> {
        let column = table.policy.score().unwrap_or("score");
        let graded = results_for(column)
            .with_context(|| format!("the score column {column:?} of a compared config"))?;
        Ok(evaluate(table, &graded, &scores_of(&graded), None, None))
    };
    let before = score(&deployed.table)?;
    let after = score(proposed)?;
    let tests = regressions(&after, &before, margin, delta);
    let slices = tests
        .into_iter()
        .filter_map(|test| {
            let find = |evaluation: &Evaluation| {
                evaluation
                    .slices
                    .iter()
                    .find(|metrics| metrics.slice == test.slice)
                    .cloned()
            };
            Some(SliceChange {
                threshold_before: thresholds_of(&deployed.table, &test.slice),
                threshold_after: thresholds_of(proposed, &test.slice),
                before: find(&before)?,
                after: find(&after)?,
                slice: test.slice.clone(),
                test,
            })
        })
        .collect();
    Ok(Change {
        deployed_version: deployed.version,
        proposal,
        margin,
        slices,
    })
}
