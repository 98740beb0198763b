//! The report's first screen as one value: which config was signed, why
//! each candidate won or lost, what is guaranteed per slice (and where a
//! guarantee could not be given, why and roughly what would give it), what
//! it costs against always-large, and what changed against the running
//! config. Built once from the documents; the HTML page and the Markdown
//! summary each draw it.

use crate::routes::ResolvedPolicy;
use crate::schema::{CalibrationDocument, CandidateReport, GateReport, Metrics, SliceCalibration};
use crate::stats::clopper_pearson_lower;

use super::curves::SliceCurves;
use super::kit::ReportInputs;

/// What a reviewer decides from.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub signed: Signed,
    /// One line per gate candidate, in the gate's order.
    pub candidates: Vec<CandidateLine>,
    pub guarantee: Option<Guarantee>,
    /// Certified calibrations the guarantee is not already drawn from.
    pub certified: Vec<Guarantee>,
    /// The chosen policy's mean cost against always-large on these rows.
    pub cost: Option<AgainstLarge>,
    /// The chosen candidate against the running config, on the gate's rows.
    pub running: Option<Running>,
}

/// What the gate did with the candidates.
#[derive(Debug, Clone, PartialEq)]
pub enum Signed {
    Config {
        file: String,
        config_id: String,
        version: u64,
        sha256: String,
        /// `None` where the config file could not be read here.
        expires_at: Option<String>,
    },
    /// The gate ran without `--key`: it chose, and signed nothing.
    Unsigned {
        chosen: String,
    },
    NothingPassed {
        candidates: usize,
    },
    /// No `--gate`: the calibrations' thresholds, not a signed config.
    NoGate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Chosen,
    Passed,
    Failed,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Chosen => "chosen",
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CandidateLine {
    /// The file's name without its directory.
    pub name: String,
    pub verdict: Verdict,
    pub quality: f64,
    pub cost_per_1k: f64,
    /// Why, in one line.
    pub reason: String,
}

/// Per slice, what a policy promises on these rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Guarantee {
    /// What the rows describe: the signed config, or a calibration.
    pub source: String,
    pub target: f64,
    /// The confidence the bounds hold at, where any do.
    pub confidence: Option<f64>,
    pub rows: Vec<GuaranteeRow>,
}

