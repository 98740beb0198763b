//! Computes the drift document.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use arrow::array::Array;

use crate::digest::{sha256_file, sha256_hex};
use crate::policy::{evaluate, scores_of, tiered_rows};
use crate::routes::RouteConfig;
use crate::routes::{ResolvedPolicy, Tier};
use crate::schema::InputFile;
use crate::schema::Metrics;
use crate::schema::Threshold;
use crate::schema::{Column, GradedTable, ReadOptions, read_graded};
use crate::stats::binomial_cdf;

use crate::schema::{
    ConfigRef, DRIFT_SCHEMA_VERSION, DriftDocument, ScoreShift, SliceDrift, Verdict,
};
use crate::stats::alarms;
use crate::stats::{ks_two_sample, psi_test, two_proportion_z};

#[derive(Debug, Clone)]
pub struct DriftOptions {
    pub config: PathBuf,
    pub results: PathBuf,
    pub baseline_results: Option<PathBuf>,
    pub read: ReadOptions,
    /// The score column; `None` reads the one the config's policy names.
    /// It replaces `read`'s.
    pub score_col: Option<String>,
    /// Overrides the target the gate recorded in the config.
    pub target: Option<f64>,
    /// Overrides the confidence the gate recorded; 0.95 when neither has one.
    pub confidence: Option<f64>,
}

/// A significant score shift whose PSI, less its null, reaches this is a
/// major one.
const PSI_RECALIBRATE: f64 = 0.25;

fn input_file(table: &GradedTable, bytes_sha256: String) -> InputFile {
    InputFile {
        path: table.path.display().to_string(),
        sha256: bytes_sha256,
        rows: table.num_rows() as u64,
    }
}

/// Scores per slice.
fn scores(table: &GradedTable) -> BTreeMap<String, Vec<f64>> {
    let mut scores: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for batch in &table.batches {
        for index in 0..batch.num_rows() {
            scores
                .entry(batch.slice.value(index).to_owned())
                .or_default()
                .push(batch.score.value(index));
        }
    }
    scores
}

/// Per slice, rows each tier answered with a model other than `pinned`.
fn tier_drift(
    table: &GradedTable,
    pinned: &BTreeMap<Tier, String>,
) -> BTreeMap<String, Vec<String>> {
    let mut counts: BTreeMap<(String, Tier, String), u64> = BTreeMap::new();
    for batch in &table.batches {
        for (position, tier) in [Tier::Small, Tier::Large, Tier::Verifier]
            .into_iter()
            .enumerate()
        {
            let (Some(models), Some(pinned)) = (&batch.models[position], pinned.get(&tier)) else {
                continue;
            };
            for index in 0..batch.num_rows() {
                if models.is_valid(index) && models.value(index) != pinned {
                    let key = (
                        batch.slice.value(index).to_owned(),
                        tier,
                        models.value(index).to_owned(),
                    );
                    *counts.entry(key).or_default() += 1;
                }
            }
        }
    }
    let mut drift: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((slice, tier, model), rows) in counts {
        drift.entry(slice).or_default().push(format!(
            "the {} tier answered {rows} rows with {model}, not the pinned {}",
            tier.name(),
            pinned[&tier]
        ));
    }
    drift
}

/// The deployed config at `path` (`--config`), and how a document names it.
pub(super) fn load_config(path: &std::path::Path) -> anyhow::Result<(RouteConfig, ConfigRef)> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("{}: cannot read (--config)", path.display()))?;
    let config: RouteConfig = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a route config (--config)", path.display()))?;
    let reference = ConfigRef {
        path: path.display().to_string(),
        sha256: sha256_hex(&bytes),
        config_id: config.config_id.clone(),
        version: config.version,
    };
    Ok((config, reference))
}

