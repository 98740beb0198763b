//! Scores one resolved route table on graded results, per slice and overall:
//! what each request would have cost, whether its answer was acceptable, and
//! how long its first token took.

use std::collections::BTreeMap;

use arrow::array::{Array, Float64Array};

use std::path::Path;

use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::Float64Type;

use crate::policy::{
    Counts, GradedRow, Latencies, Policy, Tally, TierLatency, TieredOutcomes, TieredSlice,
    first_token_alone_ms, first_token_ms, first_token_tier_ms, serve_at, serve_row,
    serve_row_alone, to_picodollars,
};
use crate::routes::{ResolvedPolicy, ResolvedTable, RouteTier, Tier, TierThresholds};
use crate::schema::Metrics;
use crate::schema::{
    GradedBatch, GradedTable, ReadError, ReadOptions, TieredColumns, Tiers, read_graded,
    tiered_columns,
};

/// A table's metrics, and the slices its policy has no threshold for.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub slices: Vec<Metrics>,
    /// The integer counts behind each of `slices`, in the same order.
    pub counts: Vec<Counts>,
    /// Each slice's rows in file order: whether the served answer was
    /// acceptable, and its picodollars. Two tables scored on the same
    /// results pair up row by row.
    pub outcomes: Vec<Vec<(bool, i64)>>,
    pub overall: Metrics,
    pub slices_without_threshold: Vec<String>,
}

fn value(array: Option<&Float64Array>, index: usize) -> Option<f64> {
    array
        .filter(|array| array.is_valid(index))
        .map(|array| array.value(index))
}

/// Row `index`'s latencies; the columns are in `Column::LATENCIES` order:
/// small, small ttft, large, large ttft, verifier, router.
fn latencies(batch: &GradedBatch, index: usize) -> Latencies {
    let at = |position: usize| value(batch.latencies[position].as_ref(), index);
    Latencies {
        small_total: at(0),
        small_first_token: at(1),
        large_first_token: at(3),
        verifier: at(4),
        router: at(5),
    }
}

/// The table's scores in row order.
pub fn scores_of(graded: &GradedTable) -> Vec<f64> {
    graded
        .batches
        .iter()
        .flat_map(|batch| batch.score.values().iter().copied())
        .collect()
}

/// A k-tier table's rows in file order, read for its tiers: each row's
/// scores, tiers' outcomes and costs, and the latencies the results record
/// (the first and last tiers' in the two-tier places, the others'
/// `NAME_ms` and `NAME_ttft_ms`).
#[derive(Debug, Clone)]
pub struct TieredRows {
    pub outcomes: TieredSlice,
    /// Per row, per tier: first token and total, where both are recorded.
    latencies: Vec<Option<TierLatency>>,
    verifier_ms: Vec<Option<f64>>,
    router_ms: Vec<Option<f64>>,
    /// The model versions the results record for the tiers between the
    /// first and the last (`NAME_model`), with row counts.
    pub models: BTreeMap<RouteTier, BTreeMap<String, u64>>,
}

impl TieredRows {
    /// The rows `keep` marks (one flag a row, in row order). The model
    /// counts stay the whole file's.
    pub fn with_rows(&self, keep: &[bool]) -> TieredRows {
        let k = self.outcomes.tiers();
        let mut kept = TieredRows {
            outcomes: self.outcomes.empty_like(),
            latencies: Vec::new(),
            verifier_ms: Vec::new(),
            router_ms: Vec::new(),
            models: self.models.clone(),
        };
        for row in (0..self.outcomes.rows()).filter(|&row| keep[row]) {
            let (scores, ok, cost, router, verifier) = self.outcomes.row(row);
            kept.outcomes.push(scores, ok, cost, router, verifier);
            kept.latencies
                .extend_from_slice(&self.latencies[row * k..(row + 1) * k]);
            kept.verifier_ms.push(self.verifier_ms[row]);
            kept.router_ms.push(self.router_ms[row]);
        }
        kept
    }

