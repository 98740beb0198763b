//! The random numbers behind exploration draws: SplitMix64 over a shared
//! counter, seeded from the process's entropy at start. Each request takes
//! two numbers (whether it explores, and which tier) without a lock; the
//! probabilities a record carries are those of the draw, not estimates of
//! the stream's.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::random::{GOLDEN_GAMMA, finalise, unit_of};

#[derive(Debug)]
pub struct Draws {
    state: AtomicU64,
}

impl Draws {
    /// A stream no other process shares: std's per-process random hasher
    /// keys mixed with the start time.
    pub fn from_entropy(started_ms: i64) -> Draws {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_i64(started_ms);
        Draws::seeded(hasher.finish())
    }

    pub fn seeded(seed: u64) -> Draws {
        Draws {
            state: AtomicU64::new(seed),
        }
    }

    /// A uniform number in [0, 1).
    pub fn unit(&self) -> f64 {
        let state = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        unit_of(finalise(state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_in_the_unit_interval() {
        let draws = Draws::seeded(7);
        let values: Vec<f64> = (0..10_000).map(|_| draws.unit()).collect();
        assert!(values.iter().all(|value| (0.0..1.0).contains(value)));
        let below = values.iter().filter(|value| **value < 0.25).count();
        // Binomial(10,000, 0.25): sd 43; six of them either side.
        assert!((2_240..=2_760).contains(&below), "{below}");
        assert_ne!(Draws::from_entropy(1).unit(), Draws::from_entropy(1).unit());
    }
}
