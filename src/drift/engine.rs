//! Computes the drift document.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;
use arrow::array::Array;

use super::sequential::Arl;
use crate::digest::sha256_file;
use crate::policy::{Evaluation, TieredRows, evaluate_table, scores_of, tiered_rows};
use crate::routes::RouteConfig;
use crate::routes::{ResolvedPolicy, Tier};
use crate::schema::Metrics;
use crate::schema::Threshold;
use crate::schema::{Column, ColumnNames, GradedTable, ReadOptions, read_graded};
use crate::schema::{DocumentFile, InputFile, read_document};
use crate::stats::binomial_cdf;
use crate::units::{Confidence, Target};

use crate::schema::{
    ConfigRef, DRIFT_SCHEMA_VERSION, DriftDocument, ScoreShift, SliceDrift, Verdict,
};

use super::monitor::{FreshRun, count_of, judge_sequentially, monitor};
use super::sequential::DriftState;
use crate::stats::alarms;
use crate::stats::{ks_two_sample, psi_test, two_proportion_z};

#[derive(Debug, Clone, PartialEq)]
pub struct DriftOptions {
    pub config: PathBuf,
    pub results: PathBuf,
    pub baseline_results: Option<PathBuf>,
    /// The results' slice column.
    pub slice_col: String,
    /// The score column; `None` reads the one the config's policy names.
    pub score_col: Option<String>,
    /// Overrides the target the gate recorded in the config.
    pub target: Option<Target>,
    /// Overrides the confidence the gate recorded; 0.95 when neither has one.
    pub confidence: Option<Confidence>,
    /// The anytime-valid monitor's state (`--state`): read if it exists,
    /// and its next state returned.
    pub state: Option<PathBuf>,
    /// The change detectors' average run length to a false alarm, in runs,
    /// for a new state (`--arl`); a state keeps the one it began with.
    pub arl: Arl,
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
    let DocumentFile {
        document: config,
        sha256,
    } = read_document::<RouteConfig>(path, "a route config", Some("--config"))?;
    let reference = ConfigRef {
        path: path.display().to_string(),
        sha256,
        config_id: config.config_id.clone(),
        version: config.version,
    };
    Ok((config, reference))
}

/// The drift document, and with `--state` the monitor's next state (for
/// the caller to write once the document is out).
pub fn drift(options: &DriftOptions) -> anyhow::Result<(DriftDocument, Option<DriftState>)> {
    let (config, config_ref) = load_config(&options.config)?;
    let (target, confidence) = target_and_confidence(options, &config)?;
    let delta = 1.0 - confidence;
    let DriftInputs {
        fresh,
        baseline,
        tiered_fresh,
        tiered_baseline,
        stages,
    } = read_inputs(options, &config)?;

    let now = evaluate_table(
        &config.table,
        &fresh,
        &scores_of(&fresh),
        Some(confidence),
        tiered_fresh.as_ref(),
    );
    let at_calibration = metrics_at_calibration(
        &config,
        baseline.as_ref(),
        tiered_baseline.as_ref(),
        confidence,
    );
    let fresh_scores = scores(&fresh);
    let baseline_scores = baseline.as_ref().filter(|_| !stages).map(scores);
    let pinned = pinned_models(&config);
    let tier_drift = tier_drift(&fresh, &pinned);
    let thresholds = config.table.policy.thresholds();
    let tier_thresholds = config.table.policy.tier_thresholds();
    let has_thresholds = thresholds.is_some() || tier_thresholds.is_some();

    let context = SliceContext {
        thresholds,
        tier_thresholds,
        has_thresholds,
        target,
        at_calibration: &at_calibration,
        fresh_scores: &fresh_scores,
        baseline_scores: baseline_scores.as_ref(),
    };
    let (mut slices, mut tests) = context.judge_each(&now, tier_drift);
    let results_sha256 = sha256_file(&options.results)?;
    let monitored = match &options.state {
        Some(path) => {
            let fresh_run = FreshRun {
                results: (&options.results, &results_sha256),
                table: &fresh,
                tiered: tiered_fresh.as_ref(),
                now: &now,
                confidence,
            };
            let state = monitor(
                path,
                &fresh_run,
                &config,
                &config_ref,
                (target, delta, has_thresholds),
                options.arl.get(),
                &at_calibration,
            )?;
            // The monitor judges quality and escalation; the run's own
            // tests of them are reported, not counted.
            tests.retain(|(_, test, _)| matches!(test, Test::Psi | Test::Ks));
            Some((path, state))
        }
        None => None,
    };
    judge_as_one_family(&mut slices, &tests, delta, target);
    let sequential = monitored
        .as_ref()
        .map(|(path, (state, counted))| judge_sequentially(&mut slices, path, state, *counted));
    let verdict = slices
        .iter()
        .map(|slice| slice.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    let document = DriftDocument {
        schema_version: DRIFT_SCHEMA_VERSION,
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        config: config_ref,
        results: input_file(&fresh, results_sha256),
        baseline_results: match (&baseline, &options.baseline_results) {
            (Some(table), Some(path)) => Some(input_file(table, sha256_file(path)?)),
            _ => None,
        },
        target,
        confidence,
        verdict,
        tests: tests.len() as u64,
        slices,
        sequential,
    };
    Ok((document, monitored.map(|(_, (state, _))| state)))
}

/// The quality target and the tests' confidence: the flags', else what the
/// gate recorded in the config (0.95 when it recorded no confidence).
fn target_and_confidence(
    options: &DriftOptions,
    config: &RouteConfig,
) -> anyhow::Result<(f64, f64)> {
    let target = options.target.map_or(config.provenance.target, Target::get);
    let confidence = options
        .confidence
        .map(Confidence::get)
        .or(config.provenance.confidence)
        .unwrap_or(0.95);
    if !(target > 0.0 && target <= 1.0) {
        bail!(
            "{}: the target {target} the config records is not in (0, 1]",
            options.config.display()
        );
    }
    Ok((target, confidence))
}

/// Each slice's metrics at calibration: the baseline results' under the
/// config, else those the gate recorded in it.
fn metrics_at_calibration(
    config: &RouteConfig,
    baseline: Option<&GradedTable>,
    tiered_baseline: Option<&TieredRows>,
    confidence: f64,
) -> Vec<Metrics> {
    match baseline {
        Some(baseline) => {
            evaluate_table(
                &config.table,
                baseline,
                &scores_of(baseline),
                Some(confidence),
                tiered_baseline,
            )
            .slices
        }
        None => config.provenance.metrics.clone(),
    }
}

/// The fresh and baseline results, read for the config's policy.
struct DriftInputs {
    fresh: GradedTable,
    baseline: Option<GradedTable>,
    tiered_fresh: Option<TieredRows>,
    tiered_baseline: Option<TieredRows>,
    /// The policy is a k-tier cascade, whose stage scores are its tiers'
    /// own columns.
    stages: bool,
}

fn read_inputs(options: &DriftOptions, config: &RouteConfig) -> anyhow::Result<DriftInputs> {
    let mut read = ReadOptions::of(ColumnNames::new(
        Column::Score.name(),
        options.slice_col.clone(),
    ))
    .with_details();
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
    Ok(DriftInputs {
        fresh,
        baseline,
        tiered_fresh,
        tiered_baseline,
        stages,
    })
}

/// The model each tier of the config's routes is pinned to.
fn pinned_models(config: &RouteConfig) -> BTreeMap<Tier, String> {
    config
        .table
        .policy
        .routes()
        .into_iter()
        .filter_map(|name| config.table.route(name))
        .filter_map(|route| route.tier.known().map(|tier| (tier, route.model.clone())))
        .collect()
}

/// What judging one slice needs besides its own counts.
struct SliceContext<'a> {
    thresholds: Option<&'a crate::routes::Thresholds>,
    tier_thresholds: Option<&'a crate::routes::TierThresholds>,
    has_thresholds: bool,
    target: f64,
    at_calibration: &'a [Metrics],
    fresh_scores: &'a BTreeMap<String, Vec<f64>>,
    baseline_scores: Option<&'a BTreeMap<String, Vec<f64>>>,
}