    /// Row `row`'s time to the first token when served at `tier`, where
    /// the results record every latency on that path: the kernel's algebra,
    /// with the stages after `tier` never reached.
    fn first_token_ms(&self, policy: Policy, row: usize, tier: usize) -> Option<f64> {
        let k = self.outcomes.tiers();
        let recorded = &self.latencies[row * k..(row + 1) * k];
        let unreached = TierLatency {
            first_token: 0.0,
            total: 0.0,
        };
        let waited = |stage: usize| match policy {
            Policy::Predictive => stage == tier,
            Policy::Cascade => stage <= tier,
        };
        let path: Option<Vec<TierLatency>> = recorded
            .iter()
            .enumerate()
            .map(|(stage, latency)| {
                if waited(stage) {
                    *latency
                } else {
                    Some(unreached)
                }
            })
            .collect();
        let (verifier, router) = match policy {
            Policy::Predictive => (0.0, self.router_ms[row].unwrap_or(0.0)),
            Policy::Cascade => (self.verifier_ms[row]?, 0.0),
        };
        Some(first_token_tier_ms(policy, &path?, verifier, router, tier))
    }
}

pub fn tiered_rows(
    path: &Path,
    read: &ReadOptions,
    table: &ResolvedTable,
) -> Result<Option<TieredRows>, ReadError> {
    let Some(routes) = table.policy.tier_routes() else {
        return Ok(None);
    };
    let names: Vec<&str> = routes
        .iter()
        .filter_map(|name| table.route(name))
        .map(|route| route.tier.name())
        .collect();
    let tiers = Tiers::parse(&names.join(",")).map_err(|problem| ReadError::MissingColumn {
        path: path.to_owned(),
        column: names.join(","),
        hint: format!(" ({problem})"),
    })?;
    let cascade = matches!(table.policy, ResolvedPolicy::CascadeStages { .. });
    let policy = if cascade {
        Policy::Cascade
    } else {
        Policy::Predictive
    };
    let mut names = tiers.column_names(read.names.clone());
    if let Some(score) = table.policy.score() {
        names.score = score.to_owned();
    }
    let read = ReadOptions {
        names,
        carry_extra: true,
        details: true,
        score_optional: cascade,
        carry_read_only: true,
    };
    let graded = read_graded(path, &read)?;
    let k = tiers.len();
    let mut rows = TieredRows {
        outcomes: TieredSlice::new(policy, k),
        latencies: Vec::new(),
        verifier_ms: Vec::new(),
        router_ms: Vec::new(),
        models: BTreeMap::new(),
    };
    for batch in &graded.batches {
        let columns = tiered_columns(batch, &tiers, cascade, path)?;
        let carried = |name: String| {
            batch
                .extra
                .iter()
                .find(|(field, _)| *field.name() == name)
                .and_then(|(_, array)| {
                    arrow::compute::cast(array, &arrow::datatypes::DataType::Float64).ok()
                })
        };
        count_middle_models(batch, &tiers, &mut rows.models);
        let middle: Vec<(Option<ArrayRef>, Option<ArrayRef>)> = tiers.names()[1..k - 1]
            .iter()
            .map(|name| {
                (
                    carried(format!("{name}_ttft_ms")),
                    carried(format!("{name}_ms")),
                )
            })
            .collect();
        let at = |array: &Option<ArrayRef>, index: usize| {
            array
                .as_ref()
                .map(AsArray::as_primitive::<Float64Type>)
                .filter(|array| array.is_valid(index))
                .map(|array| array.value(index))
                .filter(|value| value.is_finite() && *value >= 0.0)
        };
        for index in 0..batch.num_rows() {
            push_outcome(&mut rows.outcomes, &columns, batch, index, cascade);
            let recorded = latencies(batch, index);
            let pair = |first_token: Option<f64>, total: Option<f64>| {
                first_token
                    .zip(total)
                    .map(|(first_token, total)| TierLatency { first_token, total })
            };
            rows.latencies
                .push(pair(recorded.small_first_token, recorded.small_total));
            for (first_token, total) in &middle {
                rows.latencies
                    .push(pair(at(first_token, index), at(total, index)));
            }
            let large_total = value(batch.latencies[2].as_ref(), index);
            rows.latencies.push(pair(
                recorded.large_first_token,
                large_total.or(recorded.large_first_token),
            ));
            rows.verifier_ms.push(recorded.verifier);
            rows.router_ms.push(recorded.router);
        }
    }
    Ok(Some(rows))
}

