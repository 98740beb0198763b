//! Calibration over k tiers: per slice, the cheapest assignment of
//! thresholds (k − 1 ordered ones on the router's score, or one per
//! non-final cascade stage) whose quality meets the target, found by the
//! policy kernel's search. With `--confidence` the choice is certified by
//! fixed-sequence testing at the full δ along an order found on a third of
//! the slice's rows ([`crate::policy::certify_fixed_sequence`]), or with
//! `--tier-test bonferroni` the search's candidates are one family, each
//! tested at δ / candidates (Learn then Test). Either way the chance that a
//! certified assignment truly misses the target is at most δ.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::policy::{
    Policy, SequenceCertificate, TieredCandidate, TieredSearch, TieredSlice,
    certify_fixed_sequence, certify_in_order, search_tiers, to_picodollars, to_usd,
};
use crate::schema::{
    GradedBatch, ReadError, ReadOptions, Tiers, for_each_graded_batch_parallel, tiered_columns,
};
use crate::stats::{clopper_pearson_lower, max_certifiable_failures, min_rows_to_certify};

use super::engine::{document, in_parallel, slice_confidence};
use super::error::CalibrateError;
use super::options::CalibrateOptions;
use crate::policy::thin;
use crate::schema::Scope;
use crate::schema::{
    Baselines, CalibrationDocument, HoldoutResult, Point, SliceCalibration, Threshold,
    TierCertification, TierTest, TieredChoice, TieredPoint,
};
use crate::schema::{ColumnNames, GLOBAL_SLICE};

/// Default cut values per threshold: exact below this many distinct
/// scores, a quantile grid above.
pub const DEFAULT_GRID: usize = 256;

/// One slice's rows, calibration and held out.
#[derive(Debug, Clone)]
struct SliceRows {
    name: String,
    calibration: TieredSlice,
    holdout: TieredSlice,
}

/// What one reading worker collected.
#[derive(Debug, Default)]
struct Part {
    slices: Vec<SliceRows>,
    index: HashMap<String, usize>,
    error: Option<ReadError>,
}

/// Folds batches of graded rows into each worker's slices.
struct Fold<'a> {
    path: &'a Path,
    tiers: &'a Tiers,
    cascade: bool,
    options: &'a CalibrateOptions,
}

impl Fold<'_> {
    fn batch(&self, part: &mut Part, batch: &GradedBatch) {
        if part.error.is_some() {
            return;
        }
        if batch.audited.iter().any(Option::is_some) {
            part.error = Some(ReadError::InvalidValue {
                path: self.path.to_owned(),
                location: batch.location(0),
                column: "audited_ok_*".to_owned(),
                problem: "human audits correct two-tier calibrations only; calibrate more tiers without the audited columns".to_owned(),
            });
            return;
        }
        let columns = match tiered_columns(batch, self.tiers, self.cascade, self.path) {
            Ok(columns) => columns,
            Err(error) => {
                part.error = Some(error);
                return;
            }
        };
        let k = self.tiers.len();
        let policy = self.options.policy;
        let (mut scores, mut ok, mut cost, mut verifier) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for row in 0..batch.num_rows() {
            let name = match self.options.scope {
                Scope::PerSlice => batch.slice.value(row),
                Scope::Global => GLOBAL_SLICE,
            };
            let slice = match part.index.get(name) {
                Some(&slice) => slice,
                None => {
                    part.index.insert(name.to_owned(), part.slices.len());
                    part.slices.push(SliceRows {
                        name: name.to_owned(),
                        calibration: TieredSlice::new(policy, k),
                        holdout: TieredSlice::new(policy, k),
                    });
                    part.slices.len() - 1
                }
            };
            scores.clear();
            scores.extend(columns.scores.iter().map(|column| column.value(row)));
            ok.clear();
            ok.extend(columns.ok.iter().map(|column| column.value(row)));
            cost.clear();
            cost.extend(
                columns
                    .cost
                    .iter()
                    .map(|column| to_picodollars(column.value(row))),
            );
            verifier.clear();
            if self.cascade {
                verifier.extend(
                    columns
                        .verifier_cost
                        .iter()
                        .map(|column| to_picodollars(column.value(row))),
                );
            } else {
                verifier.resize(k - 1, 0);
            }
            let held_out = self
                .options
                .holdout
                .is_some_and(|holdout| holdout.holds_out(batch.id.value(row)));
            let rows = &mut part.slices[slice];
            let target = if held_out {
                &mut rows.holdout
            } else {
                &mut rows.calibration
            };
            target.push(
                &scores,
                &ok,
                &cost,
                to_picodollars(batch.cost_router.value(row)),
                &verifier,
            );
        }
    }
}

