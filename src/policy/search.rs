//! The threshold search for k tiers over one slice: every candidate
//! assignment of thresholds, from bucket counts and prefix (or suffix) sums,
//! so a candidate costs O(k) whatever the slice's size.
//!
//! Candidate thresholds come from the slice's scores: every distinct score
//! when there are at most `grid` of them (the search is then exact: no other
//! threshold assigns rows differently), otherwise the `grid` quantiles of the
//! scores, plus `+inf` (escalate none). Predictive policies take k − 1
//! ordered thresholds on one score (C(m + k − 1, k − 1) candidates for m cut
//! values); cascades one threshold per non-final stage on that stage's
//! verifier score (the product of the stages' cut values). The grid shrinks
//! until the candidates fit [`MAX_CANDIDATES`].
//!
//! The choice is the cheapest candidate whose successes are acceptable;
//! ties go to more successes, then to the lexicographically lower
//! thresholds (the first threshold first).

use crate::schema::Policy;

/// Most candidates one slice's search evaluates.
pub const MAX_CANDIDATES: u64 = 1 << 22;

/// One slice's rows over k tiers, column by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TieredSlice {
    tiers: usize,
    /// Scores per row: one for predictive, k − 1 for a cascade.
    dims: usize,
    scores: Vec<f64>,
    ok: Vec<bool>,
    cost: Vec<i64>,
    router: Vec<i64>,
    verifier: Vec<i64>,
}

impl TieredSlice {
    pub fn new(policy: Policy, tiers: usize) -> TieredSlice {
        assert!(tiers >= 2, "at least two tiers");
        TieredSlice {
            tiers,
            dims: match policy {
                Policy::Predictive => 1,
                Policy::Cascade => tiers - 1,
            },
            ..TieredSlice::default()
        }
    }

    pub fn rows(&self) -> usize {
        self.router.len()
    }

    /// A slice of the same tiers and scores per row, with no rows.
    pub fn empty_like(&self) -> TieredSlice {
        TieredSlice {
            tiers: self.tiers,
            dims: self.dims,
            ..TieredSlice::default()
        }
    }

    pub fn tiers(&self) -> usize {
        self.tiers
    }

    /// Row `row`: its scores, outcomes, costs, router cost and verifier
    /// costs.
    pub fn row(&self, row: usize) -> (&[f64], &[bool], &[i64], i64, &[i64]) {
        let (k, dims) = (self.tiers, self.dims);
        (
            &self.scores[row * dims..(row + 1) * dims],
            &self.ok[row * k..(row + 1) * k],
            &self.cost[row * k..(row + 1) * k],
            self.router[row],
            &self.verifier[row * (k - 1)..(row + 1) * (k - 1)],
        )
    }

    /// Takes in another set of rows of the same slice.
    pub fn absorb(&mut self, other: TieredSlice) {
        self.scores.extend(other.scores);
        self.ok.extend(other.ok);
        self.cost.extend(other.cost);
        self.router.extend(other.router);
        self.verifier.extend(other.verifier);
    }

    /// Adds a row: its scores (one, or one per non-final stage), each tier's
    /// outcome and cost, the router's cost and each non-final stage's
    /// verifier cost, in picodollars.
    pub fn push(
        &mut self,
        scores: &[f64],
        ok: &[bool],
        cost: &[i64],
        router: i64,
        verifier: &[i64],
    ) {
        debug_assert_eq!(scores.len(), self.dims);
        debug_assert_eq!(
            (ok.len(), cost.len(), verifier.len()),
            (self.tiers, self.tiers, self.tiers - 1)
        );
        // Adding zero folds -0.0 into 0.0, which `>=` treats as equal.
        self.scores.extend(scores.iter().map(|score| score + 0.0));
        self.ok.extend_from_slice(ok);
        self.cost.extend_from_slice(cost);
        self.router.push(router);
        self.verifier.extend_from_slice(verifier);
    }
}