impl SliceContext<'_> {
    /// Every slice of `now` judged, and the tests each ran (by the
    /// slice's position).
    fn judge_each(
        &self,
        now: &Evaluation,
        mut tier_drift: BTreeMap<String, Vec<String>>,
    ) -> (Vec<SliceDrift>, Vec<(usize, Test, f64)>) {
        let mut slices: Vec<SliceDrift> = Vec::new();
        let mut tests: Vec<(usize, Test, f64)> = Vec::new();
        for (metrics, counts) in now.slices.iter().zip(&now.counts) {
            let tier_drift = tier_drift.remove(&metrics.slice).unwrap_or_default();
            let (slice, slice_tests) = self.judge(metrics, counts, tier_drift);
            let index = slices.len();
            tests.extend(slice_tests.into_iter().map(|(test, p)| (index, test, p)));
            slices.push(slice);
        }
        (slices, tests)
    }

    /// A slice's drift before the run's tests are judged together, and
    /// those tests' p-values.
    fn judge(
        &self,
        metrics: &Metrics,
        counts: &crate::policy::Counts,
        tier_drift: Vec<String>,
    ) -> (SliceDrift, Vec<(Test, f64)>) {
        let (n, successes, escalated) = (counts.n, counts.successes, counts.escalated);
        let threshold = self
            .thresholds
            .and_then(|thresholds| thresholds.for_slice(&metrics.slice));
        let tier_threshold = self
            .tier_thresholds
            .and_then(|thresholds| thresholds.for_slice(&metrics.slice));
        let thresholded = threshold.is_some() || tier_threshold.is_some();
        let before = self
            .at_calibration
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
        let quality_p_value = binomial_cdf(n, self.target, successes);
        let score_shift = self.baseline_scores.and_then(|baseline| {
            let baseline = baseline.get(&metrics.slice)?;
            let current = self.fresh_scores.get(&metrics.slice)?;
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
        let mut reasons = tier_drift.clone();
        if !thresholded && self.has_thresholds {
            reasons.push("the deployed config has no threshold for this slice".to_owned());
        }
        // Facts, not tests: a model other than the pinned one, or no
        // threshold, needs a recalibration whatever the counts say.
        let verdict = if reasons.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Recalibrate
        };
        let mut tests = vec![(Test::Quality, quality_p_value)];
        if let Some((_, p)) = escalation_test {
            tests.push((Test::Escalation, p));
        }
        if let Some(shift) = &score_shift {
            tests.push((Test::Psi, shift.psi_p_value));
            tests.push((Test::Ks, shift.ks_p_value));
        }
        let slice = SliceDrift {
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
        };
        (slice, tests)
    }
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
