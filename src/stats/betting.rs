//! Betting confidence sequences for the mean of independent values in a
//! known range (Waudby-Smith and Ramdas, JRSSB 2024, Theorem 3 with the
//! predictable plug-in bets of their Section 5): intervals that hold at
//! every sample size at once, so a figure may be recomputed on growing data
//! any number of times and read at any of them.
//!
//! Why it holds: scaled into [0, 1], each value `y` has mean `m` given the
//! ones before it. For every candidate mean `m`, a gambler who stakes a
//! fraction `λ` fixed before `y` is seen (predictable) on "the mean is
//! above m" multiplies their capital by `1 + λ(y − m)`, which is never
//! negative with `λ ≤ c/m` and has expectation 1 at the true mean: the
//! capital is a nonnegative martingale starting at 1, so by Ville's
//! inequality it ever reaches `2/α` with probability at most `α/2`. The
//! sequence is every `m` at which neither that capital nor its mirror (on
//! "below m") has reached `2/α`: each side errs with at most `α/2` over all
//! sample sizes. The bets adapt to the variance seen so far, which is why
//! the sequence is narrow where the values say much and only the range is
//! paid where they say little.
//!
//! Values are held in blocks of consecutive values sharing one bet (the bet
//! of a block is fixed from the values before it, so still predictable),
//! each block as its distinct values and their counts: a long run of equal
//! values (an unlabelled request's zero, a direct model's few values) costs
//! one entry, and evaluating the capital at a mean costs one logarithm an
//! entry.

use std::collections::HashMap;

/// The largest fraction of capital staked against the candidate mean:
/// Waudby-Smith and Ramdas's `c = 1/2`.
const MAX_STAKE: f64 = 0.5;

/// The most values one block holds, and the share of the values before it
/// that a block may grow to: early blocks hold one value each, so the bets
/// learn the variance as fast as the values arrive.
const MAX_BLOCK: u64 = 256;
const BLOCK_SHARE: u64 = 8;

/// Bisection steps, each halving the bracket: 2⁻⁴⁸ of the range.
const STEPS: usize = 48;

#[derive(Debug, Clone, PartialEq)]
struct Block {
    /// The bet before its cut at `c/m` (or `c/(1 − m)`).
    bet: f64,
    /// Distinct values (scaled into [0, 1]) and how many times each came.
    values: Vec<(f64, u64)>,
    count: u64,
}

/// The values seen so far of one series, in order, and the bets that would
/// have been placed on them.
#[derive(Debug, Clone, PartialEq)]
pub struct BettingSequence {
    low: f64,
    width: f64,
    /// `ln(2/α)`, which sizes the bets, fixed by the confidence.
    log_level: f64,
    n: u64,
    sum: f64,
    squares: f64,
    blocks: Vec<Block>,
    index: HashMap<u64, usize>,
}

/// Which way the capital bets: that the mean is above the candidate
/// (`Above`, whose capital refutes means below the truth) or below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Above,
    Below,
}

