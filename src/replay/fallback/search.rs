//! The breaker's deadline and failure count, searched over a grid within
//! the fallback's share, the retry budget and the fallback's capacity.

use super::replay::{FallbackLatency, FallbackPolicy, PrimaryRequest, replay_policy};
use crate::schema::{BreakerCalibration, BreakerPoint, BreakerSettings, Learning, PolicyOutcome};
use crate::stats::percentile;

/// What a breaker may cost, each a constraint of the search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerBounds {
    /// Of the primary's requests, the share the fallback may answer.
    pub max_fallback_share: f64,
    /// Requests beyond one per user request, as a share of requests
    /// (retries and fallbacks at this one layer).
    pub retry_budget: f64,
    /// The fallback route's capacity, requests per second (its `rpm` / 60).
    pub fallback_capacity_per_s: Option<f64>,
}

impl BreakerBounds {
    fn admit(&self, outcome: &PolicyOutcome) -> bool {
        outcome.fallback_share <= self.max_fallback_share
            && outcome.extra_share <= self.retry_budget
            && self
                .fallback_capacity_per_s
                .is_none_or(|capacity| outcome.peak_fallback_per_s as f64 <= capacity)
    }
}

/// Deadlines worth trying: the primary's first-token quantiles (p50 to
/// p99.9) and round values between, above the fallback's own first token.
pub fn candidate_deadlines(requests: &[PrimaryRequest]) -> Vec<f64> {
    let mut ttfts: Vec<f64> = requests
        .iter()
        .filter_map(|request| request.ttft_ms)
        .collect();
    ttfts.sort_by(f64::total_cmp);
    let mut deadlines: Vec<f64> =
        [500.0, 1000.0, 2000.0, 3000.0, 5000.0, 8000.0, 12_000.0].to_vec();
    for q in [0.5, 0.75, 0.9, 0.95, 0.99, 0.999] {
        deadlines.extend(percentile(&ttfts, q).map(f64::ceil));
    }
    deadlines.retain(|deadline| *deadline > 0.0);
    deadlines.sort_by(f64::total_cmp);
    deadlines.dedup();
    deadlines
}

pub fn calibrate_breaker(
    requests: &[PrimaryRequest],
    fallback: &FallbackLatency,
    open_ms: f64,
    bounds: BreakerBounds,
    learning: Learning,
) -> BreakerCalibration {
    let deadlines = candidate_deadlines(requests);
    let counts: Vec<u32> = vec![1, 2, 3, 5, 8];
    let mut points = Vec::with_capacity(deadlines.len() * counts.len());
    for &deadline in &deadlines {
        for &open_after in &counts {
            let policy = FallbackPolicy {
                name: "candidate".to_owned(),
                breaker: Some(BreakerSettings {
                    open_after,
                    open_ms,
                    first_token_deadline_ms: Some(deadline),
                }),
            };
            let outcome = replay_policy(requests, fallback, &policy, learning);
            points.push(BreakerPoint {
                first_token_deadline_ms: deadline,
                open_after,
                p95_wait_s: outcome.p95_wait_s,
                p99_wait_s: outcome.p99_wait_s,
                total_wait_s: outcome.total_wait_s,
                fallback_share: outcome.fallback_share,
                extra_share: outcome.extra_share,
                peak_fallback_per_s: outcome.peak_fallback_per_s,
                admissible: bounds.admit(&outcome),
            });
        }
    }
    let chosen = points
        .iter()
        .filter(|point| point.admissible)
        .min_by(|a, b| {
            a.p95_wait_s
                .total_cmp(&b.p95_wait_s)
                .then(a.p99_wait_s.total_cmp(&b.p99_wait_s))
                .then(a.total_wait_s.total_cmp(&b.total_wait_s))
                .then(a.fallback_share.total_cmp(&b.fallback_share))
                .then(
                    b.first_token_deadline_ms
                        .total_cmp(&a.first_token_deadline_ms),
                )
                .then(b.open_after.cmp(&a.open_after))
        })
        .cloned();
    let neighbours = match &chosen {
        None => Vec::new(),
        Some(chosen) => {
            let deadline_at = deadlines
                .iter()
                .position(|deadline| *deadline == chosen.first_token_deadline_ms)
                .expect("a searched deadline");
            let count_at = counts
                .iter()
                .position(|count| *count == chosen.open_after)
                .expect("a searched count");
            points
                .iter()
                .filter(|point| {
                    let d = deadlines
                        .iter()
                        .position(|deadline| *deadline == point.first_token_deadline_ms)
                        .expect("a searched deadline");
                    let c = counts
                        .iter()
                        .position(|count| *count == point.open_after)
                        .expect("a searched count");
                    d.abs_diff(deadline_at) + c.abs_diff(count_at) == 1
                })
                .cloned()
                .collect()
        }
    };
    BreakerCalibration {
        max_fallback_share: bounds.max_fallback_share,
        retry_budget: Some(bounds.retry_budget),
        fallback_capacity_per_s: bounds.fallback_capacity_per_s,
        open_ms,
        deadlines_ms: deadlines,
        open_after: counts,
        chosen,
        neighbours,
        points,
    }
}
