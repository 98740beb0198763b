//! `calibration.json`: the versioned document `calibrate` writes and `gate`,
//! `drift`, `routes` and `report` read, with the choices it records (policy,
//! scope, holdout, guarantee). Changing a field means bumping
//! [`CALIBRATION_SCHEMA_VERSION`] and updating `docs/schema.md`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use super::policy::Policy;
use crate::stats::random::{splitmix64, unit_of};

/// Version 6 added `draw` to a slice's `audit`; version 5 the held-out
/// quality's interval and verdict; version 4 added `tiers` and per-slice `tiered` for calibrations of more
/// than two tiers (absent for two); version 3 added `guarantee` and
/// `slice_confidence`; versions 1 and 2 read as per-slice guarantees at
/// `confidence`.
pub const CALIBRATION_SCHEMA_VERSION: u32 = 7;

/// What `calibrate --out` writes, and so the only file it replaces.
pub const CALIBRATION_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a calibration document",
    crate::atomic::Replaces::Document {
        keys: &[
            "schema_version",
            "routeval_version",
            "results",
            "policy",
            "target",
        ],
        kind: None,
    },
);

/// The slice name used when one threshold is fitted over every row.
pub const GLOBAL_SLICE: &str = "*";

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
        let hash = crate::stats::random::fnv1a(id.as_bytes());
        unit_of(splitmix64(hash ^ splitmix64(self.seed))) < self.fraction
    }
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationDocument {
    #[serde(deserialize_with = "crate::version::known::<_, 1, CALIBRATION_SCHEMA_VERSION>")]
    pub schema_version: u32,
    pub routeval_version: String,
    pub results: InputFile,
    pub policy: Policy,
    /// The results' column the thresholds apply to; version 1 documents
    /// (which had no such field) read the default, `score`.
    #[serde(default = "default_score_column")]
    pub score_column: String,
    pub target: f64,
    /// `None` for a plain fit.
    pub confidence: Option<f64>,
    /// Whether `confidence` holds for each slice or for all slices jointly.
    #[serde(default)]
    pub guarantee: Guarantee,
    /// The confidence each slice was certified at: `confidence` per slice,
    /// or 1 − (1 − confidence) / slices for a family-wise guarantee.
    #[serde(default)]
    pub slice_confidence: Option<f64>,
    pub scope: Scope,
    pub holdout: Option<Holdout>,
    /// Whether every slice has a threshold.
    pub feasible: bool,
    /// More than two tiers: their names, cheapest first. Absent for the
    /// two-tier `small`, `large`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<Vec<String>>,
    /// Sorted by slice name.
    pub slices: Vec<SliceCalibration>,
}

impl CalibrationDocument {
    /// Refuses a calibration of more than two tiers in a stage that reads
    /// two, naming the file and the flag.
    pub fn two_tiers(&self, path: &std::path::Path, flag: &str) -> Result<(), String> {
        match &self.tiers {
            Some(tiers) if tiers.len() > 2 => Err(format!(
                "{}: a calibration of {} tiers ({}); {flag} reads two-tier calibrations",
                path.display(),
                tiers.len(),
                tiers.join(", ")
            )),
            _ => Ok(()),
        }
    }
}

fn default_score_column() -> String {
    crate::schema::Column::Score.name().to_owned()
}

/// The file a document was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    pub path: String,
    pub sha256: String,
    pub rows: u64,
}