/// Counts the models each middle tier's answers name, from its
/// `<tier>_model` column where the batch carries one.
fn count_middle_models(
    batch: &GradedBatch,
    tiers: &Tiers,
    models: &mut BTreeMap<RouteTier, BTreeMap<String, u64>>,
) {
    let k = tiers.len();
    for name in &tiers.names()[1..k - 1] {
        let column = format!("{name}_model");
        let Some((_, array)) = batch
            .extra
            .iter()
            .find(|(field, _)| *field.name() == column)
        else {
            continue;
        };
        let Ok(text) = arrow::compute::cast(array, &arrow::datatypes::DataType::Utf8) else {
            continue;
        };
        let counts = models.entry(RouteTier::new(name.clone())).or_default();
        for model in text.as_string::<i32>().iter().flatten() {
            *counts.entry(model.to_owned()).or_default() += 1;
        }
    }
}

/// Row `index`'s outcome at every tier: its scores, verdicts and costs.
fn push_outcome(
    outcomes: &mut TieredSlice,
    columns: &TieredColumns,
    batch: &GradedBatch,
    index: usize,
    cascade: bool,
) {
    let k = columns.ok.len();
    let price = |column: &Float64Array, index: usize| to_picodollars(column.value(index));
    let scores: Vec<f64> = columns
        .scores
        .iter()
        .map(|column| column.value(index))
        .collect();
    let ok: Vec<bool> = columns
        .ok
        .iter()
        .map(|column| column.value(index))
        .collect();
    let cost: Vec<i64> = columns
        .cost
        .iter()
        .map(|column| price(column, index))
        .collect();
    let verifier: Vec<i64> = if cascade {
        columns
            .verifier_cost
            .iter()
            .map(|column| price(column, index))
            .collect()
    } else {
        vec![0; k - 1]
    };
    outcomes.push(
        &scores,
        &ok,
        &cost,
        price(&batch.cost_router, index),
        &verifier,
    );
}

/// `table` on the results, with `scores` (in row order, from the policy's
/// score column) deciding escalations; a k-tier table takes its rows from
/// `tiered` ([`tiered_rows`]).
pub fn evaluate_table(
    table: &ResolvedTable,
    graded: &GradedTable,
    scores: &[f64],
    confidence: Option<f64>,
    tiered: Option<&TieredRows>,
) -> Evaluation {
    if let (Some(thresholds), Some(rows)) = (table.policy.tier_thresholds(), tiered) {
        return evaluate_tiers(table, graded, thresholds, rows, confidence);
    }
    let tier_of = |name: &str| {
        table
            .route(name)
            .and_then(|route| route.tier.known())
            .unwrap_or(Tier::Small)
    };
    let mut per_slice: BTreeMap<String, (Tally, Vec<(bool, i64)>)> = BTreeMap::new();
    let mut without_threshold: Vec<String> = Vec::new();
    let mut scores = scores.iter().copied();
    for batch in &graded.batches {
        for index in 0..batch.num_rows() {
            let score = scores.next().expect("a score per row");
            let slice = batch.slice.value(index);
            let (tally, outcomes) = match per_slice.get_mut(slice) {
                Some(entry) => entry,
                None => per_slice.entry(slice.to_owned()).or_default(),
            };
            let row = GradedRow {
                score,
                ..GradedRow::from_batch(batch, index)
            };
            let latencies = latencies(batch, index);
            let (policy, thresholds) = match &table.policy {
                ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => {
                    let large = tier_of(table.policy.routes_for(slice)[0]) == Tier::Large;
                    let served = serve_row_alone(&row, large);
                    outcomes.push((served.ok, served.cost));
                    tally.add(served, false, first_token_alone_ms(&latencies, large));
                    continue;
                }
                ResolvedPolicy::Predictive { thresholds, .. } => (Policy::Predictive, thresholds),
                ResolvedPolicy::Cascade { thresholds, .. } => (Policy::Cascade, thresholds),
                ResolvedPolicy::PredictiveTiers { .. } | ResolvedPolicy::CascadeStages { .. } => {
                    unreachable!("a k-tier table is scored with its tiered rows")
                }
            };
            let threshold = thresholds.for_slice(slice);
            if threshold.is_none() && !without_threshold.iter().any(|known| known == slice) {
                without_threshold.push(slice.to_owned());
            }
            let escalate = threshold.is_some_and(|threshold| threshold.escalates(score));
            let served = serve_row(policy, &row, escalate);
            outcomes.push((served.ok, served.cost));
            tally.add(
                served,
                escalate,
                first_token_ms(policy, &latencies, escalate),
            );
        }
    }
    let cascade = matches!(table.policy, ResolvedPolicy::Cascade { .. });
    finish(per_slice, without_threshold, cascade, confidence, None)
}