impl BettingSequence {
    /// A sequence of values in [`low`, `high`] (which must be wider than a
    /// point) at `confidence`.
    pub fn new(low: f64, high: f64, confidence: f64) -> BettingSequence {
        let alpha = (1.0 - confidence).clamp(f64::MIN_POSITIVE, 1.0);
        BettingSequence {
            low,
            width: (high - low).max(f64::MIN_POSITIVE),
            log_level: (2.0 / alpha).ln(),
            n: 0,
            sum: 0.0,
            squares: 0.0,
            blocks: Vec::new(),
            index: HashMap::new(),
        }
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn scale(&self, value: f64) -> f64 {
        ((value - self.low) / self.width).clamp(0.0, 1.0)
    }

    /// The bet on the next value: `sqrt(2 ln(2/α) / (σ̂² t ln(1 + t)))`,
    /// with `σ̂²` the variance of the values before it shrunk toward 1/4
    /// and `t` its index.
    fn next_bet(&self) -> f64 {
        let t = (self.n + 1) as f64;
        let variance = (0.25 + self.squares) / t;
        (2.0 * self.log_level / (variance * t * (1.0 + t).ln())).sqrt()
    }

    /// Adds the next value, which must lie in the range.
    pub fn push(&mut self, value: f64) {
        let scaled = self.scale(value);
        let open = self.blocks.last().is_some_and(|block| {
            block.count < (self.n.saturating_sub(block.count) / BLOCK_SHARE).clamp(1, MAX_BLOCK)
        });
        if !open {
            let bet = self.next_bet();
            self.blocks.push(Block {
                bet,
                values: Vec::new(),
                count: 0,
            });
            self.index.clear();
        }
        let block = self.blocks.last_mut().expect("a block is open");
        match self.index.get(&scaled.to_bits()) {
            Some(&at) => block.values[at].1 += 1,
            None => {
                self.index.insert(scaled.to_bits(), block.values.len());
                block.values.push((scaled, 1));
            }
        }
        block.count += 1;
        self.n += 1;
        self.sum += scaled;
        // The running mean includes this value, shrunk toward 1/2.
        let mean = (0.5 + self.sum) / (self.n as f64 + 1.0);
        self.squares += (scaled - mean).powi(2);
    }

    /// The log of the capital of the bets on `side` against the scaled
    /// mean `m`.
    fn log_capital(&self, side: Side, m: f64) -> f64 {
        let (cap, sign) = match side {
            Side::Above => (MAX_STAKE / m, 1.0),
            Side::Below => (MAX_STAKE / (1.0 - m), -1.0),
        };
        self.blocks
            .iter()
            .map(|block| {
                let stake = sign * block.bet.min(cap);
                block
                    .values
                    .iter()
                    .map(|&(value, count)| count as f64 * (stake * (value - m)).ln_1p())
                    .sum::<f64>()
            })
            .sum()
    }

    /// Whether the bets on `side` have refuted the mean `mean` (in the
    /// values' own units): their capital reached `2/α`.
    pub fn refutes(&self, side: Side, mean: f64) -> bool {
        let m = (mean - self.low) / self.width;
        if !(0.0..=1.0).contains(&m) {
            return true;
        }
        self.log_capital(side, m) >= self.log_level
    }

    /// The sequence at the values seen so far, cut to [`within.0`,
    /// `within.1`] (the quantity's own range, in the values' units); `None`
    /// before any value. Where every mean of the range is refuted on one
    /// side (which happens with probability at most α/2), the bound sits at
    /// the range's edge.
    pub fn interval(&self, within: (f64, f64)) -> Option<(f64, f64)> {
        if self.n == 0 {
            return None;
        }
        let (from, to) = (self.scale(within.0), self.scale(within.1));
        let lower = self.edge(Side::Above, from, to);
        let upper = self.edge(Side::Below, from, to);
        let unscale = |m: f64| self.low + m * self.width;
        Some((unscale(lower), unscale(upper.max(lower))))
    }

    /// The edge of the means the bets on `side` refuted, searched from the
    /// range's end they refute first (`from` for `Above`, `to` for
    /// `Below`): the capital is monotone in the mean, so bisection finds
    /// it.
    fn edge(&self, side: Side, from: f64, to: f64) -> f64 {
        let refuted = |m: f64| self.log_capital(side, m) >= self.log_level;
        let (mut refuted_at, mut standing_at) = match side {
            Side::Above => (from, to),
            Side::Below => (to, from),
        };
        if !refuted(refuted_at) {
            return refuted_at;
        }
        if refuted(standing_at) {
            return standing_at;
        }
        for _ in 0..STEPS {
            let middle = (refuted_at + standing_at) / 2.0;
            if refuted(middle) {
                refuted_at = middle;
            } else {
                standing_at = middle;
            }
        }
        // The bound is the refuted side of the last bracket: never inside
        // the sequence's true edge.
        refuted_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Random, empirical_bernstein_interval};

    #[test]
    fn the_sequence_holds_the_mean_at_every_size_at_once() {
        // Heavy-tailed weighted terms: 20 with probability 0.04 (mean 0.8).
        let mut random = Random::new(11);
        let (streams, length) = (400, 3_000);
        let mut ever_missed = 0;
        for _ in 0..streams {
            let mut sequence = BettingSequence::new(0.0, 20.0, 0.9);
            let mut missed = false;
            for index in 0..length {
                sequence.push(if random.unit() < 0.04 { 20.0 } else { 0.0 });
                // Every look, from the first: the guarantee is over all.
                if index % 10 == 9 {
                    missed |=
                        sequence.refutes(Side::Above, 0.8) || sequence.refutes(Side::Below, 0.8);
                }
            }
            ever_missed += usize::from(missed);
        }
        assert!(
            ever_missed <= streams / 10,
            "{ever_missed} of {streams} streams ever left the mean out"
        );
    }

    #[test]
    fn a_refuted_mean_lies_outside_the_interval_and_a_standing_one_inside() {
        let mut random = Random::new(2);
        let mut sequence = BettingSequence::new(-1.0, 3.0, 0.95);
        for _ in 0..2_000 {
            sequence.push(if random.unit() < 0.3 { 3.0 } else { -1.0 });
        }
        let (lower, upper) = sequence.interval((-1.0, 3.0)).unwrap();
        assert!(lower < 0.2 && 0.2 < upper, "{lower} {upper}");
        assert!(sequence.refutes(Side::Above, lower - 0.01));
        assert!(!sequence.refutes(Side::Above, lower + 0.01));
        assert!(sequence.refutes(Side::Below, upper + 0.01));
        assert!(!sequence.refutes(Side::Below, upper - 0.01));
        // Cut to a narrower range, the bounds stay within it.
        let (cut_lower, cut_upper) = sequence.interval((0.25, 0.5)).unwrap();
        assert!((0.25..=0.5).contains(&cut_lower) && (0.25..=0.5).contains(&cut_upper));
        assert_eq!(
            BettingSequence::new(0.0, 1.0, 0.9).interval((0.0, 1.0)),
            None
        );
    }

    #[test]
    fn where_the_values_vary_little_it_is_narrower_than_the_fixed_interval() {
        // Weighted terms that are mostly small: the range is paid by the
        // fixed interval's range term, not by the sequence.
        let mut random = Random::new(9);
        let values: Vec<f64> = (0..20_000)
            .map(|_| if random.unit() < 0.5 { 2.0 } else { 0.0 })
            .collect();
        let mut sequence = BettingSequence::new(0.0, 50.0, 0.95);
        for &value in &values {
            sequence.push(value);
        }
        let (lower, upper) = sequence.interval((0.0, 50.0)).unwrap();
        let (fixed_lower, fixed_upper) =
            empirical_bernstein_interval(&values, 0.0, 50.0, 0.95).unwrap();
        assert!(
            upper - lower < fixed_upper - fixed_lower,
            "sequence {lower}..{upper}, fixed {fixed_lower}..{fixed_upper}"
        );
        assert!(lower < 1.0 && 1.0 < upper);
    }

    #[test]
    fn equal_values_share_an_entry() {
        let mut sequence = BettingSequence::new(0.0, 1.0, 0.9);
        for index in 0..100_000 {
            sequence.push(if index % 1000 == 0 { 1.0 } else { 0.0 });
        }
        let entries: usize = sequence.blocks.iter().map(|block| block.values.len()).sum();
        assert!(entries < 2_000, "{entries} entries for 100,000 values");
        assert_eq!(sequence.len(), 100_000);
    }
}
