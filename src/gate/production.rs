//! Production evidence in the gate (`--production`): `replay candidate`
//! documents, one per candidate, estimated on the traffic the running
//! config (`--baseline`) served. Beside the offline rules, a candidate must
//! meet the target on production (the doubly-robust estimate, its lower
//! bound with `--confidence`) and must not be worse than the running config
//! there by more than `--max-regression` (shown, with `--confidence`, by
//! the upper bound of the paired difference). A candidate the documents do
//! not cover fails: the check did not run.

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
        let mut failures = Vec::new();
        for estimate in document.slices.iter().chain([&document.overall]) {
            let slice = (estimate.slice != "*").then(|| estimate.slice.clone());
            let quality = estimate.quality.dr;
            let (held, said) = match confidence {
                Some(_) => (quality.lower.unwrap_or(0.0), "lower bound"),
                None => (quality.estimate, "estimate"),
            };
            if held < target {
                failures.push(Failure {
                    rule: Rule::ProductionBelowTarget,
                    slice: slice.clone(),
                    message: format!(
                        "production quality {} {held:.4} (doubly robust, {} requests) is below the target {target}",
                        said, estimate.requests
                    ),
                });
            }
            let difference = estimate.quality_difference;
            let (worse_by, said) = match confidence {
                Some(_) => (difference.upper.unwrap_or(0.0), "at most"),
                None => (difference.estimate, "by"),
            };
            if worse_by < -max_regression {
                failures.push(Failure {
                    rule: Rule::ProductionRegression,
                    slice,
                    message: format!(
                        "on production it differs from the running config {said} {worse_by:+.4} (paired), worse than --max-regression {max_regression}"
                    ),
                });
            }
        }
        let evidence = ProductionEvidence {
            file: path.display().to_string(),
            sha256: sha256.clone(),
            estimator: "dr".to_owned(),
            requests: document.overall.requests,
            labelled: document.overall.labelled,
            overall: quality_of(&document.overall),
            slices: document.slices.iter().map(quality_of).collect(),
        };
        (Some(evidence), failures)
    }
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
