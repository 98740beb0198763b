//! The audit draw: a fixed-size sample of one slice's rows, stratified by
//! score, in which every row has the same, recorded, inclusion probability.
//!
//! The rows are ranked by score (ties broken by the seeded hash of their
//! key) and cut into strata of equal shares, so every part of the score
//! range, both sides of any threshold, is audited. Stratum h's size n_h is
//! a systematic randomised rounding of n · N_h / N: one uniform offset u,
//! and n_h counts the points u, u + 1, … that fall in the stratum's share
//! of [0, n). The n_h sum to n exactly and E[n_h] = n · N_h / N; the rows
//! of a stratum are then its n_h with the smallest second hash. So each row
//! is drawn with probability exactly n / N, and the draw is a function of
//! the keys, the scores and the seed alone: anyone holding the rows can
//! draw it again and check it.

use super::random::{finalise, splitmix64, unit_of};

/// What [`draw_stratified`] chose from one slice.
#[derive(Debug, Clone, PartialEq)]
pub struct StratifiedDraw {
    /// Indices into the slice's rows, each with its stratum (0 the lowest
    /// scores), in ascending index order.
    pub chosen: Vec<(usize, u32)>,
    /// Strata the rows were cut into: the requested number, at most the
    /// sample's size.
    pub strata: u32,
    /// The probability with which each row was drawn: size / rows.
    pub inclusion_probability: f64,
}

/// Draws `size` of the rows (all of them when there are fewer) whose
/// fixed key hashes and scores are given, in `strata` score strata, under
/// `seed`. `slice_key` separates the offsets of slices drawn with one seed.
pub fn draw_stratified(
    keys: &[u64],
    scores: &[f64],
    size: usize,
    strata: usize,
    seed: u64,
    slice_key: u64,
) -> StratifiedDraw {
    assert_eq!(keys.len(), scores.len(), "one score per key");
    let rows = keys.len();
    let size = size.min(rows);
    let strata = strata.clamp(1, size.max(1));
    if size == 0 {
        return StratifiedDraw {
            chosen: Vec::new(),
            strata: strata as u32,
            inclusion_probability: 0.0,
        };
    }
    let order_salt = splitmix64(seed ^ 0x6175_6469_745f_6f72);
    let pick_salt = splitmix64(seed ^ 0x6175_6469_745f_7069);
    let mut ranked: Vec<usize> = (0..rows).collect();
    ranked.sort_unstable_by(|&a, &b| {
        scores[a]
            .total_cmp(&scores[b])
            .then_with(|| finalise(keys[a] ^ order_salt).cmp(&finalise(keys[b] ^ order_salt)))
            .then(a.cmp(&b))
    });
    let offset = unit_of(splitmix64(seed ^ finalise(slice_key)));
    // Points u + j below x: ⌈x − u⌉ for x ≥ 0.
    let points_below = |end: usize| -> usize {
        if end == rows {
            return size;
        }
        let share = size as f64 * end as f64 / rows as f64;
        (share - offset).ceil().max(0.0) as usize
    };
    let mut chosen = Vec::with_capacity(size);
    let mut start = 0;
    for stratum in 0..strata {
        let end = (stratum + 1) * rows / strata;
        let take = points_below(end) - points_below(start);
        let members = &mut ranked[start..end];
        if take < members.len() {
            members.select_nth_unstable_by_key(take, |&index| finalise(keys[index] ^ pick_salt));
        }
        chosen.extend(
            members[..take.min(members.len())]
                .iter()
                .map(|&index| (index, stratum as u32)),
        );
        start = end;
    }
    chosen.sort_unstable();
    StratifiedDraw {
        chosen,
        strata: strata as u32,
        inclusion_probability: size as f64 / rows as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::random::Random;

    fn slice(rows: usize, random: &mut Random) -> (Vec<u64>, Vec<f64>) {
        let keys = (0..rows as u64).map(|key| finalise(key ^ 0xabc)).collect();
        // Ties on purpose: scores rounded to two places.
        let scores = (0..rows)
            .map(|_| (random.unit() * 100.0).round() / 100.0)
            .collect();
        (keys, scores)
    }

    #[test]
    fn the_draw_has_its_size_and_is_a_function_of_the_rows_and_the_seed() {
        let mut random = Random::new(3);
        let (keys, scores) = slice(997, &mut random);
        for (size, strata) in [(30, 10), (31, 10), (100, 7), (5, 10), (997, 10), (2_000, 4)] {
            let draw = draw_stratified(&keys, &scores, size, strata, 9, 1);
            assert_eq!(draw.chosen.len(), size.min(997));
            assert_eq!(draw.strata as usize, strata.min(size.min(997)));
            assert_eq!(draw, draw_stratified(&keys, &scores, size, strata, 9, 1));
            let mut indices: Vec<usize> = draw.chosen.iter().map(|&(index, _)| index).collect();
            indices.dedup();
            assert_eq!(indices.len(), size.min(997));
        }
        assert_ne!(
            draw_stratified(&keys, &scores, 30, 10, 9, 1),
            draw_stratified(&keys, &scores, 30, 10, 10, 1)
        );
    }

    #[test]
    fn every_stratum_of_the_score_range_is_audited() {
        let mut random = Random::new(4);
        let (keys, scores) = slice(2_000, &mut random);
        let draw = draw_stratified(&keys, &scores, 50, 10, 0, 0);
        let mut per_stratum = [0usize; 10];
        for &(index, stratum) in &draw.chosen {
            per_stratum[stratum as usize] += 1;
            // A stratum holds a tenth of the ranked scores.
            let below = scores
                .iter()
                .filter(|&&other| other < scores[index])
                .count();
            let at_or_below = scores
                .iter()
                .filter(|&&other| other <= scores[index])
                .count();
            let (low, high) = (stratum as usize * 200, (stratum as usize + 1) * 200);
            assert!(below < high && at_or_below > low, "{stratum} {below}");
        }
        assert!(
            per_stratum.iter().all(|&count| count == 5),
            "{per_stratum:?}"
        );
    }

    /// The recorded inclusion probability is the one the draw has: over
    /// many seeds, every row is drawn in size / rows of them, including
    /// rows of strata whose share of the sample is fractional.
    #[test]
    fn each_row_is_drawn_with_the_recorded_probability() {
        let mut random = Random::new(5);
        let (keys, scores) = slice(103, &mut random);
        let (size, strata, seeds) = (17usize, 6usize, 20_000u64);
        let mut drawn = vec![0u64; keys.len()];
        let mut probability = 0.0;
        for seed in 0..seeds {
            let draw = draw_stratified(&keys, &scores, size, strata, seed, 42);
            probability = draw.inclusion_probability;
            for &(index, _) in &draw.chosen {
                drawn[index] += 1;
            }
        }
        assert!((probability - 17.0 / 103.0).abs() < 1e-15);
        let expected = seeds as f64 * probability;
        let sigma = (expected * (1.0 - probability)).sqrt();
        for (index, &count) in drawn.iter().enumerate() {
            assert!(
                (count as f64 - expected).abs() < 5.0 * sigma,
                "row {index}: {count} of {seeds} against {expected:.0}"
            );
        }
    }
}
