//! Each candidate scored: its metrics on the results, its paired comparison
//! with the deployed config, its exploration's price, its production
//! evidence and the rules it breaks; and the cheapest that passes.

use std::path::PathBuf;

use anyhow::Context;

use crate::policy::regressions;
use crate::policy::{Evaluation, evaluate_table, recorded_models, tiered_rows};
use crate::schema::CandidateReport;
use crate::schema::{CostChange, Failure, Rule};

use super::inputs::{Candidate, Inputs, ScoreColumns};
use super::options::{DEFAULT_REGRESSION_CONFIDENCE, GateOptions};
use super::rules::{RuleContext, check};

/// A config's quality and mean cost (USD per request) on the gate's rows.
pub(super) type QualityAndCost = (f64, f64);

/// Each candidate's metrics, its paired comparison with the deployed config
/// and the rules it breaks; and the deployed config's own quality and mean
/// cost on the rows, where there is one.
pub(super) fn score_candidates(
    options: &GateOptions,
    inputs: &Inputs,
    tables: &[Candidate],
    scores: &mut ScoreColumns<'_>,
) -> anyhow::Result<(Vec<CandidateReport>, Option<QualityAndCost>)> {
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
    let reports = tables
        .iter()
        .map(|candidate| scoring.report(candidate))
        .collect();
    let measured = baseline_evaluation
        .as_ref()
        .map(|evaluation| (evaluation.overall.quality, evaluation.overall.mean_cost));
    Ok((reports, measured))
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
        let cost_change = self.baseline.map(|baseline| {
            let (change, too_costly) = cost_change(
                baseline.overall.mean_cost,
                evaluation.overall.mean_cost,
                candidate.accept_cost_increase,
                options.max_cost_increase.get(),
            );
            failures.extend(too_costly);
            change
        });
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
            cost_change,
            scores: candidate.scores_certified.clone(),
            exploration,
            production,
        }
    }
}

/// A candidate's mean cost against the deployed config's on the same rows,
/// and the failure when it rises by more than the ceiling: the table's own
/// `[gate] accept_cost_increase` where it states one, else the gate's.
pub(super) fn cost_change(
    baseline_mean_cost: f64,
    mean_cost: f64,
    accepted_by_table: Option<f64>,
    gate_ceiling: f64,
) -> (CostChange, Option<Failure>) {
    let (ceiling, ceiling_from) = match accepted_by_table {
        Some(accepted) => (accepted, "[gate] accept_cost_increase"),
        None => (gate_ceiling, "--max-cost-increase"),
    };
    let increase = if baseline_mean_cost > 0.0 {
        Some(mean_cost / baseline_mean_cost - 1.0)
    } else if mean_cost > 0.0 {
        None
    } else {
        Some(0.0)
    };
    let too_costly = increase.is_none_or(|increase| increase > ceiling);
    let failure = too_costly.then(|| Failure {
        rule: Rule::CostIncrease,
        slice: None,
        message: format!(
            "costs {} per 1k requests against the deployed config's {} on the same rows ({}), above the ceiling of {} ({ceiling_from}); a table that accepts it says so with [gate] accept_cost_increase",
            dollars(mean_cost * 1000.0),
            dollars(baseline_mean_cost * 1000.0),
            increase.map_or_else(|| "more than a config that costs nothing".to_owned(), percent),
            percent(ceiling)
        ),
    });
    let change = CostChange {
        baseline_mean_cost,
        mean_cost,
        increase,
        ceiling,
        ceiling_from: ceiling_from.to_owned(),
    };
    (change, failure)
}

/// `$2.63`, or `$0.0042` below a cent.
pub(super) fn dollars(usd: f64) -> String {
    if usd.abs() >= 0.01 || usd == 0.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

/// `+277%`, `-12%`, `+0.4%`.
pub(super) fn percent(share: f64) -> String {
    let value = share * 100.0;
    if value.abs() >= 10.0 || value == 0.0 {
        format!("{value:+.0}%")
    } else {
        format!("{value:+.1}%")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_above_the_ceiling_fails_and_the_table_can_raise_it() {
        let (change, failure) = cost_change(0.002, 0.0024, None, 0.1);
        assert!((change.increase.unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(failure.unwrap().rule, Rule::CostIncrease);
        let (change, failure) = cost_change(0.002, 0.0024, Some(0.25), 0.1);
        assert_eq!(
            (change.ceiling, change.ceiling_from.as_str(), failure),
            (0.25, "[gate] accept_cost_increase", None)
        );
        // A cheaper candidate, and one within the ceiling, pass.
        assert!(cost_change(0.002, 0.001, None, 0.1).1.is_none());
        assert!(cost_change(0.002, 0.0022, None, 0.125).1.is_none());
    }

    #[test]
    fn against_a_config_that_costs_nothing_any_cost_fails() {
        let (change, failure) = cost_change(0.0, 0.001, Some(100.0), 0.1);
        assert_eq!(change.increase, None);
        assert!(
            failure
                .unwrap()
                .message
                .contains("more than a config that costs nothing")
        );
        assert_eq!(cost_change(0.0, 0.0, None, 0.0).0.increase, Some(0.0));
    }

    #[test]
    fn money_and_shares_read_at_a_glance() {
        assert_eq!(dollars(2.634), "$2.63");
        assert_eq!(dollars(0.00421), "$0.0042");
        assert_eq!(percent(2.77), "+277%");
        assert_eq!(percent(-0.123), "-12%");
        assert_eq!(percent(0.004), "+0.4%");
    }
}
