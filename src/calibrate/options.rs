//! What a calibration is asked to do.

use serde::{Deserialize, Serialize};

pub use crate::policy::Policy;

/// Whether each slice gets its own threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    PerSlice,
    Global,
}

/// A held-out share of each slice, kept out of calibration and used to report
/// how the chosen threshold does on rows it was not fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holdout {
    pub fraction: f64,
    pub seed: u64,
}

impl Holdout {
    /// Whether the row with this id is held out. The split depends only on
    /// the id and the seed, so it survives reordering the file, and it is a
    /// fixed function (FNV-1a, then the SplitMix64 finaliser) so it is the
    /// same on every machine and in every release.
    pub fn holds_out(&self, id: &str) -> bool {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for byte in id.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let mixed = splitmix64(hash ^ splitmix64(self.seed));
        ((mixed >> 11) as f64 / (1u64 << 53) as f64) < self.fraction
    }
}

fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A calibration request, already checked: `target` in (0, 1],
/// `confidence` in (0, 1), the holdout fraction in (0, 1).
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrateOptions {
    pub policy: Policy,
    pub target: f64,
    pub confidence: Option<f64>,
    pub holdout: Option<Holdout>,
    pub scope: Scope,
    /// Most frontier points per slice in the document; 0 keeps all.
    pub frontier_points: usize,
    /// With a confidence: hold the guarantee for all slices jointly
    /// (Bonferroni: each slice certified at δ / slices) rather than for each.
    pub familywise: bool,
    /// The half-width of the corrected bound the audit summary sizes the
    /// audited sample for.
    pub audit_width: f64,
}

/// Which guarantee a certified calibration gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// Each slice on its own misses its target with probability at most δ
    /// (also the reading of a plain fit, which gives none).
    #[default]
    PerSlice,
    /// All slices together: the probability that any slice misses is at
    /// most δ.
    Familywise,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holdout_share_is_close_to_the_fraction_and_stable() {
        let holdout = Holdout {
            fraction: 0.2,
            seed: 7,
        };
        let held = (0..100_000)
            .filter(|row| holdout.holds_out(&format!("prompt-{row}")))
            .count();
        assert!((19_000..21_000).contains(&held), "{held} held out");
        let again = (0..100_000)
            .filter(|row| holdout.holds_out(&format!("prompt-{row}")))
            .count();
        assert_eq!(held, again);
    }

    #[test]
    fn seeds_give_different_splits() {
        let split = |seed| {
            let holdout = Holdout {
                fraction: 0.5,
                seed,
            };
            (0..64)
                .map(|row| holdout.holds_out(&row.to_string()))
                .collect::<Vec<_>>()
        };
        assert_ne!(split(1), split(2));
    }
}