/// The workers' slices as one, by name; the first error a worker met.
fn merge(parts: Vec<Part>) -> Result<Vec<SliceRows>, ReadError> {
    let mut merged: Vec<SliceRows> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for part in parts {
        if let Some(error) = part.error {
            return Err(error);
        }
        for rows in part.slices {
            match index.get(&rows.name) {
                Some(&at) => {
                    merged[at].calibration.absorb(rows.calibration);
                    merged[at].holdout.absorb(rows.holdout);
                }
                None => {
                    index.insert(rows.name.clone(), merged.len());
                    merged.push(rows);
                }
            }
        }
    }
    merged.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(merged)
}

/// Calibrates every slice of the k-tier graded results at `path`.
pub(super) fn calibrate_tiered(
    path: &Path,
    names: ColumnNames,
    tiers: &Tiers,
    grid: usize,
    options: &CalibrateOptions,
) -> Result<CalibrationDocument, CalibrateError> {
    let policy = options.policy;
    let cascade = policy == Policy::Cascade;
    let read = ReadOptions {
        names: tiers.column_names(names),
        carry_extra: true,
        details: true,
        score_optional: cascade,
        carry_read_only: true,
    };
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let fold = Fold {
        path,
        tiers,
        cascade,
        options,
    };
    let (read_result, sha256) = std::thread::scope(|scope| {
        let hashing = scope.spawn(|| crate::digest::sha256_file(path));
        let result =
            for_each_graded_batch_parallel(path, &read, workers, Part::default, |part, batch| {
                fold.batch(part, batch);
            });
        (
            result,
            hashing.join().expect("the hashing thread does not panic"),
        )
    });
    let (summary, parts) = read_result?;
    let merged = merge(parts)?;
    let sha256 = sha256.map_err(|error| ReadError::Io {
        path: error.path,
        source: error.source,
    })?;
    if let Some(empty) = merged.iter().find(|rows| rows.calibration.rows() == 0) {
        return Err(CalibrateError::NothingToCalibrate {
            path: PathBuf::from(path),
            slice: empty.name.clone(),
            fraction: options.holdout.map_or(0.0, |holdout| holdout.fraction),
        });
    }
    let slice_confidence = slice_confidence(options, merged.len());
    let orders = earlier_orders(options, tiers, &sha256)?;
    let slices = in_parallel(merged, |rows| {
        let order = orders
            .as_ref()
            .map(|(source, orders)| (source.as_str(), orders.get(&rows.name)));
        calibrate_slice(rows, policy, grid, slice_confidence, options, order)
    });
    let score_column = if cascade {
        tiers.stage_columns(0).0
    } else {
        read.names.score.clone()
    };
    Ok(document(
        path,
        sha256,
        summary.rows,
        score_column,
        options,
        slice_confidence,
        Some(tiers.names().to_vec()),
        slices,
    ))
}

/// Which candidates of a slice of `n` rows may be chosen, given their
/// successes and the size of the family searched: quality at least
/// `target`; with a confidence, certified by the exact binomial test at
/// δ / family (Bonferroni over the candidates).
pub fn acceptable(n: u64, target: f64, confidence: Option<f64>) -> impl Fn(u64, u64) -> bool {
    move |successes, family| match confidence {
        None => successes as f64 / n as f64 >= target,
        Some(confidence) => {
            max_certifiable_failures(n, 1.0 - target, (1.0 - confidence) / family as f64)
                .is_some_and(|limit| n - successes <= limit)
        }
    }
}

/// Each slice's order from `--order-from`: the earlier calibration's
/// frontier, best quality first, and the order's source as the document
/// records it (`calibration:SHA256`).
type EarlierOrders = (String, HashMap<String, Vec<Vec<f64>>>);

fn earlier_orders(
    options: &CalibrateOptions,
    tiers: &Tiers,
    results_sha256: &str,
) -> Result<Option<EarlierOrders>, CalibrateError> {
    let Some(path) = &options.order_from else {
        return Ok(None);
    };
    let refuse = |problem: String| CalibrateError::OrderFrom {
        path: path.clone(),
        problem,
    };
    let text =
        std::fs::read_to_string(path).map_err(|error| refuse(format!("cannot read: {error}")))?;
    let earlier: CalibrationDocument = serde_json::from_str(&text)
        .map_err(|error| refuse(format!("not a calibration document: {error}")))?;
    if earlier.tiers.as_deref() != Some(tiers.names()) || earlier.policy != options.policy {
        return Err(refuse(format!(
            "calibrates {:?} over tiers {:?}, not {:?} over {:?}",
            earlier.policy,
            earlier.tiers.unwrap_or_default(),
            options.policy,
            tiers.names()
        )));
    }
    if earlier.results.sha256 == results_sha256 {
        return Err(refuse(
            "calibrated on these very results; an order must be fixed before the rows that test it"
                .to_owned(),
        ));
    }
    let orders = earlier
        .slices
        .iter()
        .filter_map(|slice| {
            let tiered = slice.tiered.as_ref()?;
            let order: Vec<Vec<f64>> = tiered
                .frontier
                .iter()
                .rev()
                .map(|point| {
                    point
                        .thresholds
                        .iter()
                        .map(|threshold| threshold.0)
                        .collect()
                })
                .collect();
            (!order.is_empty()).then(|| (slice.slice.clone(), order))
        })
        .collect();
    let sha256 = crate::digest::sha256_hex(text.as_bytes());
    Ok(Some((format!("calibration:{sha256}"), orders)))
}

