//! What a reviewer reads first with `report --baseline`: the deployed route
//! config against the proposed one, scored on the same rows by the gate's
//! evaluation, slice by slice, with the paired test and intervals of
//! `gate --baseline`.

use anyhow::Context;

use crate::policy::{Evaluation, TieredRows, evaluate_table, regressions, scores_of};
use crate::routes::RouteConfig;
use crate::routes::{ResolvedPolicy, ResolvedTable, Thresholds, TierThresholds};
use crate::schema::GradedTable;
use crate::schema::Metrics;
use crate::schema::SliceRegression;
use crate::schema::{CalibrationDocument, Policy, Threshold};

/// One slice before and after.
#[derive(Debug, Clone)]
pub struct SliceChange {
    pub slice: String,
    /// The slice's thresholds (one, or one per boundary of a k-tier
    /// policy); empty where it has none.
    pub threshold_before: Vec<Threshold>,
    pub threshold_after: Vec<Threshold>,
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
        let threshold = |values: &[Threshold]| {
            if values.is_empty() {
                return "-".to_owned();
            }
            let texts: Vec<String> = values.iter().map(Threshold::to_string).collect();
            texts.join(", ")
        };
        let test = &self.test;
        let [low, high] = test.difference_interval;
        let [cost_low, cost_high] = test.cost_difference_interval;
        ChangeText {
            threshold: format!(
                "{} → {}",
                threshold(&self.threshold_before),
                threshold(&self.threshold_after)
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
            verdict: test.verdict.reading(test.better, test.difference),
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
/// and score column (and, for more than two tiers, of its tiers); `None`
/// when no calibration matches it.
pub fn proposed_from_calibration(
    deployed: &ResolvedTable,
    calibrations: &[CalibrationDocument],
) -> Option<ResolvedTable> {
    let (kind, score) = match &deployed.policy {
        ResolvedPolicy::Predictive { score, .. }
        | ResolvedPolicy::PredictiveTiers { score, .. } => (Policy::Predictive, Some(score)),
        ResolvedPolicy::Cascade { score, .. } => (Policy::Cascade, Some(score)),
        ResolvedPolicy::CascadeStages { .. } => (Policy::Cascade, None),
        ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => return None,
    };
    let tiers: Option<Vec<String>> = deployed.policy.tier_routes().map(|routes| {
        routes
            .iter()
            .filter_map(|name| deployed.route(name))
            .map(|route| route.tier.name().to_owned())
            .collect()
    });
    let calibration = calibrations.iter().find(|calibration| {
        calibration.policy == kind
            && score.is_none_or(|score| &calibration.score_column == score)
            && match (&tiers, &calibration.tiers) {
                (Some(ours), Some(theirs)) => ours == theirs,
                (None, theirs) => theirs.as_ref().is_none_or(|theirs| theirs.len() == 2),
                (Some(_), None) => false,
            }
    })?;
    if tiers.is_some() {
        let mut thresholds = TierThresholds::default();
        for slice in calibration.slices.iter().filter(|slice| slice.feasible) {
            let Some(tiered) = &slice.tiered else {
                continue;
            };
            if slice.slice == crate::schema::GLOBAL_SLICE {
                thresholds.default = Some(tiered.thresholds.clone());
            } else {
                thresholds
                    .slices
                    .insert(slice.slice.clone(), tiered.thresholds.clone());
            }
        }
        let mut proposed = deployed.clone();
        if let ResolvedPolicy::PredictiveTiers {
            thresholds: slot, ..
        }
        | ResolvedPolicy::CascadeStages {
            thresholds: slot, ..
        } = &mut proposed.policy
        {
            *slot = thresholds;
        }
        return Some(proposed);
    }
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

fn thresholds_of(table: &ResolvedTable, slice: &str) -> Vec<Threshold> {
    if let Some(thresholds) = table.policy.tier_thresholds() {
        return thresholds.for_slice(slice).unwrap_or_default().to_vec();
    }
    table
        .policy
        .thresholds()
        .and_then(|thresholds| thresholds.for_slice(slice))
        .into_iter()
        .collect()
}

/// Where a compared config's rows come from: the results read with a score
/// column, and a k-tier table's rows read for its tiers.
pub trait ChangeRows {
    /// The results, with `score_column` as the score; `None` for a table
    /// that reads no score (the score may then be missing).
    fn results(&self, score_column: Option<&str>) -> anyhow::Result<GradedTable>;
    fn tiered(&self, table: &ResolvedTable) -> anyhow::Result<Option<TieredRows>>;
}

/// Scores both tables on the same rows, each by its own score column (and
/// a k-tier table by its tiers' columns), and pairs them slice by slice.
pub fn change(
    deployed: &RouteConfig,
    proposed: &ResolvedTable,
    proposal: String,
    rows: &dyn ChangeRows,
    margin: f64,
    delta: f64,
) -> anyhow::Result<Change> {
    let score = |table: &ResolvedTable| -> anyhow::Result<Evaluation> {
        let column = table.policy.score();
        let graded = rows.results(column).with_context(|| {
            format!(
                "the score column {:?} of a compared config",
                column.unwrap_or("score")
            )
        })?;
        let tiered = rows.tiered(table)?;
        Ok(evaluate_table(
            table,
            &graded,
            &scores_of(&graded),
            None,
            tiered.as_ref(),
        ))
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
