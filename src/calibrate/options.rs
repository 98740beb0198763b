//! What a calibration is asked to do.

use crate::schema::Tiers;
use crate::schema::calibration::{Holdout, Policy, Scope, TierTest};
use crate::units::{Confidence, Fraction, Target};

/// A calibration request; its quantities were checked when made.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrateOptions {
    pub policy: Policy,
    pub target: Target,
    pub confidence: Option<Confidence>,
    pub holdout: Option<Holdout>,
    pub scope: Scope,
    /// Most frontier points per slice in the document; 0 keeps all.
    pub frontier_points: usize,
    /// With a confidence: hold the guarantee for all slices jointly
    /// (Bonferroni: each slice certified at δ / slices) rather than for each.
    pub familywise: bool,
    /// The half-width of the corrected bound the audit summary sizes the
    /// audited sample for.
    pub audit_width: Fraction,
    /// An audit set drawn by `routeval sample --audit`, with its verdicts
    /// (`--audits`).
    pub audits: Option<std::path::PathBuf>,
    /// With a confidence and more than two tiers: how the candidate
    /// assignments are tested (`--tier-test`).
    pub tier_test: TierTest,
    /// With a confidence over more than two tiers: an earlier calibration
    /// of the same tiers whose frontier orders each slice's candidates, so
    /// every row tests them (`--order-from`).
    pub order_from: Option<std::path::PathBuf>,
    /// The tiers, cheapest first; `None`: the file's metadata, else small
    /// and large.
    pub tiers: Option<Tiers>,
    /// With more than two tiers: candidate thresholds per tier boundary.
    pub grid: usize,
}

impl CalibrateOptions {
    /// The confidence as a number, where one is asked.
    pub(super) fn confidence_level(&self) -> Option<f64> {
        self.confidence.map(Confidence::get)
    }
}
