//! The anytime-valid monitor across scheduled runs (`drift --state`): each
//! run's rows counted once into the state, the change detectors' verdicts,
//! and the slices judged by them rather than by the run's own tests.

use std::path::Path;

use anyhow::{Context, bail};

use crate::policy::{evaluate_table, scores_of};
use crate::routes::RouteConfig;
use crate::schema::Metrics;

use crate::schema::{SequentialDrift, SequentialSlice, SliceDrift, Verdict};

use super::sequential::{DriftState, FamilySlice, RunCounts};

/// Counts recorded as rates (a config's provenance) are k / n in f64, from
/// which k is recovered exactly.
pub(super) fn count_of(rate: f64, n: u64) -> u64 {
    (rate * n as f64).round() as u64
}

/// This run's rows, as the monitor needs them.
pub(super) struct FreshRun<'a> {
    pub(super) results: (&'a Path, &'a str),
    pub(super) table: &'a crate::schema::GradedTable,
    pub(super) tiered: Option<&'a crate::policy::TieredRows>,
    /// The config on every row of the run.
    pub(super) now: &'a crate::policy::Evaluation,
    pub(super) confidence: f64,
}

/// The anytime-valid monitor's state after this run: the one at `path` (or
/// a new one for this config), with the counts of the run's rows it has not
/// counted before added, and their ids kept.
pub(super) fn monitor(
    path: &Path,
    run: &FreshRun<'_>,
    config: &RouteConfig,
    config_ref: &crate::schema::ConfigRef,
    (target, delta, has_thresholds): (f64, f64, bool),
    arl: f64,
    at_calibration: &[Metrics],
) -> anyhow::Result<(DriftState, RowsCounted)> {
    let reference = (
        config_ref.config_id.as_str(),
        config_ref.version,
        config_ref.sha256.as_str(),
    );
    // The calibration's slices, not its "*" (every slice at once).
    let family: Vec<FamilySlice> = at_calibration
        .iter()
        .filter(|before| before.slice != crate::schema::GLOBAL_SLICE)
        .map(|before| FamilySlice {
            slice: before.slice.clone(),
            escalation: has_thresholds
                .then(|| (count_of(before.escalation_rate, before.n), before.n)),
            quality: (before.n > 0).then(|| (count_of(before.quality, before.n), before.n)),
        })
        .collect();
    let (results, results_sha256) = run.results;
    let mut state = read_state(path, results, results_sha256, reference)?
        .unwrap_or_else(|| DriftState::new(reference, (target, delta, arl), &family));
    let ids: Vec<&str> = run
        .table
        .batches
        .iter()
        .flat_map(|batch| batch.id.iter().flatten())
        .collect();
    let new: Vec<bool> = ids.iter().map(|id| !state.seen.contains(id)).collect();
    let repeated = new.iter().filter(|new| !**new).count() as u64;
    let filtered;
    let evaluation = if repeated == 0 {
        run.now
    } else {
        let table = run.table.with_rows(&new);
        let tiered = run.tiered.map(|tiered| tiered.with_rows(&new));
        filtered = evaluate_table(
            &config.table,
            &table,
            &scores_of(&table),
            Some(run.confidence),
            tiered.as_ref(),
        );
        &filtered
    };
    let counts: Vec<(String, RunCounts)> = evaluation
        .slices
        .iter()
        .zip(&evaluation.counts)
        .map(|(metrics, counts)| {
            let run = RunCounts {
                n: counts.n,
                acceptable: counts.successes,
                escalated: counts.escalated,
            };
            (metrics.slice.clone(), run)
        })
        .collect();
    state.inputs.push(results_sha256.to_owned());
    state.seen.extend(ids.iter().copied());
    state.add_run(&counts);
    let counted = RowsCounted {
        counted: ids.len() as u64 - repeated,
        repeated,
    };
    Ok((state, counted))
}

/// How many of a run's rows the monitor counted, and how many it had
/// counted before.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowsCounted {
    counted: u64,
    repeated: u64,
}

