//! Runs a calibration: one pass over the file (hashed alongside), then each
//! slice's sweep and selection, spread over the machine's cores.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::schema::{ReadError, ReadOptions, for_each_graded_batch_parallel};
use crate::stats::{clopper_pearson_lower, min_rows_to_certify};

use super::error::CalibrateError;
use super::ingest::{Ingest, SliceData};
use super::options::CalibrateOptions;
use super::select::{Selection, frontier, select};
use crate::policy::{Candidate, Curve, thin};
use crate::policy::{Totals, to_usd};
use crate::schema::Guarantee;
use crate::schema::{
    AuditDraw, AuditSummary, Baselines, CALIBRATION_SCHEMA_VERSION, CalibrationDocument,
    FrontierPoint, HoldoutResult, InputFile, Point, SliceCalibration, Threshold,
};
use crate::units::Confidence;

/// Calibrates every slice of the two-tier graded results at `path`.
pub(super) fn calibrate_two_tiers(
    path: &Path,
    read: &ReadOptions,
    options: &CalibrateOptions,
) -> Result<CalibrationDocument, CalibrateError> {
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let audits = options
        .audits
        .as_deref()
        .map(|audits| super::audits::load_audits(audits, path, read))
        .transpose()?;
    let (read_result, sha256) = std::thread::scope(|scope| {
        let hashing = scope.spawn(|| crate::digest::sha256_file(path));
        let read_result = for_each_graded_batch_parallel(
            path,
            read,
            workers,
            || {
                Ingest::new(
                    options.policy,
                    options.scope,
                    options.holdout,
                    audits.as_ref(),
                )
            },
            Ingest::add,
        );
        let sha256 = hashing.join().expect("the hashing thread does not panic");
        (read_result, sha256)
    });
    let (summary, parts) = read_result?;
    let mut parts = parts.into_iter();
    let mut ingest = parts.next().expect("at least one part");
    for part in parts {
        ingest.merge(part);
    }
    let slices = ingest.finish();
    let sha256 = sha256.map_err(|error| ReadError::Io {
        path: error.path,
        source: error.source,
    })?;
    if let Some(empty) = slices
        .iter()
        .find(|slice| slice.calibration.totals.rows == 0)
    {
        return Err(CalibrateError::NothingToCalibrate {
            path: path.to_owned(),
            slice: empty.name.clone(),
            fraction: options.holdout.map_or(0.0, |holdout| holdout.fraction),
        });
    }
    let slice_confidence = slice_confidence(options, slices.len());
    let per_slice = CalibrateOptions {
        confidence: slice_confidence
            .map(|confidence| Confidence::new(confidence).expect("1 − δ / slices is a confidence")),
        ..options.clone()
    };
    let slices = in_parallel(slices, |slice| calibrate_slice(slice, &per_slice));
    Ok(document(
        path,
        sha256,
        summary.rows,
        read.names.score.clone(),
        options,
        slice_confidence,
        None,
        slices,
    ))
}

/// The confidence each of `slices` slices is certified at: a family-wise
/// guarantee spends δ across the slices (Bonferroni: the chance that any
/// slice misses is at most the sum of their chances).
pub(super) fn slice_confidence(options: &CalibrateOptions, slices: usize) -> Option<f64> {
    options.confidence_level().map(|confidence| {
        if options.familywise {
            1.0 - (1.0 - confidence) / slices as f64
        } else {
            confidence
        }
    })
}

/// The document around calibrated slices.
#[expect(
    clippy::too_many_arguments,
    reason = "one per field the calibrations differ in"
)]
pub(super) fn document(
    path: &Path,
    sha256: String,
    rows: u64,
    score_column: String,
    options: &CalibrateOptions,
    slice_confidence: Option<f64>,
    tiers: Option<Vec<String>>,
    slices: Vec<SliceCalibration>,
) -> CalibrationDocument {
    CalibrationDocument {
        schema_version: CALIBRATION_SCHEMA_VERSION,
        routeval_version: env!("CARGO_PKG_VERSION").to_owned(),
        results: InputFile {
            path: path.display().to_string(),
            sha256,
            rows,
        },
        policy: options.policy,
        score_column,
        target: options.target.get(),
        confidence: options.confidence_level(),
        guarantee: if options.familywise && options.confidence.is_some() {
            Guarantee::Familywise
        } else {
            Guarantee::PerSlice
        },
        slice_confidence,
        scope: options.scope,
        holdout: options.holdout,
        feasible: slices.iter().all(|slice| slice.feasible),
        tiers,
        slices,
    }
}