pub fn drift(options: &DriftOptions) -> anyhow::Result<DriftDocument> {
    let (config, config_ref) = load_config(&options.config)?;
    let target = options.target.unwrap_or(config.provenance.target);
    let confidence = options
        .confidence
        .or(config.provenance.confidence)
        .unwrap_or(0.95);
    if !(target > 0.0 && target <= 1.0) {
        bail!(
            "{}: the target {target} the config records is not in (0, 1]",
            options.config.display()
        );
    }
    let delta = 1.0 - confidence;
    let mut read = options.read.clone();
    read.details = true;
    read.names.score = match &options.score_col {
        Some(column) => column.clone(),
        None => config
            .table
            .policy
            .score()
            .unwrap_or(Column::Score.name())
            .to_owned(),
    };
    // A k-tier cascade's stage scores are its tiers' own columns; the
    // score-shift check follows the router's score only.
    let stages = matches!(config.table.policy, ResolvedPolicy::CascadeStages { .. });
    read.score_optional = stages;
    let fresh = read_graded(&options.results, &read)?;
    let baseline = match &options.baseline_results {
        Some(path) => Some(read_graded(path, &read)?),
        None => None,
    };
    let tiered_fresh = tiered_rows(&options.results, &read, &config.table)?;
    let tiered_baseline = match &options.baseline_results {
        Some(path) => tiered_rows(path, &read, &config.table)?,
        None => None,
    };

    let now = evaluate(
        &config.table,
        &fresh,
        &scores_of(&fresh),
        Some(confidence),
        tiered_fresh.as_ref(),
    );
    let at_calibration: Vec<Metrics> = match &baseline {
        Some(baseline) => {
            evaluate(
                &config.table,
                baseline,
                &scores_of(baseline),
                Some(confidence),
                tiered_baseline.as_ref(),
            )
            .slices
        }
        None => config.provenance.metrics.clone(),
    };
    let fresh_scores = scores(&fresh);
    let baseline_scores = baseline.as_ref().filter(|_| !stages).map(scores);
    let pinned: BTreeMap<Tier, String> = config
        .table
        .policy
        .routes()
        .into_iter()
        .filter_map(|name| config.table.route(name))
        .filter_map(|route| route.tier.known().map(|tier| (tier, route.model.clone())))
        .collect();
    let mut tier_drift = tier_drift(&fresh, &pinned);
    let thresholds = config.table.policy.thresholds();
    let tier_thresholds = config.table.policy.tier_thresholds();
    let has_thresholds = thresholds.is_some() || tier_thresholds.is_some();

    // Counts recorded as rates (a config's provenance) are k / n in f64,
    // from which k is recovered exactly.
    let count_of = |rate: f64, n: u64| (rate * n as f64).round() as u64;
    let mut slices: Vec<SliceDrift> = Vec::new();
    let mut tests: Vec<(usize, Test, f64)> = Vec::new();
    for (metrics, counts) in now.slices.iter().zip(&now.counts) {
        let n = counts.n;
        let successes = counts.successes;
        let escalated = counts.escalated;
        let threshold = thresholds.and_then(|thresholds| thresholds.for_slice(&metrics.slice));
        let tier_threshold =
            tier_thresholds.and_then(|thresholds| thresholds.for_slice(&metrics.slice));
        let thresholded = threshold.is_some() || tier_threshold.is_some();
        let before = at_calibration
            .iter()
            .find(|before| before.slice == metrics.slice);
        let escalation_test = before.filter(|_| thresholded).and_then(|before| {
            two_proportion_z(
                escalated,
                n,
                count_of(before.escalation_rate, before.n),
                before.n,
            )
        });
        let quality_p_value = binomial_cdf(n, target, successes);
        let score_shift = baseline_scores.as_ref().and_then(|baseline| {
            let baseline = baseline.get(&metrics.slice)?;
            let current = fresh_scores.get(&metrics.slice)?;
            let (ks_statistic, ks_p_value) = ks_two_sample(baseline, current)?;
            let psi = psi_test(baseline, current)?;
            Some(ScoreShift {
                psi: psi.psi,
                psi_null: psi.null,
                psi_p_value: psi.p_value,
                ks_statistic,
                ks_p_value,
            })
        });
        let tier_drift = tier_drift.remove(&metrics.slice).unwrap_or_default();
        let mut reasons = tier_drift.clone();
        if !thresholded && has_thresholds {
            reasons.push("the deployed config has no threshold for this slice".to_owned());
        }
        // Facts, not tests: a model other than the pinned one, or no
        // threshold, needs a recalibration whatever the counts say.
        let verdict = if reasons.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Recalibrate
        };
        let index = slices.len();
        tests.push((index, Test::Quality, quality_p_value));
        if let Some((_, p)) = escalation_test {
            tests.push((index, Test::Escalation, p));
        }
        if let Some(shift) = &score_shift {
            tests.push((index, Test::Psi, shift.psi_p_value));
            tests.push((index, Test::Ks, shift.ks_p_value));
        }
        slices.push(SliceDrift {
            slice: metrics.slice.clone(),
            n,
            verdict,
            reasons,
            threshold,
            thresholds: tier_threshold.map(<[Threshold]>::to_vec),
            served: metrics.served.clone(),
            escalation_rate: metrics.escalation_rate,
            escalation_rate_at_calibration: before
                .filter(|_| thresholded)
                .map(|before| before.escalation_rate),
            escalation_p_value: escalation_test.map(|(_, p)| p),
            quality: metrics.quality,
            quality_lower_bound: metrics.quality_lower_bound.unwrap_or(0.0),
            quality_p_value,
            score_shift,
            tier_drift,
        });
    }
    judge_as_one_family(&mut slices, &tests, delta, target);
    let verdict = slices
        .iter()
        .map(|slice| slice.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    Ok(DriftDocument {
        schema_version: DRIFT_SCHEMA_VERSION,
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        config: config_ref,
        results: input_file(&fresh, sha256_file(&options.results)?),
        baseline_results: match (&baseline, &options.baseline_results) {
            (Some(table), Some(path)) => Some(input_file(table, sha256_file(path)?)),
            _ => None,
        },
        target,
        confidence,
        verdict,
        tests: tests.len() as u64,
        slices,
    })
}

