//! Scores one resolved route table on graded results, per slice and overall:
//! what each request would have cost, whether its answer was acceptable, and
//! how long its first token took.

use std::collections::BTreeMap;

use arrow::array::{Array, Float64Array};
use serde::{Deserialize, Serialize};

use crate::calibrate::to_picodollars;
use crate::routes::{ResolvedPolicy, ResolvedTable, Tier};
use crate::schema::{GradedBatch, GradedTable};
use crate::stats::clopper_pearson_lower;

/// How a route table does on one slice (or on all rows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub slice: String,
    pub n: u64,
    pub quality: f64,
    /// One-sided Clopper–Pearson bound at the gate's confidence.
    pub quality_lower_bound: Option<f64>,
    /// Mean USD per request.
    pub mean_cost: f64,
    /// Time to the served answer's first token, where the results have the
    /// latencies it needs.
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub escalation_rate: f64,
    /// Cascades: the share of requests whose wrong small answer the verifier
    /// accepted, which escalation can never repair.
    pub false_accept_rate: Option<f64>,
}

/// A table's metrics, and the slices its policy has no threshold for.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub slices: Vec<Metrics>,
    pub overall: Metrics,
    pub slices_without_threshold: Vec<String>,
}

#[derive(Debug, Default)]
struct Totals {
    n: u64,
    successes: u64,
    cost: i128,
    escalated: u64,
    false_accepts: u64,
    latencies: Vec<f64>,
}

impl Totals {
    fn absorb(&mut self, other: &Totals) {
        self.n += other.n;
        self.successes += other.successes;
        self.cost += other.cost;
        self.escalated += other.escalated;
        self.false_accepts += other.false_accepts;
        self.latencies.extend_from_slice(&other.latencies);
    }