/// One assignment of thresholds and what it does to the slice.
#[derive(Debug, Clone, PartialEq)]
pub struct TieredCandidate {
    /// Predictive: k − 1 ascending thresholds; cascade: one per non-final
    /// stage. `+inf` escalates nothing past it.
    pub thresholds: Vec<f64>,
    pub successes: u64,
    /// Picodollars.
    pub cost: i128,
    /// Rows served by each tier.
    pub served: Vec<u64>,
    /// Cascade: wrong answers a verifier accepted before the last stage.
    pub false_accepts: u64,
}

/// The outcome of one slice's search.
#[derive(Debug, Clone, PartialEq)]
pub struct TieredSearch {
    pub rows: u64,
    /// Candidates evaluated: the size of the family a guarantee divides δ by.
    pub candidates: u64,
    /// Cut values per threshold actually used.
    pub grid: Vec<usize>,
    /// Every distinct score was a candidate: no threshold off the grid
    /// assigns rows differently.
    pub exact: bool,
    /// The cheapest acceptable candidate, if any.
    pub chosen: Option<TieredCandidate>,
    /// The candidate with the most successes (cheapest among them).
    pub best_quality: TieredCandidate,
    /// The candidates no other beats on both cost and successes, cheapest
    /// first (the first in threshold order where two tie on both).
    pub frontier: Vec<TieredCandidate>,
}

/// Sorted cut values of one score, and each row's bucket: how many cut
/// values are at or below its score.
fn cuts(values: impl Iterator<Item = f64>, grid: usize) -> (Vec<f64>, bool) {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_unstable_by(f64::total_cmp);
    let mut distinct = sorted.clone();
    distinct.dedup();
    if distinct.len() <= grid {
        return (distinct, true);
    }
    let n = sorted.len();
    let mut grid_values: Vec<f64> = (1..=grid)
        .map(|step| sorted[(step * n).div_ceil(grid + 1).min(n - 1)])
        .collect();
    grid_values.dedup();
    (grid_values, false)
}

fn bucket(cuts: &[f64], score: f64) -> usize {
    cuts.partition_point(|&cut| cut <= score)
}

fn binomial(n: u64, k: u64) -> u64 {
    (0..k).fold(1u64, |acc, i| acc.saturating_mul(n - i) / (i + 1))
}

/// Searches every candidate of `slice` under `policy`, choosing the
/// cheapest whose successes `acceptable` admits; `acceptable` may depend on
/// the number of candidates (a Bonferroni family).
pub fn search_tiers(
    slice: &TieredSlice,
    policy: Policy,
    grid: usize,
    acceptable: impl Fn(u64, u64) -> bool,
) -> TieredSearch {
    let (k, dims, rows) = (slice.tiers, slice.dims, slice.rows());
    assert!(rows > 0, "a slice has rows");
    let mut grid = grid.max(1);
    let (all_cuts, exact) = loop {
        let found: Vec<(Vec<f64>, bool)> = (0..dims)
            .map(|dim| cuts((0..rows).map(|row| slice.scores[row * dims + dim]), grid))
            .collect();
        let count = candidate_count(
            policy,
            k,
            &found.iter().map(|(cuts, _)| cuts.len()).collect::<Vec<_>>(),
        );
        if count <= MAX_CANDIDATES || grid == 1 {
            let exact = found.iter().all(|(_, exact)| *exact);
            break (
                found.into_iter().map(|(cuts, _)| cuts).collect::<Vec<_>>(),
                exact,
            );
        }
        grid /= 2;
    };
    let sizes: Vec<usize> = all_cuts.iter().map(Vec::len).collect();
    let candidates = candidate_count(policy, k, &sizes);
    let mut best = Best::new(&acceptable, candidates);
    match policy {
        Policy::Predictive => predictive(slice, &all_cuts[0], &mut best),
        Policy::Cascade => cascade(slice, &all_cuts, &mut best),
    }
    TieredSearch {
        rows: rows as u64,
        candidates,
        grid: sizes,
        exact,
        chosen: best.chosen,
        best_quality: best.best_quality.expect("at least one candidate"),
        frontier: best.frontier.into_values().collect(),
    }
}

