//! Each candidate scored: its metrics on the results, its paired comparison
//! with the deployed config, its exploration's price, its production
//! evidence and the rules it breaks; and the cheapest that passes.

use std::path::PathBuf;

use anyhow::Context;

use crate::policy::regressions;
use crate::policy::{Evaluation, evaluate_table, recorded_models, tiered_rows};
use crate::schema::CandidateReport;
use crate::schema::{Failure, Rule};

use super::inputs::{Candidate, Inputs, ScoreColumns};
use super::options::{DEFAULT_REGRESSION_CONFIDENCE, GateOptions};
use super::rules::{RuleContext, check};

/// Each candidate's metrics, its paired comparison with the deployed config
/// and the rules it breaks.
pub(super) fn score_candidates(
    options: &GateOptions,
    inputs: &Inputs,
    tables: &[Candidate],
    scores: &mut ScoreColumns<'_>,
) -> anyhow::Result<Vec<CandidateReport>> {
    let graded = &inputs.graded;
    let mut recorded = recorded_models(graded);
    // The tiers between record their versions in columns of their own.
    for candidate in tables {
        for (tier, models) in candidate.tiered.iter().flat_map(|rows| &rows.models) {
            recorded
                .entry(tier.clone())
                .or_insert_with(|| models.clone());
        }
    }
    let baseline_evaluation = match &inputs.baseline {
        Some((path, _, config)) => {
            let scores = scores
                .for_table(&config.table)
                .with_context(|| format!("--baseline {}", path.display()))?;
            let tiered = tiered_rows(&options.results, &options.read_options(), &config.table)
                .with_context(|| format!("--baseline {}", path.display()))?;
            Some(evaluate_table(
                &config.table,
                graded,
                &scores,
                options.confidence_level(),
                tiered.as_ref(),
            ))
        }
        None => None,
    };
    let context = RuleContext {
        target: options.target.get(),
        confidence: options.confidence_level(),
        constraints: &inputs.constraints,
        max_regression: options.max_regression.get(),
        familywise: options.familywise,
        recorded_models: &recorded,
    };
    let mut shared_warnings = Vec::new();
    for (path, calibration) in options.calibrations.iter().zip(&inputs.calibrations) {
        if calibration.results.sha256 != inputs.results_sha256 {
            shared_warnings.push(format!(
                "the calibration {} was computed on other results (sha256 {})",
                path.display(),
                calibration.results.sha256
            ));
        }
    }
    let files: Vec<(&PathBuf, &str)> = tables
        .iter()
        .map(|candidate| (&candidate.path, candidate.sha256.as_str()))
        .collect();
    inputs.production.check_covers(&files)?;
    let scoring = Scoring {
        options,
        inputs,
        baseline: baseline_evaluation.as_ref(),
        context: &context,
        shared_warnings: &shared_warnings,
    };
    Ok(tables
        .iter()
        .map(|candidate| scoring.report(candidate))
        .collect())
}

/// What every candidate is scored with.
struct Scoring<'a> {
    options: &'a GateOptions,
    inputs: &'a Inputs,
    baseline: Option<&'a Evaluation>,
    context: &'a RuleContext<'a>,
    shared_warnings: &'a [String],
}

impl Scoring<'_> {
    /// One candidate's metrics, its paired comparison with the deployed
    /// config, its exploration's price, its production evidence and the
    /// rules it breaks.
    fn report(&self, candidate: &Candidate) -> CandidateReport {
        let Scoring {
            options,
            inputs,
            context,
            ..
        } = *self;
        let graded = &inputs.graded;
        let table = &candidate.table;
        let evaluation = evaluate_table(
            table,
            graded,
            &candidate.scores,
            options.confidence_level(),
            candidate.tiered.as_ref(),
        );
        let regressions = match self.baseline {
            Some(baseline) => regressions(
                &evaluation,
                baseline,
                options.max_regression.get(),
                1.0 - options
                    .confidence_level()
                    .unwrap_or(DEFAULT_REGRESSION_CONFIDENCE),
            ),
            None => Vec::new(),
        };
        let (mut failures, mut warnings) = check(table, &evaluation, &regressions, context);
        if let Err(open) = &candidate.serving {
            failures.push(Failure {
                rule: Rule::Serving,
                slice: None,
                message: format!("not deployable: {open}"),
            });
        }
        let (exploration, costs_too_much) = super::exploration::priced(
            table,
            candidate.serving.as_ref().ok(),
            &evaluation,
            graded,
            &candidate.scores,
            candidate.tiered.as_ref(),
        );
        failures.extend(costs_too_much);
        let (production, on_production) = inputs.production.judge(
            &candidate.sha256,
            options.target.get(),
            options.confidence_level(),
            options.max_regression.get(),
        );
        failures.extend(on_production);
        warnings.extend(self.shared_warnings.iter().cloned());
        CandidateReport {
            file: candidate.path.display().to_string(),
            sha256: candidate.sha256.clone(),
            logical_model: table.logical_model.clone(),
            policy: table.policy.kind().to_owned(),
            passed: failures.is_empty(),
            failures,
            warnings,
            overall: evaluation.overall,
            slices: evaluation.slices,
            regressions,
            scores: candidate.scores_certified.clone(),
            exploration,
            production,
        }
    }
}

/// The cheapest candidate that passes every rule; ties go to the higher
/// quality, then to the file name.
pub(super) fn cheapest_passing(candidates: &[CandidateReport]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, candidate)| candidate.passed)
        .min_by(|(_, a), (_, b)| {
            a.overall
                .mean_cost
                .total_cmp(&b.overall.mean_cost)
                .then(b.overall.quality.total_cmp(&a.overall.quality))
                .then(a.file.cmp(&b.file))
        })
        .map(|(index, _)| index)
}