impl InputFile {
    /// The file at `path`, of `rows` rows, by its digest.
    pub fn of_file(
        path: &std::path::Path,
        rows: u64,
    ) -> Result<InputFile, crate::digest::UnreadableFile> {
        Ok(InputFile {
            path: path.display().to_string(),
            sha256: crate::digest::sha256_path(path)?,
            rows,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceCalibration {
    pub slice: String,
    /// Calibration rows (held-out rows excluded).
    pub n: u64,
    pub feasible: bool,
    /// Why the slice is infeasible; `None` when feasible.
    pub reason: Option<String>,
    /// Escalate rows with `score >= threshold`; `None` when infeasible.
    pub threshold: Option<Threshold>,
    pub quality: Option<f64>,
    /// One-sided Clopper–Pearson lower bound on `quality` at the document's
    /// confidence; `None` for a plain fit or an infeasible slice.
    pub quality_lower_bound: Option<f64>,
    /// Mean USD per request.
    pub mean_cost: Option<f64>,
    pub escalation_rate: Option<f64>,
    /// 1 − mean_cost / always-large mean cost.
    pub savings_vs_always_large: Option<f64>,
    /// The best quality any threshold reaches on this slice.
    pub max_quality: f64,
    pub baselines: Baselines,
    pub holdout: Option<HoldoutResult>,
    /// How many thresholds are on the cost–quality Pareto frontier.
    pub frontier_points: u64,
    /// The Pareto frontier, cheapest first; thinned to evenly spaced points
    /// (both ends kept) when it has more than the calibration's limit.
    pub frontier: Vec<FrontierPoint>,
    /// With `audited_ok_small`/`audited_ok_large` in the results: how the
    /// grader did against the humans, and the corrected quality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditSummary>,
    /// More than two tiers: the chosen thresholds and what they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiered: Option<TieredChoice>,
}

/// A slice's calibration over k tiers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieredChoice {
    /// Predictive: k − 1 ascending thresholds on the router's score (below
    /// the first → the first tier, at or above the last → the last);
    /// cascade: one per non-final stage on that stage's verifier score.
    /// Empty when the slice is infeasible.
    pub thresholds: Vec<Threshold>,
    /// Share of rows each tier serves at the chosen thresholds.
    pub served: Vec<f64>,
    /// Cascade: share of rows whose wrong answer a verifier accepted.
    pub false_accept_rate: Option<f64>,
    /// Candidate assignments searched: the family `--confidence` divides δ
    /// by.
    pub candidates: u64,
    /// Cut values per threshold.
    pub grid: Vec<usize>,
    /// Every distinct score was a candidate.
    pub exact: bool,
    /// The cost–quality frontier, cheapest first (thinned like `frontier`).
    pub frontier: Vec<TieredPoint>,
    /// With a confidence: how the choice was certified (version 7 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certification: Option<TierCertification>,
}

/// How a k-tier calibration tests its candidate assignments
/// (`calibrate --tier-test`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TierTest {
    /// Fixed-sequence testing at the full δ along an order found on a part
    /// of the slice's rows, tested on the rest.
    #[default]
    FixedSequence,
    /// Every candidate at δ / candidates.
    Bonferroni,
}

/// How one slice's k-tier choice was certified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierCertification {
    pub test: TierTest,
    /// Fixed sequence: where the order came from (`split`: the frontier of
    /// every third row of the slice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// Rows that ordered the candidates and rows that tested them (fixed
    /// sequence); every row tests under Bonferroni.
    pub order_rows: u64,
    pub test_rows: u64,
    /// Candidates tested, each at `level`: the certified ones and the first
    /// that was not (fixed sequence), or every candidate (Bonferroni).
    pub tested: u64,
    /// The level each test was made at: δ, or δ / candidates.
    pub level: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieredPoint {
    pub thresholds: Vec<Threshold>,
    pub quality: f64,
    pub mean_cost: f64,
    pub served: Vec<f64>,
}

/// The grader against the human verdicts on a slice's audited rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSummary {
    /// Rows with both answers audited.
    pub rows: u64,
    /// How the audited rows were chosen: what the correction's guarantee
    /// rests on. Documents before version 6 had no draw to record.
    #[serde(default)]
    pub draw: AuditDraw,
    /// Share of audited answers (both tiers) where grader and human agree.
    pub agreement: f64,
    /// Of the answers the human rejected, the share the grader accepted.
    pub grader_false_accept: Option<f64>,
    /// Of the answers the human accepted, the share the grader rejected.
    pub grader_false_reject: Option<f64>,
    /// At the chosen threshold: the grader's quality corrected by the
    /// audited rows (prediction-powered), and its lower bound at the
    /// document's confidence.
    pub corrected_quality: Option<f64>,
    pub corrected_lower_bound: Option<f64>,
    /// The half-width the next field is for (`--audit-width`).
    pub half_width: f64,
    /// Audited rows that would bring the corrected bound within
    /// `half_width` of the estimate; null when the grader's share alone is
    /// wider, or there is no chosen threshold.
    pub rows_for_half_width: Option<u64>,
}

/// How a slice's audited rows were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditDraw {
    /// Drawn by `routeval sample --audit`, and the draw made again from the
    /// results matched (`calibrate --audits`): the audits are the random
    /// sample the correction assumes, with known inclusion probabilities.
    Recorded,
    /// Verdicts in the results' own columns, with no record of how the rows
    /// were chosen: the correction assumes a uniform random sample, and
    /// nothing checked it.
    #[default]
    Unrecorded,
}

/// Policies that need no threshold, for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baselines {
    /// Every request answered by the small tier alone.
    pub always_small: Point,
    /// Every request answered by the large tier alone.
    pub always_large: Point,
    /// A perfect router: the large tier only where it is right and the small
    /// tier is not, at no router cost.
    pub oracle: Point,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub quality: f64,
    pub mean_cost: f64,
}

/// The chosen threshold applied to the held-out rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldoutResult {
    pub n: u64,
    /// `None` when the slice has no held-out rows or no threshold.
    pub quality: Option<f64>,
    pub mean_cost: Option<f64>,
    pub escalation_rate: Option<f64>,
    pub meets_target: Option<bool>,
    /// The two-sided Clopper–Pearson interval of `quality` at the
    /// calibration's confidence (0.95 without one); version 5 on.
    #[serde(default)]
    pub quality_interval: Option<[f64; 2]>,
    /// What the held-out rows say of the target; version 5 on.
    #[serde(default)]
    pub verdict: Option<HoldoutVerdict>,
}