fn candidate_count(policy: Policy, k: usize, sizes: &[usize]) -> u64 {
    match policy {
        // Non-decreasing (k − 1)-tuples of m + 1 options.
        Policy::Predictive => binomial(sizes[0] as u64 + k as u64 - 1, k as u64 - 1),
        Policy::Cascade => sizes
            .iter()
            .fold(1u64, |acc, &size| acc.saturating_mul(size as u64 + 1)),
    }
}

/// The running choice.
struct Best<'a, F> {
    acceptable: &'a F,
    family: u64,
    chosen: Option<TieredCandidate>,
    best_quality: Option<TieredCandidate>,
    /// By cost; successes strictly increase with cost.
    frontier: std::collections::BTreeMap<i128, TieredCandidate>,
}

impl<'a, F: Fn(u64, u64) -> bool> Best<'a, F> {
    fn new(acceptable: &'a F, family: u64) -> Self {
        Best {
            acceptable,
            family,
            chosen: None,
            best_quality: None,
            frontier: std::collections::BTreeMap::new(),
        }
    }

    /// Offers a candidate; candidates come in ascending lexicographic order
    /// of thresholds, so a tie keeps the earlier one.
    fn offer(&mut self, successes: u64, cost: i128, make: impl Fn() -> TieredCandidate) {
        if (self.acceptable)(successes, self.family)
            && self.chosen.as_ref().is_none_or(|chosen| {
                (cost, std::cmp::Reverse(successes))
                    < (chosen.cost, std::cmp::Reverse(chosen.successes))
            })
        {
            self.chosen = Some(make());
        }
        if self.best_quality.as_ref().is_none_or(|best| {
            (std::cmp::Reverse(successes), cost) < (std::cmp::Reverse(best.successes), best.cost)
        }) {
            self.best_quality = Some(make());
        }
        let dominated = self
            .frontier
            .range(..=cost)
            .next_back()
            .is_some_and(|(_, point)| point.successes >= successes);
        if !dominated {
            let beaten: Vec<i128> = self
                .frontier
                .range(cost..)
                .take_while(|(_, point)| point.successes <= successes)
                .map(|(&cost, _)| cost)
                .collect();
            for cost in beaten {
                self.frontier.remove(&cost);
            }
            self.frontier.insert(cost, make());
        }
    }
}

fn threshold(cuts: &[f64], option: usize) -> f64 {
    cuts.get(option).copied().unwrap_or(f64::INFINITY)
}

fn predictive<F: Fn(u64, u64) -> bool>(slice: &TieredSlice, cuts: &[f64], best: &mut Best<'_, F>) {
    let (k, m) = (slice.tiers, cuts.len());
    // Prefix sums over buckets 0..=m, per tier: successes and cost, and rows.
    let width = m + 2;
    let mut ok = vec![0u64; k * width];
    let mut cost = vec![0i128; k * width];
    let mut count = vec![0u64; width];
    let mut router = 0i128;
    for row in 0..slice.rows() {
        let b = bucket(cuts, slice.scores[row]) + 1;
        count[b] += 1;
        for tier in 0..k {
            ok[tier * width + b] += u64::from(slice.ok[row * k + tier]);
            cost[tier * width + b] += i128::from(slice.cost[row * k + tier]);
        }
        router += i128::from(slice.router[row]);
    }
    for index in 1..width {
        count[index] += count[index - 1];
        for tier in 0..k {
            ok[tier * width + index] += ok[tier * width + index - 1];
            cost[tier * width + index] += cost[tier * width + index - 1];
        }
    }
    // Tier i serves buckets [edge(i), edge(i + 1)), edge(0) = 0 and
    // edge(k) = m + 1; threshold option j puts the edge at j + 1.
    let mut options = vec![0usize; k - 1];
    loop {
        let edge = |i: usize| match i {
            0 => 0,
            i if i == k => m + 1,
            i => options[i - 1] + 1,
        };
        let (mut successes, mut total) = (0u64, router);
        for tier in 0..k {
            let (from, to) = (edge(tier), edge(tier + 1));
            successes += ok[tier * width + to] - ok[tier * width + from];
            total += cost[tier * width + to] - cost[tier * width + from];
        }
        best.offer(successes, total, || TieredCandidate {
            thresholds: options
                .iter()
                .map(|&option| threshold(cuts, option))
                .collect(),
            successes,
            cost: total,
            served: (0..k)
                .map(|tier| count[edge(tier + 1)] - count[edge(tier)])
                .collect(),
            false_accepts: 0,
        });
        // The next non-decreasing tuple, in lexicographic order.
        let Some(position) = (0..k - 1).rev().find(|&position| options[position] < m) else {
            break;
        };
        options[position] += 1;
        let value = options[position];
        for later in &mut options[position + 1..] {
            *later = value;
        }
    }
}