/// A slice's search, and with a confidence its certified choice and how it
/// was certified.
struct Choice {
    search: TieredSearch,
    /// Fixed sequence; `None` for a plain fit or Bonferroni, whose choice is
    /// the search's.
    sequence: Option<SequenceCertificate>,
    certification: Option<TierCertification>,
}

/// Searches `slice`, and with a confidence certifies by the test
/// `options.tier_test` names, along `earlier`'s order where it has one for
/// the slice (else the split).
fn choose(
    slice: &TieredSlice,
    policy: Policy,
    grid: usize,
    confidence: Option<f64>,
    options: &CalibrateOptions,
    earlier: Option<(&str, Option<&Vec<Vec<f64>>>)>,
) -> Choice {
    let n = slice.rows() as u64;
    let target = options.target.get();
    let bonferroni = options.tier_test == TierTest::Bonferroni;
    // Fixed sequence certifies apart from the search, which then only
    // finds the frontier (and the plain fit, without a confidence).
    let search: TieredSearch = match confidence {
        Some(_) if !bonferroni => search_tiers(slice, policy, grid, |_, _| false),
        _ => search_tiers(slice, policy, grid, acceptable(n, target, confidence)),
    };
    let Some(confidence) = confidence else {
        return Choice {
            search,
            sequence: None,
            certification: None,
        };
    };
    let delta = 1.0 - confidence;
    if bonferroni {
        let certification = TierCertification {
            test: TierTest::Bonferroni,
            order: None,
            order_rows: 0,
            test_rows: n,
            tested: search.candidates,
            level: delta / search.candidates as f64,
        };
        return Choice {
            search,
            sequence: None,
            certification: Some(certification),
        };
    }
    let (sequence, order) = match earlier {
        Some((source, Some(order))) => (
            certify_in_order(slice, policy, order, target, delta),
            source.to_owned(),
        ),
        _ => (
            certify_fixed_sequence(slice, policy, grid, target, delta),
            "split".to_owned(),
        ),
    };
    let certification = TierCertification {
        test: TierTest::FixedSequence,
        order: Some(order),
        order_rows: sequence.order_rows,
        test_rows: sequence.test_rows,
        tested: sequence.tested,
        level: delta,
    };
    Choice {
        search,
        sequence: Some(sequence),
        certification: Some(certification),
    }
}

fn calibrate_slice(
    rows: SliceRows,
    policy: Policy,
    grid: usize,
    confidence: Option<f64>,
    options: &CalibrateOptions,
    earlier: Option<(&str, Option<&Vec<Vec<f64>>>)>,
) -> SliceCalibration {
    let slice = &rows.calibration;
    let n = slice.rows() as u64;
    let target = options.target.get();
    let Choice {
        search,
        sequence,
        certification,
    } = choose(slice, policy, grid, confidence, options, earlier);
    let share = |count: u64| count as f64 / n as f64;
    let mean = |cost: i128| to_usd(cost) / n as f64;
    let k = slice.tiers();
    let baselines = tier_baselines(slice);
    let chosen = match &sequence {
        Some(sequence) => sequence.chosen.as_ref(),
        None => search.chosen.as_ref(),
    };
    let point = |candidate: &TieredCandidate| TieredPoint {
        thresholds: candidate
            .thresholds
            .iter()
            .map(|&threshold| Threshold(threshold))
            .collect(),
        quality: share(candidate.successes),
        mean_cost: mean(candidate.cost),
        served: candidate.served.iter().map(|&count| share(count)).collect(),
    };
    let holdout = held_out(&rows.holdout, chosen, policy, options);
    let frontier: Vec<TieredPoint> = thin(&search.frontier, options.frontier_points)
        .iter()
        .map(point)
        .collect();
    let mean_cost = chosen.map(|chosen| mean(chosen.cost));
    let reason = chosen
        .is_none()
        .then(|| infeasible_reason(&search, sequence.as_ref(), n, target, confidence));
    SliceCalibration {
        slice: rows.name,
        n,
        feasible: chosen.is_some(),
        reason,
        threshold: None,
        quality: chosen.map(|chosen| share(chosen.successes)),
        quality_lower_bound: match &sequence {
            Some(sequence) => sequence.lower_bound,
            None => chosen.zip(confidence).map(|(chosen, confidence)| {
                clopper_pearson_lower(
                    chosen.successes,
                    n,
                    (1.0 - confidence) / search.candidates as f64,
                )
            }),
        },
        mean_cost,
        escalation_rate: chosen.map(|chosen| share(n - chosen.served[0])),
        savings_vs_always_large: mean_cost
            .filter(|_| baselines.always_large.mean_cost > 0.0)
            .map(|cost| 1.0 - cost / baselines.always_large.mean_cost),
        max_quality: share(search.best_quality.successes),
        baselines,
        holdout,
        frontier_points: search.frontier.len() as u64,
        frontier: Vec::new(),
        audit: None,
        tiered: Some(TieredChoice {
            thresholds: chosen
                .map(|chosen| {
                    chosen
                        .thresholds
                        .iter()
                        .map(|&threshold| Threshold(threshold))
                        .collect()
                })
                .unwrap_or_default(),
            served: chosen
                .map(|chosen| chosen.served.iter().map(|&count| share(count)).collect())
                .unwrap_or_else(|| vec![0.0; k]),
            false_accept_rate: chosen
                .filter(|_| policy == Policy::Cascade)
                .map(|chosen| share(chosen.false_accepts)),
            candidates: search.candidates,
            grid: search.grid.clone(),
            exact: search.exact,
            frontier,
            certification,
        }),
    }
}

