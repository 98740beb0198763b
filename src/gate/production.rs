//! Production evidence in the gate (`--production`): `replay candidate`
//! documents, one per candidate, estimated on the traffic the running
//! config (`--baseline`) served. Beside the offline rules, a candidate must
//! show on production, at the gate's `--confidence` (the documents' own
//! when the gate has none), that its quality meets the target (the lower
//! bound of the doubly-robust estimate at or above it) and that it is not
//! worse than the running config by more than `--max-regression` (the
//! lower bound of the paired difference at or above −margin: a
//! non-inferiority test, so absence of evidence is not a pass). Where an
//! interval holds the bar, the verdict is undecided, with about how many
//! more labels would decide it; where it lies wholly short, the rule fails.
//! A point estimate never decides. A candidate the documents do not cover
//! fails: the check did not run.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::digest::sha256_file;
use crate::schema::read_document;
use crate::schema::{
    CandidateReplay, Estimate, Failure, ProductionEvidence, ProductionQuality, Rule, SliceEstimate,
};

/// Each candidate's production document, by the candidate file's sha256.
#[derive(Debug, Default)]
pub(super) struct Production {
    by_candidate: BTreeMap<String, (PathBuf, String, CandidateReplay)>,
    asked: bool,
}

impl Production {
    /// Reads `paths`, each a `replay candidate` document of the records the
    /// running config `baseline_sha256` decided, at the gate's confidence.
    pub fn read(
        paths: &[PathBuf],
        baseline_sha256: Option<&str>,
        confidence: Option<f64>,
    ) -> anyhow::Result<Production> {
        let mut production = Production {
            asked: !paths.is_empty(),
            ..Production::default()
        };
        if paths.is_empty() {
            return Ok(production);
        }
        let Some(baseline_sha256) = baseline_sha256 else {
            anyhow::bail!(
                "--production needs --baseline: the running config whose records the estimates were made on"
            );
        };
        for path in paths {
            let document: CandidateReplay =
                read_document(path, "a replay candidate document", Some("--production"))?.document;
            if document.logged_by.sha256 != baseline_sha256 {
                anyhow::bail!(
                    "{}: estimated on records of the config of sha256 {}, not --baseline's ({baseline_sha256}) (--production)",
                    path.display(),
                    document.logged_by.sha256
                );
            }
            if let Some(confidence) = confidence
                && (document.confidence - confidence).abs() > 1e-12
            {
                anyhow::bail!(
                    "{}: its intervals are at confidence {}, the gate's at {confidence}; estimate again with replay candidate --confidence {confidence} (--production)",
                    path.display(),
                    document.confidence
                );
            }
            let candidate = document.candidate.sha256.clone();
            let sha256 = sha256_file(path)?;
            if let Some((earlier, _, _)) = production
                .by_candidate
                .insert(candidate, (path.clone(), sha256, document))
            {
                anyhow::bail!(
                    "{} and {} estimate the same candidate (--production)",
                    earlier.display(),
                    path.display()
                );
            }
        }
        Ok(production)
    }

    /// Refuses a document whose candidate is none of `candidates` (by
    /// sha256): it was meant for a table this gate does not see.
    pub fn check_covers(&self, candidates: &[(&PathBuf, &str)]) -> anyhow::Result<()> {
        for (path, _, document) in self.by_candidate.values() {
            if !candidates
                .iter()
                .any(|(_, sha256)| *sha256 == document.candidate.sha256)
            {
                anyhow::bail!(
                    "{}: estimates {} (sha256 {}), which is not among --candidates (--production)",
                    path.display(),
                    document.candidate.path,
                    document.candidate.sha256
                );
            }
        }
        Ok(())
    }