impl HoldoutResult {
    /// The threshold on `n` held-out rows: `successes` acceptable answers,
    /// `escalated` requests past the first tier, `cost_usd` in all; the
    /// interval at `confidence` (0.95 without one).
    pub fn measured(
        n: u64,
        successes: u64,
        escalated: u64,
        cost_usd: f64,
        target: f64,
        confidence: Option<f64>,
    ) -> HoldoutResult {
        let quality = successes as f64 / n as f64;
        let interval =
            crate::stats::clopper_pearson_interval(successes, n, 1.0 - confidence.unwrap_or(0.95));
        HoldoutResult {
            n,
            quality: Some(quality),
            mean_cost: Some(cost_usd / n as f64),
            escalation_rate: Some(escalated as f64 / n as f64),
            meets_target: Some(quality >= target),
            quality_interval: Some(interval),
            verdict: Some(HoldoutVerdict::of(quality, interval, target)),
        }
    }

    /// `n` held-out rows and nothing measured on them (none, or no
    /// threshold).
    pub fn unmeasured(n: u64) -> HoldoutResult {
        HoldoutResult {
            n,
            quality: None,
            mean_cost: None,
            escalation_rate: None,
            meets_target: None,
            quality_interval: None,
            verdict: None,
        }
    }
}

/// The held-out quality against the target, read with its noise: a few
/// dozen rows below the target are no evidence that the threshold misses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldoutVerdict {
    /// The held-out quality is at least the target.
    MeetsTarget,
    /// Below the target, but the interval reaches it: no evidence of a miss.
    BelowWithinNoise,
    /// The whole interval is below the target: the threshold misses.
    BelowTarget,
}

impl HoldoutVerdict {
    pub fn of(quality: f64, interval: [f64; 2], target: f64) -> HoldoutVerdict {
        if quality >= target {
            HoldoutVerdict::MeetsTarget
        } else if interval[1] >= target {
            HoldoutVerdict::BelowWithinNoise
        } else {
            HoldoutVerdict::BelowTarget
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontierPoint {
    pub threshold: Threshold,
    pub quality: f64,
    pub mean_cost: f64,
    pub escalation_rate: f64,
}

/// A router or verifier threshold: a finite score, or `"inf"` for escalating
/// nothing (JSON has no infinity).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold(pub f64);

impl Threshold {
    pub fn escalates(&self, score: f64) -> bool {
        super::escalates(score, self.0)
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == f64::INFINITY {
            f.write_str("inf")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl Serialize for Threshold {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 == f64::INFINITY {
            serializer.serialize_str("inf")
        } else {
            serializer.serialize_f64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Threshold;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a finite number or the string \"inf\"")
            }

            fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Threshold, E> {
                if value.is_finite() {
                    Ok(Threshold(value))
                } else {
                    Err(E::custom("threshold must be finite or \"inf\""))
                }
            }

            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Threshold, E> {
                Ok(Threshold(value as f64))
            }

            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Threshold, E> {
                Ok(Threshold(value as f64))
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Threshold, E> {
                if value == "inf" {
                    Ok(Threshold(f64::INFINITY))
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(value), &self))
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The columns of the audit table, every rendering's.
pub const AUDIT_HEADER: [&str; 9] = [
    "slice",
    "audited",
    "draw",
    "agreement",
    "grader false accepts",
    "grader false rejects",
    "corrected q",
    "corrected bound",
    "audited rows for ±W",
];

/// One row per audited slice, or `None` when no slice has audits.
pub fn audit_rows(document: &CalibrationDocument) -> Vec<Vec<String>> {
    let percent =
        |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0));
    let number = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"));
    document
        .slices
        .iter()
        .filter_map(|slice| {
            let audit = slice.audit.as_ref()?;
            Some(vec![
                slice.slice.clone(),
                audit.rows.to_string(),
                match audit.draw {
                    AuditDraw::Recorded => "recorded",
                    AuditDraw::Unrecorded => "unrecorded",
                }
                .to_owned(),
                percent(Some(audit.agreement)),
                percent(audit.grader_false_accept),
                percent(audit.grader_false_reject),
                number(audit.corrected_quality),
                number(audit.corrected_lower_bound),
                audit.rows_for_half_width.map_or_else(
                    || "-".to_owned(),
                    |rows| format!("{rows} (±{})", audit.half_width),
                ),
            ])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_a_number_or_inf() {
        assert_eq!(serde_json::to_string(&Threshold(0.25)).unwrap(), "0.25");
        assert_eq!(
            serde_json::to_string(&Threshold(f64::INFINITY)).unwrap(),
            "\"inf\""
        );
        assert_eq!(
            serde_json::from_str::<Threshold>("\"inf\"").unwrap(),
            Threshold(f64::INFINITY)
        );
        assert_eq!(
            serde_json::from_str::<Threshold>("1").unwrap(),
            Threshold(1.0)
        );
        assert!(serde_json::from_str::<Threshold>("\"-inf\"").is_err());
    }

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