fn cascade<F: Fn(u64, u64) -> bool>(
    slice: &TieredSlice,
    all_cuts: &[Vec<f64>],
    best: &mut Best<'_, F>,
) {
    let k = slice.tiers;
    let dims = k - 1;
    // Suffix-sum tables over the stages' buckets: index x_d in 0..=m_d + 1
    // sums the rows with bucket ≥ x_d in every dimension.
    let extents: Vec<usize> = all_cuts.iter().map(|cuts| cuts.len() + 2).collect();
    let cells: usize = extents.iter().product();
    let mut strides = vec![1usize; dims];
    for dim in (0..dims.saturating_sub(1)).rev() {
        strides[dim] = strides[dim + 1] * extents[dim + 1];
    }
    // Per cell: rows, then each tier's successes, then each stage's cost
    // (its call plus its verifier's).
    let values = 1 + 2 * k;
    let mut table = vec![0i128; cells * values];
    for row in 0..slice.rows() {
        let cell: usize = (0..dims)
            .map(|dim| bucket(&all_cuts[dim], slice.scores[row * dims + dim]) * strides[dim])
            .sum();
        let at = cell * values;
        table[at] += 1;
        for tier in 0..k {
            table[at + 1 + tier] += i128::from(slice.ok[row * k + tier]);
            let verifier = if tier + 1 < k {
                slice.verifier[row * dims + tier]
            } else {
                0
            };
            table[at + 1 + k + tier] += i128::from(slice.cost[row * k + tier] + verifier);
        }
    }
    for dim in 0..dims {
        let stride = strides[dim];
        for cell in (0..cells).rev() {
            let coordinate = (cell / stride) % extents[dim];
            if coordinate + 1 < extents[dim] {
                let (from, to) = ((cell + stride) * values, cell * values);
                for value in 0..values {
                    table[to + value] += table[from + value];
                }
            }
        }
    }
    // Rows reaching stage i: bucket > option in each of the first i
    // dimensions, so suffix index option + 1 there and 0 (all) after.
    let reach = |options: &[usize], stage: usize, value: usize| -> i128 {
        if stage >= k {
            return 0;
        }
        let cell: usize = options[..stage]
            .iter()
            .enumerate()
            .map(|(dim, &option)| (option + 1) * strides[dim])
            .sum();
        table[cell * values + value]
    };
    let mut options = vec![0usize; dims];
    loop {
        let (mut successes, mut total, mut false_accepts) = (0i128, 0i128, 0i128);
        let mut served = Vec::with_capacity(k);
        for stage in 0..k {
            let stopped =
                |value: usize| reach(&options, stage, value) - reach(&options, stage + 1, value);
            let ok = stopped(1 + stage);
            successes += ok;
            total += reach(&options, stage, 1 + k + stage);
            let rows = stopped(0);
            served.push(rows as u64);
            if stage + 1 < k {
                false_accepts += rows - ok;
            }
        }
        let successes = successes as u64;
        best.offer(successes, total, || TieredCandidate {
            thresholds: options
                .iter()
                .enumerate()
                .map(|(dim, &option)| threshold(&all_cuts[dim], option))
                .collect(),
            successes,
            cost: total,
            served: served.clone(),
            false_accepts: false_accepts as u64,
        });
        let Some(position) = (0..dims)
            .rev()
            .find(|&dim| options[dim] < all_cuts[dim].len())
        else {
            break;
        };
        options[position] += 1;
        for later in &mut options[position + 1..] {
            *later = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::policy::tiers::{TieredOutcomes, cascade_stage, predictive_tier, serve_tier};

    /// Every assignment of thresholds drawn from the distinct scores and
    /// `+inf`, served row by row through the kernel.
    fn brute_force(
        slice: &TieredSlice,
        policy: Policy,
        target_successes: u64,
    ) -> Option<TieredCandidate> {
        let (k, dims) = (slice.tiers, slice.dims);
        let options: Vec<Vec<f64>> = (0..dims)
            .map(|dim| {
                let mut values: Vec<f64> = (0..slice.rows())
                    .map(|row| slice.scores[row * dims + dim])
                    .collect();
                values.sort_unstable_by(f64::total_cmp);
                values.dedup();
                values.push(f64::INFINITY);
                values
            })
            .collect();
        let mut tuples: Vec<Vec<f64>> = vec![vec![]];
        let positions = match policy {
            Policy::Predictive => k - 1,
            Policy::Cascade => dims,
        };
        for position in 0..positions {
            let dim = if policy == Policy::Predictive {
                0
            } else {
                position
            };
            tuples = tuples
                .into_iter()
                .flat_map(|tuple| {
                    let last = tuple.last().copied();
                    options[dim]
                        .iter()
                        .filter(|&&value| {
                            policy == Policy::Cascade || last.is_none_or(|last| value >= last)
                        })
                        .map(|&value| {
                            let mut next = tuple.clone();
                            next.push(value);
                            next
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
        }
        let mut best: Option<TieredCandidate> = None;
        for thresholds in tuples {
            let (mut successes, mut cost, mut false_accepts) = (0u64, 0i128, 0u64);
            let mut served = vec![0u64; k];
            for row in 0..slice.rows() {
                let scores = &slice.scores[row * dims..(row + 1) * dims];
                let tier = match policy {
                    Policy::Predictive => predictive_tier(scores[0], &thresholds),
                    Policy::Cascade => cascade_stage(scores, &thresholds),
                };
                let outcome = serve_tier(
                    policy,
                    &TieredOutcomes {
                        ok: &slice.ok[row * k..(row + 1) * k],
                        cost: &slice.cost[row * k..(row + 1) * k],
                        router: slice.router[row],
                        verifier: &slice.verifier[row * (k - 1)..(row + 1) * (k - 1)],
                    },
                    tier,
                );
                successes += u64::from(outcome.ok);
                cost += i128::from(outcome.cost);
                false_accepts += u64::from(outcome.false_accept);
                served[tier] += 1;
            }
            let better = best.as_ref().is_none_or(|best| {
                (cost, std::cmp::Reverse(successes))
                    < (best.cost, std::cmp::Reverse(best.successes))
            });
            if successes >= target_successes && better {
                best = Some(TieredCandidate {
                    thresholds,
                    successes,
                    cost,
                    served,
                    false_accepts,
                });
            }
        }
        best
    }

    fn slice_strategy(policy: Policy) -> impl Strategy<Value = TieredSlice> {
        let row = (
            proptest::collection::vec(0u8..6, 2),
            proptest::collection::vec(any::<bool>(), 3),
            proptest::collection::vec(1i64..50, 3),
            0i64..3,
            proptest::collection::vec(0i64..5, 2),
        );
        proptest::collection::vec(row, 1..14).prop_map(move |rows| {
            let mut slice = TieredSlice::new(policy, 3);
            for (scores, ok, mut cost, router, verifier) in rows {
                // Dearer tiers cost more, as in any real table.
                cost.sort_unstable();
                let scores: Vec<f64> = scores.iter().map(|&score| f64::from(score) / 5.0).collect();
                let dims = if policy == Policy::Predictive { 1 } else { 2 };
                slice.push(&scores[..dims], &ok, &cost, router, &verifier);
            }
            slice
        })
    }

    proptest! {
        /// k = 3 on small slices: the prefix-sum search chooses what
        /// serving every assignment row by row chooses.
        #[test]
        fn three_tier_predictive_matches_brute_force(slice in slice_strategy(Policy::Predictive), share in 0.0f64..1.0) {
            let target = (share * slice.rows() as f64).ceil() as u64;
            let search = search_tiers(&slice, Policy::Predictive, 64, |successes, _| successes >= target);
            prop_assert!(search.exact);
            prop_assert_eq!(search.chosen, brute_force(&slice, Policy::Predictive, target));
            // The frontier: strictly better quality for strictly more cost,
            // and every point the cheapest reaching its own quality.
            for pair in search.frontier.windows(2) {
                prop_assert!(pair[0].cost < pair[1].cost && pair[0].successes < pair[1].successes);
            }
            for point in &search.frontier {
                let cheapest = brute_force(&slice, Policy::Predictive, point.successes).unwrap();
                prop_assert_eq!(cheapest.cost, point.cost);
            }
        }

        #[test]
        fn three_stage_cascade_matches_brute_force(slice in slice_strategy(Policy::Cascade), share in 0.0f64..1.0) {
            let target = (share * slice.rows() as f64).ceil() as u64;
            let search = search_tiers(&slice, Policy::Cascade, 64, |successes, _| successes >= target);
            prop_assert!(search.exact);
            prop_assert_eq!(search.chosen, brute_force(&slice, Policy::Cascade, target));
        }
    }

    /// k = 4, where the cascade's suffix table has three dimensions: random
    /// small slices against the brute force.
    #[test]
    fn four_tiers_match_brute_force() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for trial in 0..60 {
            for policy in [Policy::Predictive, Policy::Cascade] {
                let dims = if policy == Policy::Predictive { 1 } else { 3 };
                let mut slice = TieredSlice::new(policy, 4);
                for _ in 0..1 + next(9) {
                    let scores: Vec<f64> = (0..dims).map(|_| next(5) as f64 / 4.0).collect();
                    let ok: Vec<bool> = (0..4).map(|_| next(2) == 1).collect();
                    let mut cost: Vec<i64> = (0..4).map(|_| 1 + next(40) as i64).collect();
                    cost.sort_unstable();
                    let verifier: Vec<i64> = (0..3).map(|_| next(4) as i64).collect();
                    slice.push(&scores, &ok, &cost, next(3) as i64, &verifier);
                }
                let target = next(slice.rows() as u64 + 1);
                let search = search_tiers(&slice, policy, 64, |successes, _| successes >= target);
                assert!(search.exact);
                assert_eq!(
                    search.chosen,
                    brute_force(&slice, policy, target),
                    "trial {trial}, {policy:?}"
                );
            }
        }
    }

    #[test]
    fn a_large_slice_falls_back_to_a_quantile_grid() {
        let mut slice = TieredSlice::new(Policy::Predictive, 3);
        for row in 0..10_000 {
            let score = f64::from(row) / 10_000.0;
            slice.push(
                &[score],
                &[score < 0.3, score < 0.7, true],
                &[1, 10, 100],
                0,
                &[0, 0],
            );
        }
        let search = search_tiers(&slice, Policy::Predictive, 100, |successes, _| {
            successes == 10_000
        });
        assert!(!search.exact);
        assert_eq!(search.grid, vec![100]);
        assert_eq!(search.candidates, 101 * 102 / 2);
        let chosen = search.chosen.expect("everything right is reachable");
        // The cheapest perfect assignment on the grid: tier 0 below 0.3,
        // tier 1 below 0.7, within one grid step of each.
        assert!(
            (chosen.thresholds[0] - 0.3).abs() <= 0.01,
            "{:?}",
            chosen.thresholds
        );
        assert!(
            (chosen.thresholds[1] - 0.7).abs() <= 0.01,
            "{:?}",
            chosen.thresholds
        );
    }
}