    /// The candidate's evidence and the rules it breaks on production.
    pub fn judge(
        &self,
        candidate_sha256: &str,
        target: f64,
        confidence: Option<f64>,
        max_regression: f64,
    ) -> (Option<ProductionEvidence>, Vec<Failure>) {
        if !self.asked {
            return (None, Vec::new());
        }
        let Some((path, sha256, document)) = self.by_candidate.get(candidate_sha256) else {
            return (
                None,
                vec![Failure {
                    rule: Rule::Production,
                    slice: None,
                    message: "no --production estimate of this candidate: its production checks did not run".to_owned(),
                }],
            );
        };
        let confidence = confidence.unwrap_or(document.confidence);
        let mut failures = Vec::new();
        if !document.labels.committed {
            failures.push(Failure {
                rule: Rule::Production,
                slice: None,
                message: format!(
                    "{}: its labels were drawn with seed {}, which the running config did not commit before its records existed ([serving.explore.labels]); a draw chosen afterwards can be tried until one passes",
                    path.display(),
                    document.labels.seed
                ),
            });
        }
        let holds = if document.holds_at_every_look() {
            "holds at every look"
        } else {
            "holds for one look"
        };
        for estimate in document.slices.iter().chain([&document.overall]) {
            let slice = (estimate.slice != "*").then(|| estimate.slice.clone());
            let mut fail = |rule: Rule, message: String| {
                failures.push(Failure {
                    rule,
                    slice: slice.clone(),
                    message,
                });
            };
            let quality = Bar {
                what: "production quality (doubly robust)",
                estimate: estimate.quality.dr,
                bar: target,
                named: format!("the target {target}"),
                range: (0.0, 1.0),
                holds,
            };
            match quality.verdict(estimate.labelled, confidence) {
                Verdict::Holds => {}
                Verdict::Fails(message) => fail(Rule::ProductionBelowTarget, message),
                Verdict::Undecided(message) => fail(Rule::ProductionUndecided, message),
            }
            let difference = Bar {
                what: "the paired difference from the running config",
                estimate: estimate.quality_difference,
                bar: -max_regression,
                named: format!("-{max_regression} (--max-regression)"),
                range: (-1.0, 1.0),
                holds,
            };
            match difference.verdict(estimate.labelled, confidence) {
                Verdict::Holds => {}
                Verdict::Fails(message) => fail(Rule::ProductionRegression, message),
                Verdict::Undecided(message) => fail(Rule::ProductionUndecided, message),
            }
        }
        let evidence = ProductionEvidence {
            file: path.display().to_string(),
            sha256: sha256.clone(),
            estimator: "dr".to_owned(),
            bound: document.bound.clone(),
            requests: document.overall.requests,
            labelled: document.overall.labelled,
            overall: quality_of(&document.overall),
            slices: document.slices.iter().map(quality_of).collect(),
        };
        (Some(evidence), failures)
    }
}

/// A production figure held to a bar from below: met only when its lower
/// bound is at or above the bar, missed when its upper bound is below it,
/// and undecided in between. Never the point estimate alone: a candidate
/// the evidence cannot tell from one that misses is not passed.
struct Bar {
    what: &'static str,
    estimate: Estimate,
    bar: f64,
    /// The bar as the message names it.
    named: String,
    /// The quantity's range, at which its intervals are cut.
    range: (f64, f64),
    /// Whether the interval holds at every look or for one.
    holds: &'static str,
}

enum Verdict {
    Holds,
    Fails(String),
    Undecided(String),
}

impl Bar {
    fn verdict(&self, labels: u64, confidence: f64) -> Verdict {
        let Estimate {
            estimate,
            lower,
            upper,
        } = self.estimate;
        let (Some(lower), Some(upper)) = (lower, upper) else {
            return Verdict::Undecided(format!(
                "undecided after {labels} labels: too few for an interval of {} at confidence {confidence}",
                self.what
            ));
        };
        if lower >= self.bar {
            return Verdict::Holds;
        }
        if upper < self.bar {
            return Verdict::Fails(format!(
                "{} is at most {upper:.4} at confidence {confidence} ({}; {labels} labels), below {}",
                self.what, self.holds, self.named
            ));
        }
        Verdict::Undecided(format!(
            "undecided after {labels} labels: {} is between {lower:.4} and {upper:.4} at confidence {confidence} ({}), {} inside; {}",
            self.what,
            self.holds,
            self.named,
            more_labels(labels, estimate, (lower, upper), self.bar, self.range)
        ))
    }
}