impl Guarantee {
    /// The slices without a bound, by name.
    pub fn uncertified(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|row| row.lower_bound.is_none())
            .map(|row| row.slice.as_str())
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GuaranteeRow {
    pub slice: String,
    pub n: u64,
    /// The slice's thresholds, joined; `-` where it has none.
    pub threshold: String,
    pub quality: Option<f64>,
    pub lower_bound: Option<f64>,
    pub cost_per_1k: Option<f64>,
    /// 1 − cost / always-large cost on the slice's rows.
    pub saved_vs_large: Option<f64>,
    /// What the bound costs or would need; empty when nothing needs saying.
    pub note: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgainstLarge {
    pub cost_per_1k: f64,
    pub large_per_1k: f64,
}

impl AgainstLarge {
    pub fn saved(&self) -> f64 {
        1.0 - self.cost_per_1k / self.large_per_1k
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub version: u64,
    pub path: String,
    pub quality_before: Option<f64>,
    pub quality_after: f64,
    pub cost_before_per_1k: Option<f64>,
    pub cost_after_per_1k: f64,
}

/// A value to four places, or `-` where the document has none.
pub fn four_places(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"))
}

/// The decision the documents record.
pub fn decide(inputs: &ReportInputs<'_>) -> Decision {
    let chosen = inputs.gate.and_then(|gate| {
        gate.chosen
            .as_ref()
            .and_then(|file| gate.candidates.iter().find(|c| &c.file == file))
    });
    let guarantee = match (inputs.gate, chosen) {
        (Some(gate), Some(candidate)) => Some(chosen_guarantee(inputs, gate, candidate)),
        (Some(_), None) => None,
        (None, _) => basis_calibration(inputs)
            .map(|calibration| calibration_guarantee(calibration, inputs.confidence, inputs)),
    };
    let basis = guarantee.as_ref().map(|g| g.source.clone());
    let certified = inputs
        .calibrations
        .iter()
        .chain(inputs.tiered)
        .filter(|calibration| calibration.confidence.is_some())
        .map(|calibration| calibration_guarantee(calibration, inputs.confidence, inputs))
        .filter(|certified| Some(&certified.source) != basis.as_ref())
        .collect();
    let cost = chosen_cost(inputs, chosen).map(|cost_per_1k| AgainstLarge {
        cost_per_1k,
        large_per_1k: always_large_per_1k(inputs.curves),
    });
    Decision {
        signed: signed(inputs),
        candidates: inputs.gate.map(candidate_lines).unwrap_or_default(),
        guarantee,
        certified,
        cost: cost.filter(|cost| cost.large_per_1k > 0.0),
        running: running(inputs.gate, chosen),
    }
}

/// The file's last component: candidates are told apart by their names.
pub fn file_name(file: &str) -> String {
    std::path::Path::new(file).file_name().map_or_else(
        || file.to_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}

fn signed(inputs: &ReportInputs<'_>) -> Signed {
    let Some(gate) = inputs.gate else {
        return Signed::NoGate;
    };
    match (&gate.emitted, &gate.chosen) {
        (Some(emitted), _) => Signed::Config {
            file: emitted.config.clone(),
            config_id: inputs
                .signed
                .map_or_else(String::new, |config| config.config_id.clone()),
            version: emitted.version,
            sha256: emitted.sha256.clone(),
            expires_at: inputs.signed.map(|config| config.expires_at.clone()),
        },
        (None, Some(chosen)) => Signed::Unsigned {
            chosen: file_name(chosen),
        },
        (None, None) => Signed::NothingPassed {
            candidates: gate.candidates.len(),
        },
    }
}

fn candidate_lines(gate: &GateReport) -> Vec<CandidateLine> {
    let passed = gate.candidates.iter().filter(|c| c.passed).count();
    let chosen_cost = gate
        .candidates
        .iter()
        .find(|c| Some(&c.file) == gate.chosen.as_ref())
        .map(|c| c.overall.mean_cost);
    gate.candidates
        .iter()
        .map(|candidate| {
            let verdict = if Some(&candidate.file) == gate.chosen.as_ref() {
                Verdict::Chosen
            } else if candidate.passed {
                Verdict::Passed
            } else {
                Verdict::Failed
            };
            let reason = match verdict {
                Verdict::Chosen if passed == 1 => {
                    "the only candidate that passed every rule".into()
                }
                Verdict::Chosen => format!("the cheapest of the {passed} that passed every rule"),
                Verdict::Passed => match chosen_cost.filter(|cost| *cost > 0.0) {
                    Some(cost) => format!(
                        "passed every rule, at {:.1}× the chosen one's cost",
                        candidate.overall.mean_cost / cost
                    ),
                    None => "passed every rule, and costs more than the chosen one".into(),
                },
                Verdict::Failed => failure_line(candidate),
            };
            CandidateLine {
                name: file_name(&candidate.file),
                verdict,
                quality: candidate.overall.quality,
                cost_per_1k: candidate.overall.mean_cost * 1000.0,
                reason,
            }
        })
        .collect()
}

/// A failed candidate's first failure, its rule and slice, and how many
/// more it had.
fn failure_line(candidate: &CandidateReport) -> String {
    let Some(first) = candidate.failures.first() else {
        return "failed".into();
    };
    let rule = serde_json::to_value(first.rule)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    let slice = first
        .slice
        .as_deref()
        .map(|slice| format!(" [{slice}]"))
        .unwrap_or_default();
    let more = match candidate.failures.len() - 1 {
        0 => String::new(),
        1 => " (and 1 more failure)".into(),
        more => format!(" (and {more} more failures)"),
    };
    format!("{rule}{slice}: {}{more}", first.message)
}

/// The slices of the chosen candidate: the signed config's thresholds, the
/// gate's measurements, and a bound from the gate or from a certified
/// calibration of exactly those thresholds.
fn chosen_guarantee(
    inputs: &ReportInputs<'_>,
    gate: &GateReport,
    candidate: &CandidateReport,
) -> Guarantee {
    let policy = inputs.signed.map(|config| &config.table.policy);
    let mut confidence = gate.confidence;
    let rows = candidate
        .slices
        .iter()
        .map(|metrics| {
            let thresholds = policy.map(|policy| slice_thresholds(policy, &metrics.slice));
            let certified = match (metrics.quality_lower_bound, gate.confidence) {
                (Some(bound), Some(at)) => Some((bound, at)),
                _ => thresholds
                    .as_ref()
                    .and_then(|thresholds| certified_at(inputs, &metrics.slice, thresholds)),
            };
            if let Some((_, at)) = certified {
                confidence = Some(at);
            }
            gate_row(inputs, gate.target, metrics, thresholds, certified)
        })
        .collect();
    Guarantee {
        source: format!(
            "the chosen table {} ({}), on the gate's {} rows",
            file_name(&candidate.file),
            candidate.policy,
            candidate.overall.n
        ),
        target: gate.target,
        confidence,
        rows,
    }
}

fn gate_row(
    inputs: &ReportInputs<'_>,
    target: f64,
    metrics: &Metrics,
    thresholds: Option<Vec<f64>>,
    certified: Option<(f64, f64)>,
) -> GuaranteeRow {
    let note = match certified {
        Some((bound, _)) => bound_note(metrics.quality, bound, metrics.n, target),
        None => what_if(metrics.quality, metrics.n, target, inputs.confidence),
    };
    GuaranteeRow {
        slice: metrics.slice.clone(),
        n: metrics.n,
        threshold: thresholds.map_or_else(|| "-".to_owned(), |t| threshold_text(&t)),
        quality: Some(metrics.quality),
        lower_bound: certified.map(|(bound, _)| bound),
        cost_per_1k: Some(metrics.mean_cost * 1000.0),
        saved_vs_large: saved(inputs.curves, &metrics.slice, metrics.mean_cost),
        note,
    }
}

/// A config policy's thresholds for one slice; empty for a policy that has
/// none.
fn slice_thresholds(policy: &ResolvedPolicy, slice: &str) -> Vec<f64> {
    match policy {
        ResolvedPolicy::Predictive { thresholds, .. }
        | ResolvedPolicy::Cascade { thresholds, .. } => thresholds
            .for_slice(slice)
            .map(|t| t.0)
            .into_iter()
            .collect(),
        ResolvedPolicy::PredictiveTiers { thresholds, .. }
        | ResolvedPolicy::CascadeStages { thresholds, .. } => thresholds
            .for_slice(slice)
            .map(|ts| ts.iter().map(|t| t.0).collect())
            .unwrap_or_default(),
        ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => Vec::new(),
    }
}

fn threshold_text(thresholds: &[f64]) -> String {
    if thresholds.is_empty() {
        return "-".into();
    }
    thresholds
        .iter()
        .map(|&t| super::kit::threshold_text(t))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The bound and confidence of a certified calibration that chose exactly
/// `thresholds` for `slice`.
fn certified_at(inputs: &ReportInputs<'_>, slice: &str, thresholds: &[f64]) -> Option<(f64, f64)> {
    inputs
        .calibrations
        .iter()
        .chain(inputs.tiered)
        .filter_map(|calibration| Some((calibration, calibration.confidence?)))
        .find_map(|(calibration, confidence)| {
            let chosen = calibration.slices.iter().find(|s| s.slice == slice)?;
            (calibration_thresholds(chosen) == thresholds)
                .then_some((chosen.quality_lower_bound?, confidence))
        })
}

fn calibration_thresholds(slice: &SliceCalibration) -> Vec<f64> {
    match (&slice.tiered, slice.threshold) {
        (Some(tiered), _) => tiered.thresholds.iter().map(|t| t.0).collect(),
        (None, Some(threshold)) => vec![threshold.0],
        (None, None) => Vec::new(),
    }
}

/// Without a gate: the certified calibration if one was given, else the
/// first of more tiers, else the first.
fn basis_calibration<'a>(inputs: &ReportInputs<'a>) -> Option<&'a CalibrationDocument> {
    let every = || inputs.tiered.iter().chain(inputs.calibrations);
    every()
        .find(|calibration| calibration.confidence.is_some())
        .or_else(|| every().next())
}

/// A calibration's slices as guarantees.
fn calibration_guarantee(
    calibration: &CalibrationDocument,
    what_if_confidence: f64,
    inputs: &ReportInputs<'_>,
) -> Guarantee {
    let plain = inputs
        .calibrations
        .iter()
        .chain(inputs.tiered)
        .find(|other| {
            other.confidence.is_none()
                && other.policy == calibration.policy
                && other.tiers == calibration.tiers
                && other.score_column == calibration.score_column
        });
    let rows = calibration
        .slices
        .iter()
        .map(|slice| {
            let note = match (slice.quality, slice.quality_lower_bound) {
                _ if !slice.feasible => infeasible_note(calibration, slice),
                (Some(quality), Some(bound)) => {
                    let mut note = bound_note(quality, bound, slice.n, calibration.target);
                    if let Some(extra) = plain.and_then(|plain| guarantee_price(plain, slice)) {
                        note = join_notes(note, extra);
                    }
                    note
                }
                (Some(quality), None) => {
                    what_if(quality, slice.n, calibration.target, what_if_confidence)
                }
                (None, _) => String::new(),
            };
            GuaranteeRow {
                slice: slice.slice.clone(),
                n: slice.n,
                threshold: if slice.feasible {
                    threshold_text(&calibration_thresholds(slice))
                } else {
                    "-".into()
                },
                quality: slice.quality,
                lower_bound: slice.quality_lower_bound,
                cost_per_1k: slice.mean_cost.map(|cost| cost * 1000.0),
                saved_vs_large: slice.savings_vs_always_large,
                note,
            }
        })
        .collect();
    Guarantee {
        source: calibration_label(calibration),
        target: calibration.target,
        confidence: calibration.confidence,
        rows,
    }
}

/// How a calibration is named on the first screen.
pub fn calibration_label(calibration: &CalibrationDocument) -> String {
    let tiers = calibration
        .tiers
        .as_ref()
        .filter(|tiers| tiers.len() > 2)
        .map(|tiers| format!(" {}", tiers.join("→")))
        .unwrap_or_default();
    let kind = match calibration.confidence {
        Some(confidence) => format!("certified at {confidence}"),
        None => "plain fit".into(),
    };
    format!(
        "calibration: {}{tiers} on {}, {kind}",
        calibration.policy.name(),
        calibration.score_column
    )
}

fn join_notes(a: String, b: String) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b,
        (_, true) => a,
        _ => format!("{a}; {b}"),
    }
}

/// What the bound gives up against the rows' quality, said where the
/// slice is small enough for it to matter.
fn bound_note(quality: f64, bound: f64, n: u64, target: f64) -> String {
    if bound < target {
        return format!("the bound {bound:.4} is below the target {target}");
    }
    if n < SMALL_SLICE {
        format!(
            "small slice: the bound is {:.4} under the rows' quality at n = {n}",
            quality - bound
        )
    } else {
        String::new()
    }
}

/// Slices with fewer rows are called small: at 100 rows a Clopper–Pearson
/// bound at 90% sits about five points under a quality near 0.8.
const SMALL_SLICE: u64 = 100;

/// A slice without a bound: what these rows would certify at the report's
/// `--confidence`, and roughly how many rows at this quality would certify
/// the target.
fn what_if(quality: f64, n: u64, target: f64, confidence: f64) -> String {
    let delta = 1.0 - confidence;
    let bound = clopper_pearson_lower((quality * n as f64).round() as u64, n, delta);
    let mut note = format!("not certified; at {confidence} these rows certify ≥ {bound:.4}");
    if bound < target {
        note.push_str(&match rows_to_certify(quality, target, delta) {
            Some(rows) => format!("; about {rows} rows at this quality would certify {target}"),
            None => format!("; no number of rows at this quality certifies {target}"),
        });
    }
    note
}

fn infeasible_note(calibration: &CalibrationDocument, slice: &SliceCalibration) -> String {
    let reason = slice.reason.clone().unwrap_or_else(|| "infeasible".into());
    let Some(confidence) = calibration.confidence else {
        return reason;
    };
    let more = match rows_to_certify(slice.max_quality, calibration.target, 1.0 - confidence) {
        Some(rows) => format!(
            "about {rows} rows at its best quality {:.4} would certify {}",
            slice.max_quality, calibration.target
        ),
        None => format!(
            "its best quality {:.4} is not above the target, so no number of rows would certify it",
            slice.max_quality
        ),
    };
    join_notes(reason, more)
}

/// What a certified slice pays over the plain fit of the same policy.
fn guarantee_price(plain: &CalibrationDocument, certified: &SliceCalibration) -> Option<String> {
    let plain_cost = plain
        .slices
        .iter()
        .find(|slice| slice.slice == certified.slice)?
        .mean_cost?;
    let cost = certified.mean_cost?;
    (cost > plain_cost && plain_cost > 0.0).then(|| {
        format!(
            "the guarantee costs {:.1}% more than the plain fit",
            (cost / plain_cost - 1.0) * 100.0
        )
    })
}

/// The smallest number of rows, rounded up to two significant digits, at
/// which `quality` on the rows gives a one-sided Clopper–Pearson bound of
/// at least `target`; `None` when no number would (quality not above it).
pub fn rows_to_certify(quality: f64, target: f64, delta: f64) -> Option<u64> {
    if quality <= target || !(0.0..1.0).contains(&delta) || delta == 0.0 {
        return None;
    }
    let certifies =
        |n: u64| clopper_pearson_lower((quality * n as f64).floor() as u64, n, delta) >= target;
    let mut high = 1u64;
    while !certifies(high) {
        high *= 2;
        if high > 1 << 40 {
            return None;
        }
    }
    let mut low = high / 2;
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if certifies(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    Some(round_up_two_digits(high))
}

fn round_up_two_digits(n: u64) -> u64 {
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    n.div_ceil(scale) * scale
}

/// Always-large's mean cost on the report's rows, USD per 1,000 requests.
fn always_large_per_1k(curves: &[SliceCurves]) -> f64 {
    let rows: u64 = curves.iter().map(|c| c.totals.rows).sum();
    let cost: i128 = curves.iter().map(|c| c.totals.cost_large).sum();
    if rows == 0 {
        return 0.0;
    }
    cost as f64 / 1e12 / rows as f64 * 1000.0
}

fn saved(curves: &[SliceCurves], slice: &str, mean_cost: f64) -> Option<f64> {
    let curves = curves.iter().find(|c| c.slice == slice)?;
    let large = curves.totals.cost_large as f64 / 1e12 / curves.totals.rows as f64;
    (large > 0.0).then(|| 1.0 - mean_cost / large)
}

/// The chosen candidate's mean cost, or without a gate the basis
/// calibration's, weighted by its slices' rows; USD per 1,000 requests.
fn chosen_cost(inputs: &ReportInputs<'_>, chosen: Option<&CandidateReport>) -> Option<f64> {
    if inputs.gate.is_some() {
        return chosen.map(|candidate| candidate.overall.mean_cost * 1000.0);
    }
    let calibration = basis_calibration(inputs)?;
    let (rows, cost) = calibration
        .slices
        .iter()
        .try_fold((0u64, 0.0), |(rows, cost), slice| {
            Some((rows + slice.n, cost + slice.mean_cost? * slice.n as f64))
        })?;
    (rows > 0).then(|| cost / rows as f64 * 1000.0)
}

fn running(gate: Option<&GateReport>, chosen: Option<&CandidateReport>) -> Option<Running> {
    let baseline = gate?.baseline.as_ref()?;
    let chosen = chosen?;
    Some(Running {
        version: baseline.version,
        path: baseline.path.clone(),
        quality_before: baseline.quality,
        quality_after: chosen.overall.quality,
        cost_before_per_1k: baseline.mean_cost.map(|cost| cost * 1000.0),
        cost_after_per_1k: chosen.overall.mean_cost * 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_to_certify_is_the_first_n_whose_bound_meets_the_target() {
        let rows = rows_to_certify(0.9, 0.8, 0.1).unwrap();
        // Rounded up to two digits, so the bound holds there, and not a
        // quarter below it.
        let bound = |n: u64| clopper_pearson_lower((0.9 * n as f64).floor() as u64, n, 0.1);
        assert!(bound(rows) >= 0.8);
        assert!(bound(rows * 3 / 4) < 0.8);
        assert_eq!(rows_to_certify(0.8, 0.8, 0.1), None);
        assert_eq!(rows_to_certify(0.7, 0.8, 0.1), None);
    }

    #[test]
    fn two_digit_rounding_rounds_up() {
        assert_eq!(round_up_two_digits(7), 7);
        assert_eq!(round_up_two_digits(123), 130);
        assert_eq!(round_up_two_digits(1200), 1200);
        assert_eq!(round_up_two_digits(1201), 1300);
    }
}