/// The monitor's state at `path`, if there is one: a drift state of this
/// config that has not counted these results yet.
fn read_state(
    path: &Path,
    results: &Path,
    results_sha256: &str,
    (config_id, version, sha256): (&str, u64, &str),
) -> anyhow::Result<Option<DriftState>> {
    let Some(state) =
        crate::schema::read_state_document::<DriftState>(path, "a drift state", "--state")?
    else {
        return Ok(None);
    };
    if state.config_sha256 != sha256 {
        bail!(
            "{}: monitors {} version {} (sha256 {}), not --config's {config_id} version {version}; a new config starts a new --state",
            path.display(),
            state.config_id,
            state.config_version,
            state.config_sha256
        );
    }
    if let Some(run) = state.inputs.iter().position(|seen| seen == results_sha256) {
        bail!(
            "{}: already counted in {} (run {}); the monitor counts each results file once",
            results.display(),
            path.display(),
            run + 1
        );
    }
    Ok(Some(state))
}

impl DriftState {
    /// Writes the state to `path` (`--state`), as [`read_state`] reads it.
    /// The caller writes it after the run's document: a run whose document
    /// was not written is not counted, and its results can be given again.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        crate::atomic::write_bytes_atomically(path, text.as_bytes())
            .with_context(|| format!("{}: cannot write (--state)", path.display()))
    }
}

/// The monitor's alarms, as verdicts and reasons; and what it shows.
pub(super) fn judge_sequentially(
    slices: &mut [SliceDrift],
    path: &Path,
    state: &DriftState,
    counted: RowsCounted,
) -> SequentialDrift {
    let threshold = 1.0 / state.level;
    let mut left_out = Vec::new();
    for slice in slices.iter_mut() {
        let Some(monitored) = state.slices.iter().find(|each| each.slice == slice.slice) else {
            left_out.push(slice.slice.clone());
            continue;
        };
        if let Some(run) = monitored.quality_alarm_run {
            slice.verdict = Verdict::Recalibrate;
            slice.reasons.push(format!(
                "quality is below the target {} (anytime-valid: e-value {:.3e} ≥ {threshold:.0} since run {run}, over {} rows)",
                state.target,
                monitored.quality.e_value(),
                monitored.rows
            ));
        }
        if let Some(run) = monitored.quality_change_run {
            slice.verdict = Verdict::Recalibrate;
            slice.reasons.push(format!(
                "quality fell below what calibration measured (its interval's floor {:.4}; change detector past the average run length {} since run {run})",
                monitored.quality_floor.unwrap_or(f64::NAN),
                state.arl
            ));
        }
        if let Some(run) = monitored.escalation_change_run {
            slice.verdict = Verdict::Recalibrate;
            slice.reasons.push(format!(
                "the escalation rate moved from its calibration interval (change detector past the average run length {} since run {run})",
                state.arl
            ));
        }
        if let Some(run) = monitored.escalation_alarm_run {
            slice.verdict = Verdict::Recalibrate;
            slice.reasons.push(format!(
                "the escalation rate left its calibration interval (anytime-valid: e-value ≥ {threshold:.0} since run {run}, over {} rows)",
                monitored.rows
            ));
        }
    }
    SequentialDrift {
        state: path.display().to_string(),
        runs: state.runs,
        rows_counted: counted.counted,
        rows_repeated: counted.repeated,
        level: state.level,
        arl: state.arl,
        slices: state
            .slices
            .iter()
            .map(|slice| SequentialSlice {
                slice: slice.slice.clone(),
                rows: slice.rows,
                runs: slice.runs,
                quality_e_value: slice.quality.e_value(),
                escalation_e_value: slice.escalation_interval.map(|_| {
                    slice
                        .escalation_up
                        .e_value()
                        .max(slice.escalation_down.e_value())
                }),
                quality_alarm_run: slice.quality_alarm_run,
                escalation_alarm_run: slice.escalation_alarm_run,
                quality_change_statistic: slice
                    .quality_floor
                    .map(|_| slice.quality_change.statistic()),
                quality_change_run: slice.quality_change_run,
                escalation_change_statistic: slice
                    .escalation_interval
                    .map(|_| slice.escalation_change()),
                escalation_change_run: slice.escalation_change_run,
            })
            .collect(),
        left_out,
    }
}
