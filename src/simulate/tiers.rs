//! `simulate --compare`'s second table: with a mid-price model between the
//! small and the large one, the cheapest thresholds of every two-tier and
//! three-tier policy that reach the target on the simulated requests,
//! chosen by the kernel's search exactly as `calibrate` chooses them.

use super::model::{SimulatedRow, Simulation};
use crate::policy::{
    Policy, TierLatency, TieredOutcomes, TieredSlice, cascade_stage, first_token_tier_ms,
    predictive_tier, search_tiers, serve_tier, to_picodollars, to_usd,
};
use crate::stats::percentile;
use crate::units::Target;

/// The three simulated models, cheapest first.
const MODELS: [&str; 3] = ["small", "mid", "large"];

/// The tier combinations compared, by index into [`MODELS`].
const COMBINATIONS: [&[usize]; 4] = [&[0, 2], &[0, 1], &[1, 2], &[0, 1, 2]];

/// Candidate thresholds per tier boundary: the simulated router's scores
/// are continuous, so a grid this fine is within a hair of exact.
const GRID: usize = 512;

#[derive(Debug, Clone, PartialEq)]
pub struct TieredSummary {
    /// `predictive small→mid→large`, ...
    pub policy: String,
    pub tiers: Vec<&'static str>,
    /// The chosen thresholds; `None` when no thresholds reach the target.
    pub thresholds: Option<Vec<f64>>,
    pub dollars_per_1k: f64,
    pub quality: f64,
    /// Share of requests each tier answers.
    pub shares: Vec<f64>,
    pub p95_ttft_ms: f64,
}

fn ok(row: &SimulatedRow, model: usize) -> bool {
    [row.small_ok, row.mid_ok, row.large_ok][model]
}

fn rejects(row: &SimulatedRow, model: usize) -> f64 {
    f64::from(u8::from(
        [row.verifier_rejects, row.mid_verifier_rejects, false][model],
    ))
}

/// Each model's first-token and total milliseconds: small, mid, large.
fn tier_latencies(simulation: &Simulation) -> [TierLatency; 3] {
    let ms = |seconds: f64| seconds * 1000.0;
    [
        TierLatency {
            first_token: ms(simulation.small_ttft),
            total: ms(simulation.small_total),
        },
        TierLatency {
            first_token: ms(simulation.mid_ttft),
            total: ms(simulation.mid_total),
        },
        TierLatency {
            first_token: ms(simulation.large_ttft),
            total: ms(simulation.large_total),
        },
    ]
}