    fn metrics(mut self, slice: String, cascade: bool, confidence: Option<f64>) -> Metrics {
        let n = self.n.max(1) as f64;
        self.latencies.sort_by(f64::total_cmp);
        Metrics {
            quality: self.successes as f64 / n,
            quality_lower_bound: confidence
                .filter(|_| self.n > 0)
                .map(|confidence| clopper_pearson_lower(self.successes, self.n, 1.0 - confidence)),
            mean_cost: self.cost as f64 / 1e12 / n,
            p50_ms: percentile(&self.latencies, 0.50),
            p95_ms: percentile(&self.latencies, 0.95),
            escalation_rate: self.escalated as f64 / n,
            false_accept_rate: cascade.then(|| self.false_accepts as f64 / n),
            slice,
            n: self.n,
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], fraction: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (fraction * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

fn value(array: Option<&Float64Array>, index: usize) -> Option<f64> {
    array
        .filter(|array| array.is_valid(index))
        .map(|array| array.value(index))
}

/// One tier's outcome for one row.
fn tier_ok(batch: &GradedBatch, tier: Tier, index: usize) -> bool {
    match tier {
        Tier::Small => batch.small_ok.value(index),
        Tier::Large => batch.large_ok.value(index),
        Tier::Verifier => false,
    }
}

fn tier_cost(batch: &GradedBatch, tier: Tier, index: usize) -> f64 {
    match tier {
        Tier::Small => batch.cost_small.value(index),
        Tier::Large => batch.cost_large.value(index),
        Tier::Verifier => batch.cost_verifier.value(index),
    }
}

/// Time to first token of a tier's answer; latency columns are in
/// `Column::LATENCIES` order: small, small ttft, large, large ttft,
/// verifier, router.
fn tier_ttft(batch: &GradedBatch, tier: Tier, index: usize) -> Option<f64> {
    match tier {
        Tier::Small => value(batch.latencies[1].as_ref(), index),
        Tier::Large => value(batch.latencies[3].as_ref(), index),
        Tier::Verifier => value(batch.latencies[4].as_ref(), index),
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

/// `table` on the results, with `scores` (in row order, from the policy's
/// score column) deciding escalations.
pub fn evaluate(
    table: &ResolvedTable,
    graded: &GradedTable,
    scores: &[f64],
    confidence: Option<f64>,
) -> Evaluation {
    let tier_of = |name: &str| table.route(name).map_or(Tier::Small, |route| route.tier);
    let mut per_slice: BTreeMap<String, Totals> = BTreeMap::new();
    let mut without_threshold: Vec<String> = Vec::new();
    let mut scores = scores.iter().copied();
    for batch in &graded.batches {
        for index in 0..batch.num_rows() {
            let score = scores.next().expect("a score per row");
            let slice = batch.slice.value(index);
            let totals = match per_slice.get_mut(slice) {
                Some(totals) => totals,
                None => per_slice.entry(slice.to_owned()).or_default(),
            };
            totals.n += 1;
            let router_ms = value(batch.latencies[5].as_ref(), index).unwrap_or(0.0);
            let (ok, cost, latency) = match &table.policy {
                ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => {
                    let tier = tier_of(table.policy.routes_for(slice)[0]);
                    (
                        tier_ok(batch, tier, index),
                        to_picodollars(tier_cost(batch, tier, index)),
                        tier_ttft(batch, tier, index),
                    )
                }
                ResolvedPolicy::Predictive { thresholds, .. } => {
                    let threshold = thresholds.for_slice(slice);
                    if threshold.is_none() && !without_threshold.iter().any(|known| known == slice)
                    {
                        without_threshold.push(slice.to_owned());
                    }
                    let escalate = threshold.is_some_and(|threshold| threshold.escalates(score));
                    let tier = if escalate { Tier::Large } else { Tier::Small };
                    totals.escalated += u64::from(escalate);
                    (
                        tier_ok(batch, tier, index),
                        to_picodollars(batch.cost_router.value(index))
                            + to_picodollars(tier_cost(batch, tier, index)),
                        tier_ttft(batch, tier, index).map(|ttft| ttft + router_ms),
                    )
                }
                ResolvedPolicy::Cascade { thresholds, .. } => {
                    let threshold = thresholds.for_slice(slice);
                    if threshold.is_none() && !without_threshold.iter().any(|known| known == slice)
                    {
                        without_threshold.push(slice.to_owned());
                    }
                    let escalate = threshold.is_some_and(|threshold| threshold.escalates(score));
                    totals.escalated += u64::from(escalate);
                    let small_ok = batch.small_ok.value(index);
                    totals.false_accepts += u64::from(!escalate && !small_ok);
                    let base = to_picodollars(batch.cost_small.value(index))
                        + to_picodollars(batch.cost_verifier.value(index));
                    // The small answer is only released, or escalated, once
                    // it is complete and verified.
                    let verified = value(batch.latencies[0].as_ref(), index)
                        .zip(value(batch.latencies[4].as_ref(), index))
                        .map(|(small, verifier)| small + verifier);
                    if escalate {
                        (
                            batch.large_ok.value(index),
                            base + to_picodollars(batch.cost_large.value(index)),
                            verified
                                .zip(tier_ttft(batch, Tier::Large, index))
                                .map(|(a, b)| a + b),
                        )
                    } else {
                        (small_ok, base, verified)
                    }
                }
            };
            totals.successes += u64::from(ok);
            totals.cost += i128::from(cost);
            if let Some(latency) = latency {
                totals.latencies.push(latency);
            }
        }
    }
    let cascade = matches!(table.policy, ResolvedPolicy::Cascade { .. });
    let mut all = Totals::default();
    for totals in per_slice.values() {
        all.absorb(totals);
    }
    without_threshold.sort();
    Evaluation {
        slices: per_slice
            .into_iter()
            .map(|(slice, totals)| totals.metrics(slice, cascade, confidence))
            .collect(),
        overall: all.metrics("*".to_owned(), cascade, confidence),
        slices_without_threshold: without_threshold,
    }
}

/// The model versions the results record for each tier, with row counts.
pub fn recorded_models(graded: &GradedTable) -> BTreeMap<Tier, BTreeMap<String, u64>> {
    let mut recorded: BTreeMap<Tier, BTreeMap<String, u64>> = BTreeMap::new();
    for (position, tier) in [Tier::Small, Tier::Large, Tier::Verifier]
        .into_iter()
        .enumerate()
    {
        if !graded.present.models[position] {
            continue;
        }
        let counts = recorded.entry(tier).or_default();
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

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(10.0));
        assert_eq!(percentile(&values, 0.95), Some(19.0));
        assert_eq!(percentile(&[7.0], 0.95), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