/// The per-slice tallies as an [`Evaluation`]; with `tiers`, every slice
/// reports a share for each of them, also where one served nobody.
fn finish(
    mut per_slice: BTreeMap<String, (Tally, Vec<(bool, i64)>)>,
    mut without_threshold: Vec<String>,
    cascade: bool,
    confidence: Option<f64>,
    tiers: Option<usize>,
) -> Evaluation {
    let mut all = Tally::default();
    if let Some(tiers) = tiers {
        all.served.resize(tiers, 0);
        for (tally, _) in per_slice.values_mut() {
            tally.served.resize(tiers, 0);
        }
    }
    for (tally, _) in per_slice.values() {
        all.absorb(tally);
    }
    without_threshold.sort();
    Evaluation {
        counts: per_slice
            .values()
            .map(|(tally, _)| tally.counts())
            .collect(),
        outcomes: per_slice
            .values_mut()
            .map(|(_, outcomes)| std::mem::take(outcomes))
            .collect(),
        slices: per_slice
            .into_iter()
            .map(|(slice, (tally, _))| tally.metrics(slice, cascade, confidence))
            .collect(),
        overall: all.metrics("*".to_owned(), cascade, confidence),
        slices_without_threshold: without_threshold,
    }
}

/// A k-tier table: each row served at the tier its thresholds choose.
fn evaluate_tiers(
    table: &ResolvedTable,
    graded: &GradedTable,
    thresholds: &TierThresholds,
    rows: &TieredRows,
    confidence: Option<f64>,
) -> Evaluation {
    let cascade = matches!(table.policy, ResolvedPolicy::CascadeStages { .. });
    let policy = if cascade {
        Policy::Cascade
    } else {
        Policy::Predictive
    };
    let mut per_slice: BTreeMap<String, (Tally, Vec<(bool, i64)>)> = BTreeMap::new();
    let mut without_threshold: Vec<String> = Vec::new();
    let mut row = 0;
    for batch in &graded.batches {
        for index in 0..batch.num_rows() {
            let slice = batch.slice.value(index);
            let (tally, outcomes) = match per_slice.get_mut(slice) {
                Some(entry) => entry,
                None => per_slice.entry(slice.to_owned()).or_default(),
            };
            let (scores, ok, cost, router, verifier) = rows.outcomes.row(row);
            let chosen = thresholds.for_slice(slice);
            if chosen.is_none() && !without_threshold.iter().any(|known| known == slice) {
                without_threshold.push(slice.to_owned());
            }
            let values: Vec<f64> = chosen
                .map(|chosen| chosen.iter().map(|threshold| threshold.0).collect())
                .unwrap_or_else(|| vec![f64::INFINITY; ok.len() - 1]);
            let (tier, served) = serve_at(
                policy,
                scores,
                &values,
                &TieredOutcomes {
                    ok,
                    cost,
                    router,
                    verifier,
                },
            );
            outcomes.push((served.ok, served.cost));
            tally.add_at(served, tier, rows.first_token_ms(policy, row, tier));
            row += 1;
        }
    }
    finish(
        per_slice,
        without_threshold,
        cascade,
        confidence,
        Some(rows.outcomes.tiers()),
    )
}

/// The model versions the results record for each tier, with row counts.
pub fn recorded_models(graded: &GradedTable) -> BTreeMap<RouteTier, BTreeMap<String, u64>> {
    let mut recorded: BTreeMap<RouteTier, BTreeMap<String, u64>> = BTreeMap::new();
    for (position, tier) in [Tier::Small, Tier::Large, Tier::Verifier]
        .into_iter()
        .enumerate()
    {
        if !graded.present.models[position] {
            continue;
        }
        let counts = recorded.entry(tier.into()).or_default();
        for batch in &graded.batches {
            let Some(models) = &batch.models[position] else {
                continue;
            };
            for model in models.iter().flatten() {
                *counts.entry(model.to_owned()).or_default() += 1;
            }
        }
    }
    recorded
}