/// One family for the run: Holm's step-down decides `recalibrate` (any
/// false one at most δ of runs), Benjamini–Hochberg `watch`; each alarm
/// gives its slice a reason.
fn judge_as_one_family(
    slices: &mut [SliceDrift],
    tests: &[(usize, Test, f64)],
    delta: f64,
    target: f64,
) {
    let p_values: Vec<f64> = tests.iter().map(|&(_, _, p)| p).collect();
    for (&(index, test, p), alarm) in tests.iter().zip(alarms(&p_values, delta)) {
        let Some(strong) = alarm else {
            continue;
        };
        let slice = &mut slices[index];
        let (level, reason) = match test {
            Test::Quality => (
                Verdict::Recalibrate,
                format!(
                    "quality {:.4} is below the target {target} (p = {p:.2e})",
                    slice.quality
                ),
            ),
            Test::Escalation => (
                Verdict::Recalibrate,
                format!(
                    "the escalation rate moved from {:.1}% to {:.1}% (p = {p:.2e})",
                    slice.escalation_rate_at_calibration.unwrap_or(0.0) * 100.0,
                    slice.escalation_rate * 100.0
                ),
            ),
            Test::Psi => {
                let shift = slice.score_shift.expect("a score test has a shift");
                let beyond_noise = shift.psi - shift.psi_null;
                let level = if beyond_noise >= PSI_RECALIBRATE {
                    Verdict::Recalibrate
                } else {
                    Verdict::Watch
                };
                (
                    level,
                    format!(
                        "the score distribution shifted (PSI {:.3}, {:.3} when nothing changes; p = {p:.2e})",
                        shift.psi, shift.psi_null
                    ),
                )
            }
            Test::Ks => (
                Verdict::Watch,
                format!(
                    "the score distribution differs (KS D = {:.3}, p = {p:.2e})",
                    slice.score_shift.map_or(0.0, |shift| shift.ks_statistic)
                ),
            ),
        };
        let level = if strong { level } else { Verdict::Watch };
        slice.verdict = slice.verdict.max(level);
        slice.reasons.push(reason);
    }
}

/// The statistical tests of a slice, in one family for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Test {
    Quality,
    Escalation,
    Psi,
    Ks,
}