/// About how many more labels would decide a figure whose interval
/// `(lower, upper)` holds `bar`, if its estimate stays where it is: the
/// interval narrows about as one over the root of the labels, so the side
/// facing the bar clears it once that side's width falls to the estimate's
/// distance from the bar. An interval clamped to the quantity's range
/// hides its width; then only "more" can be said.
fn more_labels(
    labels: u64,
    estimate: f64,
    (lower, upper): (f64, f64),
    bar: f64,
    range: (f64, f64),
) -> String {
    let distance = (estimate - bar).abs();
    let (side, facing, cut) = if estimate >= bar {
        ("pass", estimate - lower, lower <= range.0)
    } else {
        ("fail", upper - estimate, upper >= range.1)
    };
    if distance < 1e-9 || labels == 0 {
        return "the estimate sits on the bar: more labels decide it only if it moves".to_owned();
    }
    let needed = (labels as f64 * (facing / distance).powi(2)).ceil();
    if cut || needed <= labels as f64 {
        return format!(
            "the interval is cut at the quantity's range, so how many more labels would {side} it cannot be told"
        );
    }
    format!(
        "about {} more labels would {side} it if the estimate {estimate:.4} holds",
        crate::units::readable(needed - labels as f64, 0)
    )
}

fn quality_of(estimate: &SliceEstimate) -> ProductionQuality {
    let copy = |estimate: &Estimate| *estimate;
    ProductionQuality {
        slice: estimate.slice.clone(),
        requests: estimate.requests,
        quality: copy(&estimate.quality.dr),
        running_quality: copy(&estimate.running_quality),
        quality_difference: copy(&estimate.quality_difference),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(estimate: f64, lower: f64, upper: f64, bar: f64) -> Bar {
        Bar {
            what: "quality",
            estimate: Estimate {
                estimate,
                lower: Some(lower),
                upper: Some(upper),
            },
            bar,
            named: format!("{bar}"),
            range: (0.0, 1.0),
            holds: "holds at every look",
        }
    }

    #[test]
    fn only_a_lower_bound_at_the_bar_passes_and_only_an_upper_bound_short_of_it_fails() {
        assert!(matches!(
            bar(0.9, 0.85, 0.95, 0.85).verdict(400, 0.95),
            Verdict::Holds
        ));
        // The point estimate above the bar decides nothing.
        let Verdict::Undecided(message) = bar(0.9, 0.8, 1.0, 0.85).verdict(400, 0.95) else {
            panic!("a point estimate above the bar passed");
        };
        // The lower side (0.1 wide) must shrink to 0.05: four times the
        // labels, 1,200 more.
        assert!(
            message.contains("undecided after 400 labels")
                && message.contains("about 1200 more labels would pass"),
            "{message}"
        );
        let Verdict::Fails(message) = bar(0.7, 0.6, 0.8, 0.85).verdict(400, 0.95) else {
            panic!("an upper bound short of the bar did not fail");
        };
        assert!(message.contains("at most 0.8000"), "{message}");
        let unknown = Bar {
            estimate: Estimate {
                estimate: 0.9,
                lower: None,
                upper: None,
            },
            ..bar(0.9, 0.0, 1.0, 0.85)
        };
        assert!(matches!(unknown.verdict(3, 0.95), Verdict::Undecided(_)));
    }

    #[test]
    fn an_interval_cut_at_the_range_does_not_pretend_to_know_how_many_labels_are_needed() {
        let said = more_labels(94, 0.668, (0.0, 1.0), 0.1, (0.0, 1.0));
        assert!(said.contains("cannot be told"), "{said}");
    }
}