/// With a holdout, the chosen assignment's outcome on the held-out rows.
fn held_out(
    held: &TieredSlice,
    chosen: Option<&TieredCandidate>,
    policy: Policy,
    options: &CalibrateOptions,
) -> Option<HoldoutResult> {
    options.holdout.map(|_| {
        let held_n = held.rows() as u64;
        match chosen {
            Some(chosen) if held_n > 0 => {
                let served = held.serve_all(policy, &chosen.thresholds);
                HoldoutResult::measured(
                    held_n,
                    served.successes,
                    held_n - served.served[0],
                    to_usd(served.cost),
                    options.target.get(),
                    options.confidence_level(),
                )
            }
            _ => HoldoutResult::unmeasured(held_n),
        }
    })
}

/// Why no assignment was chosen for a slice of `n` rows.
fn infeasible_reason(
    search: &TieredSearch,
    sequence: Option<&SequenceCertificate>,
    n: u64,
    target: f64,
    confidence: Option<f64>,
) -> String {
    let best = search.best_quality.successes as f64 / n as f64;
    let Some(confidence) = confidence else {
        return format!("no assignment of thresholds reaches {target}; the best reaches {best:.4}");
    };
    let delta = 1.0 - confidence;
    let (rows, level, family) = match sequence {
        Some(sequence) => (
            sequence.test_rows,
            delta,
            "each tested at the full level along an order found on every third row".to_owned(),
        ),
        None => (
            n,
            delta / search.candidates as f64,
            format!("over {} candidate assignments", search.candidates),
        ),
    };
    if max_certifiable_failures(rows, 1.0 - target, level).is_none() {
        return format!(
            "{rows} test rows cannot certify {target} at confidence {confidence} {family} (a flawless slice needs {})",
            min_rows_to_certify(target, level)
                .map_or_else(|| "more".to_owned(), |rows| rows.to_string())
        );
    }
    format!(
        "no assignment of thresholds is certified to reach {target} at confidence {confidence} {family} (the best reaches {best:.4} on these rows)"
    )
}

/// The first tier alone, the last tier alone, and the oracle that sends
/// each row to the cheapest tier that answers it acceptably (the first tier
/// when none does), at no router cost.
fn tier_baselines(slice: &TieredSlice) -> Baselines {
    let n = slice.rows() as f64;
    let k = slice.tiers();
    let (mut first, mut last, mut oracle) = ((0u64, 0i128), (0u64, 0i128), (0u64, 0i128));
    for row in 0..slice.rows() {
        let (_, ok, cost, _, _) = slice.row(row);
        first.0 += u64::from(ok[0]);
        first.1 += i128::from(cost[0]);
        last.0 += u64::from(ok[k - 1]);
        last.1 += i128::from(cost[k - 1]);
        let tier = (0..k).find(|&tier| ok[tier]).unwrap_or(0);
        oracle.0 += u64::from(ok[tier]);
        oracle.1 += i128::from(cost[tier]);
    }
    let point = |(successes, cost): (u64, i128)| Point {
        quality: successes as f64 / n,
        mean_cost: to_usd(cost) / n,
    };
    Baselines {
        always_small: point(first),
        always_large: point(last),
        oracle: point(oracle),
    }
}