/// Maps `work` over `items` on every available core, keeping their order.
pub(super) fn in_parallel<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<R> {
    let count = items.len();
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(count);
    if workers <= 1 {
        return items.into_iter().map(work).collect();
    }
    let queue: Vec<Mutex<Option<T>>> = items
        .into_iter()
        .map(|item| Mutex::new(Some(item)))
        .collect();
    let results: Vec<Mutex<Option<R>>> = (0..count).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= count {
                        break;
                    }
                    let item = queue[index]
                        .lock()
                        .expect("unpoisoned")
                        .take()
                        .expect("taken once");
                    let result = work(item);
                    *results[index].lock().expect("unpoisoned") = Some(result);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|result| {
            result
                .into_inner()
                .expect("unpoisoned")
                .expect("every item ran")
        })
        .collect()
}

fn calibrate_slice(mut data: SliceData, options: &CalibrateOptions) -> SliceCalibration {
    let curve = Curve::sweep(&mut data.calibration);
    let rows = curve.rows;
    let selection = select(&curve, options.target.get(), options.confidence_level());
    let chosen = selection.chosen.map(|index| curve.candidates[index]);
    let baselines = baselines(&data.calibration.totals);
    let max_successes = curve
        .candidates
        .iter()
        .map(|candidate| candidate.successes)
        .max()
        .unwrap_or(0);
    let holdout = options.holdout.map(|_| {
        let held = &data.holdout;
        let n = held.totals.rows;
        match chosen {
            Some(chosen) if n > 0 => {
                let (escalated, successes, cost) = held.evaluate_at(chosen.threshold);
                HoldoutResult::measured(
                    n,
                    successes,
                    escalated,
                    to_usd(cost),
                    options.target.get(),
                    options.confidence_level(),
                )
            }
            _ => HoldoutResult::unmeasured(n),
        }
    });
    let full_frontier = frontier(&curve);
    let frontier_points = full_frontier.len() as u64;
    let frontier = thin(&full_frontier, options.frontier_points)
        .into_iter()
        .map(|index| {
            let candidate = &curve.candidates[index];
            FrontierPoint {
                threshold: Threshold(candidate.threshold),
                quality: candidate.quality(rows),
                mean_cost: candidate.mean_cost(rows),
                escalation_rate: candidate.escalation_rate(rows),
            }
        })
        .collect();
    let mean_cost = chosen.map(|chosen| chosen.mean_cost(rows));
    SliceCalibration {
        slice: data.name,
        n: rows,
        feasible: chosen.is_some(),
        reason: chosen
            .is_none()
            .then(|| infeasibility(&curve, &selection, max_successes, options)),
        threshold: chosen.map(|chosen| Threshold(chosen.threshold)),
        quality: chosen.map(|chosen| chosen.quality(rows)),
        quality_lower_bound: chosen
            .zip(options.confidence_level())
            .map(|(chosen, confidence)| {
                if selection.corrected {
                    curve.corrected(&chosen).lower_bound(1.0 - confidence)
                } else {
                    clopper_pearson_lower(chosen.successes, rows, 1.0 - confidence)
                }
            }),
        mean_cost,
        escalation_rate: chosen.map(|chosen| chosen.escalation_rate(rows)),
        savings_vs_always_large: mean_cost
            .filter(|_| baselines.always_large.mean_cost > 0.0)
            .map(|cost| 1.0 - cost / baselines.always_large.mean_cost),
        max_quality: max_successes as f64 / rows as f64,
        baselines,
        holdout,
        frontier_points,
        frontier,
        audit: audit_summary(&data.calibration, &curve, chosen.as_ref(), options),
        tiered: None,
    }
}