/// Every two- and three-tier policy at its cheapest thresholds reaching
/// `target`; where none reaches it, the thresholds of its best quality.
pub fn compare_tiers(
    simulation: &Simulation,
    rows: &[SimulatedRow],
    target: Target,
) -> Vec<TieredSummary> {
    let target = target.get();
    let costs = [
        to_picodollars(simulation.small_cost()),
        to_picodollars(simulation.mid_cost()),
        to_picodollars(simulation.large_cost()),
    ];
    let ms = |seconds: f64| seconds * 1000.0;
    let latency = tier_latencies(simulation);
    let (router, verifier) = (
        to_picodollars(simulation.router_cost),
        to_picodollars(simulation.verifier_cost),
    );
    let needed = (target * rows.len() as f64 - 1e-9).ceil().max(0.0) as u64;
    let mut summaries = Vec::new();
    for policy in [Policy::Predictive, Policy::Cascade] {
        for models in COMBINATIONS {
            let k = models.len();
            let tier_costs: Vec<i64> = models.iter().map(|&model| costs[model]).collect();
            let verifiers = vec![verifier; k - 1];
            let scores_of = |row: &SimulatedRow| -> Vec<f64> {
                match policy {
                    Policy::Predictive => vec![row.router_score],
                    Policy::Cascade => models[..k - 1]
                        .iter()
                        .map(|&model| rejects(row, model))
                        .collect(),
                }
            };
            let mut slice = TieredSlice::new(policy, k);
            for row in rows {
                let oks: Vec<bool> = models.iter().map(|&model| ok(row, model)).collect();
                slice.push(&scores_of(row), &oks, &tier_costs, router, &verifiers);
            }
            let search = search_tiers(&slice, policy, GRID, |successes, _| successes >= needed);
            let reached = search.chosen.is_some();
            let candidate = search.chosen.unwrap_or(search.best_quality);
            // Serve every row at the chosen thresholds, for the latencies
            // the search does not sum.
            let tiers_latency: Vec<TierLatency> =
                models.iter().map(|&model| latency[model]).collect();
            let mut served = vec![0u64; k];
            let (mut successes, mut cost) = (0u64, 0i128);
            let mut first_tokens = Vec::with_capacity(rows.len());
            for row in rows {
                let scores = scores_of(row);
                let tier = match policy {
                    Policy::Predictive => predictive_tier(scores[0], &candidate.thresholds),
                    Policy::Cascade => cascade_stage(&scores, &candidate.thresholds),
                };
                let oks: Vec<bool> = models.iter().map(|&model| ok(row, model)).collect();
                let outcome = serve_tier(
                    policy,
                    &TieredOutcomes {
                        ok: &oks,
                        cost: &tier_costs,
                        router,
                        verifier: &verifiers,
                    },
                    tier,
                );
                served[tier] += 1;
                successes += u64::from(outcome.ok);
                cost += i128::from(outcome.cost);
                first_tokens.push(first_token_tier_ms(
                    policy,
                    &tiers_latency,
                    ms(simulation.verifier_latency),
                    ms(simulation.router_latency),
                    tier,
                ));
            }
            debug_assert_eq!((successes, cost), (candidate.successes, candidate.cost));
            first_tokens.sort_unstable_by(f64::total_cmp);
            let n = rows.len() as f64;
            let names: Vec<&'static str> = models.iter().map(|&model| MODELS[model]).collect();
            summaries.push(TieredSummary {
                policy: format!("{} {}", policy.name(), names.join("→")),
                tiers: names,
                thresholds: reached.then(|| candidate.thresholds.clone()),
                dollars_per_1k: to_usd(cost) / n * 1000.0,
                quality: successes as f64 / n,
                shares: served.iter().map(|&count| count as f64 / n).collect(),
                p95_ttft_ms: percentile(&first_tokens, 0.95).unwrap_or(0.0),
            });
        }
    }
    summaries
}

pub fn render_tiered(summaries: &[TieredSummary], target: Target) -> String {
    let mut rows = Vec::with_capacity(summaries.len());
    for summary in summaries {
        let thresholds = summary.thresholds.as_ref().map_or_else(
            || "target not reached".to_owned(),
            |thresholds| {
                thresholds
                    .iter()
                    .map(|threshold| {
                        if threshold.is_finite() {
                            format!("{threshold:.3}")
                        } else {
                            "inf".to_owned()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        let shares: Vec<String> = MODELS
            .iter()
            .map(|model| {
                summary
                    .tiers
                    .iter()
                    .position(|tier| tier == model)
                    .map_or_else(
                        || "-".to_owned(),
                        |index| format!("{:.0}%", summary.shares[index] * 100.0),
                    )
            })
            .collect();
        rows.push(vec![
            summary.policy.clone(),
            thresholds,
            format!("{:.3}", summary.dollars_per_1k),
            format!("{:.4}", summary.quality),
            shares.join(" / "),
            format!("{:.0}", summary.p95_ttft_ms),
        ]);
    }
    let header = [
        "policy",
        "thresholds",
        "$ per 1k req",
        "quality",
        "small / mid / large",
        "p95 TTFT ms",
    ];
    let table = crate::terminal::table_aligned(header, rows, 2..);
    format!("cheapest thresholds reaching quality {target} (with a mid model)\n{table}\n")
}