/// The grader against the humans on the slice's audited rows, and the
/// corrected quality at the chosen threshold; `None` without audits.
fn audit_summary(
    observations: &crate::policy::SliceObservations,
    curve: &Curve,
    chosen: Option<&Candidate>,
    options: &CalibrateOptions,
) -> Option<AuditSummary> {
    if curve.audited == 0 {
        return None;
    }
    let (mut agree, mut human_no, mut false_accept, mut human_yes, mut false_reject) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for row in &observations.rows {
        let Some((small, large)) = row.audit.verdicts() else {
            continue;
        };
        for (human, grader) in [(small, row.small_ok), (large, row.large_ok)] {
            agree += u64::from(human == grader);
            if human {
                human_yes += 1;
                false_reject += u64::from(!grader);
            } else {
                human_no += 1;
                false_accept += u64::from(grader);
            }
        }
    }
    let share = |part: u64, whole: u64| (whole > 0).then(|| part as f64 / whole as f64);
    let delta = 1.0 - options.confidence_level().unwrap_or(0.95);
    let corrected = chosen.map(|chosen| curve.corrected(chosen));
    Some(AuditSummary {
        rows: curve.audited,
        draw: if options.audits.is_some() {
            AuditDraw::Recorded
        } else {
            AuditDraw::Unrecorded
        },
        agreement: agree as f64 / (2 * curve.audited) as f64,
        grader_false_accept: share(false_accept, human_no),
        grader_false_reject: share(false_reject, human_yes),
        corrected_quality: corrected.map(|corrected| corrected.estimate()),
        corrected_lower_bound: corrected.map(|corrected| corrected.lower_bound(delta)),
        half_width: options.audit_width.get(),
        rows_for_half_width: corrected
            .and_then(|corrected| corrected.audited_rows_for(options.audit_width.get(), delta)),
    })
}

pub(super) fn baselines(totals: &Totals) -> Baselines {
    let rows = totals.rows as f64;
    let point = |successes: u64, cost: i128| Point {
        quality: successes as f64 / rows,
        mean_cost: to_usd(cost) / rows,
    };
    Baselines {
        always_small: point(totals.small_ok, totals.cost_small),
        always_large: point(totals.large_ok, totals.cost_large),
        oracle: point(totals.either_ok, totals.oracle_cost),
    }
}

/// Why no threshold was chosen, in words a reviewer can act on.
fn infeasibility(
    curve: &Curve,
    selection: &Selection,
    max_successes: u64,
    options: &CalibrateOptions,
) -> String {
    let rows = curve.rows;
    let target = options.target.get();
    let Some(confidence) = options.confidence_level() else {
        return format!(
            "the best reachable quality is {:.4}, below the target {target}",
            max_successes as f64 / rows as f64
        );
    };
    if selection.corrected {
        return if curve.audited < super::select::MIN_AUDITED_ROWS {
            format!(
                "{} audited rows are too few for the corrected bound (at least {}); audit more rows, or none",
                curve.audited,
                super::select::MIN_AUDITED_ROWS
            )
        } else {
            format!(
                "no threshold's corrected lower bound reaches {target} at confidence {confidence} (the grader's labels corrected by {} audited rows)",
                curve.audited
            )
        };
    }
    match selection.max_certifiable_failures {
        None => match min_rows_to_certify(target, 1.0 - confidence) {
            Some(needed) => format!(
                "{rows} rows cannot certify {target} at confidence {confidence}: \
                 even with no failures that takes {needed} rows"
            ),
            None => format!("a target of {target} cannot be certified from a sample"),
        },
        Some(limit) => {
            let all: &Candidate = curve.escalate_all();
            format!(
                "escalating every row still fails {} of {rows}, and at most {limit} failures \
                 certify {target} at confidence {confidence}",
                all.failures(rows)
            )
        }
    }
}
