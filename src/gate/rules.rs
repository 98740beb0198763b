//! The rules a candidate must pass, each failure named with its rule, its
//! slice where it has one, and what to fix.

use std::collections::BTreeMap;

use crate::routes::{Constraint, ResolvedTable, RouteTier};

use crate::policy::Evaluation;
use crate::schema::{Failure, Rule, SliceRegression};
use crate::stats::{PairedVerdict, binomial_cdf};

/// What the rules need besides the candidate.
#[derive(Debug)]
pub struct RuleContext<'a> {
    pub target: f64,
    pub confidence: Option<f64>,
    /// Organisation-wide constraints, applied on top of the candidate's own.
    pub constraints: &'a BTreeMap<String, Constraint>,
    pub max_regression: f64,
    pub familywise: bool,
    pub recorded_models: &'a BTreeMap<RouteTier, BTreeMap<String, u64>>,
}

/// Checks every rule, with the candidate's `regressions` against the
/// baseline (empty without one); returns failures and warnings.
pub fn check(
    table: &ResolvedTable,
    evaluation: &Evaluation,
    regressions: &[SliceRegression],
    context: &RuleContext<'_>,
) -> (Vec<Failure>, Vec<String>) {
    let mut findings = Findings::default();
    // Constraints first: they filter routes before anything is ranked.
    check_constraints(&mut findings, table, evaluation, context);
    check_versions(&mut findings, table, context);
    check_capacity(&mut findings, table);
    check_streaming(&mut findings, table);
    for slice in &evaluation.slices_without_threshold {
        findings.fail(
            Rule::MissingThreshold,
            Some(slice),
            format!(
                "the {} policy has no threshold for this slice",
                table.policy.kind()
            ),
        );
    }

    check_quality(&mut findings, evaluation, context);
    check_regressions(&mut findings, regressions, context);
    (findings.failures, findings.warnings)
}

/// The failures and warnings of one candidate, in the order found.
#[derive(Debug, Default)]
struct Findings {
    failures: Vec<Failure>,
    warnings: Vec<String>,
}

impl Findings {
    fn fail(&mut self, rule: Rule, slice: Option<&str>, message: String) {
        self.failures.push(Failure {
            rule,
            slice: slice.map(str::to_owned),
            message,
        });
    }
}

/// Every route a slice may be served by, fallbacks included, within the
/// slice's regions and allowlist (the table's and the organisation's).
fn check_constraints(
    findings: &mut Findings,
    table: &ResolvedTable,
    evaluation: &Evaluation,
    context: &RuleContext<'_>,
) {
    let slices: Vec<&str> = evaluation
        .slices
        .iter()
        .map(|metrics| metrics.slice.as_str())
        .collect();
    for slice in &slices {
        let applicable = [
            table.constraints.get(*slice),
            table.constraints.get("*"),
            context.constraints.get(*slice),
            context.constraints.get("*"),
        ];
        let mut used: Vec<&str> = table.policy.routes_for(slice);
        let fallbacks: Vec<&str> = used
            .iter()
            .flat_map(|route| table.fallbacks_of(route))
            .collect();
        used.extend(fallbacks);
        used.sort_unstable();
        used.dedup();
        for constraint in applicable.into_iter().flatten() {
            for name in &used {
                let Some(route) = table.route(name) else {
                    continue;
                };
                if let Some(regions) = &constraint.regions
                    && !regions.contains(&route.region)
                {
                    findings.fail(
                        Rule::Constraint,
                        Some(slice),
                        format!(
                            "route \"{name}\" serves from {}, outside the allowed regions {regions:?}",
                            route.region
                        ),
                    );
                }
                if let Some(allowed) = &constraint.routes
                    && !allowed.iter().any(|allowed| allowed == name)
                {
                    findings.fail(
                        Rule::Constraint,
                        Some(slice),
                        format!("route \"{name}\" is not on the slice's allowlist {allowed:?}"),
                    );
                }
            }
        }
    }
}

/// Every route that may answer, fallbacks included, has evaluation rows
/// answered by the model version it pins.
fn check_versions(findings: &mut Findings, table: &ResolvedTable, context: &RuleContext<'_>) {
    let policy_routes = table.policy.routes();
    let measured_by = |tier: &RouteTier| -> Option<&crate::routes::Route> {
        policy_routes
            .iter()
            .filter_map(|name| table.route(name))
            .find(|route| route.tier == *tier)
    };
    let mut checked: Vec<&str> = Vec::new();
    let fallback_targets = table
        .fallbacks
        .iter()
        .flat_map(|fallback| fallback.to.iter().map(String::as_str));
    for name in policy_routes.iter().copied().chain(fallback_targets) {
        if checked.contains(&name) {
            continue;
        }
        checked.push(name);
        let Some(route) = table.route(name) else {
            continue;
        };
        match context.recorded_models.get(&route.tier) {
            Some(recorded) => {
                let matching = recorded.get(&route.model).copied().unwrap_or(0);
                let others: Vec<String> = recorded
                    .iter()
                    .filter(|(model, _)| **model != route.model)
                    .map(|(model, rows)| format!("{model} ({rows} rows)"))
                    .collect();
                if matching == 0 {
                    findings.fail(
                        Rule::Unevaluated,
                        None,
                        format!(
                            "route \"{name}\" pins {} but no {} row of the results was answered by it",
                            route.model,
                            route.tier.name()
                        ),
                    );
                } else if !others.is_empty() && policy_routes.contains(&name) {
                    findings.fail(
                        Rule::VersionMismatch,
                        None,
                        format!(
                            "route \"{name}\" pins {} but the results' {} tier also recorded {}",
                            route.model,
                            route.tier.name(),
                            others.join(", ")
                        ),
                    );
                }
            }
            None => {
                if let Some(measured) = measure_mismatch(measured_by(&route.tier), route) {
                    findings.fail(Rule::Unevaluated, None, measured);
                }
                if policy_routes.contains(&name) {
                    findings.warnings.push(format!(
                        "the results record no {}_model column, so route \"{name}\"'s pinned version {} is unchecked",
                        route.tier.name(),
                        route.model
                    ));
                }
            }
        }
    }
}

/// A route serve cannot call with streaming: its breaker learns a
/// non-streamed answer's first byte only when the whole answer has come.
fn check_streaming(findings: &mut Findings, table: &ResolvedTable) {
    for route in table.routes.iter().filter(|route| !route.stream_upstream) {
        let breaker = if route.breaker.is_some() {
            "; its breaker's first_token_deadline_ms counts to a non-streamed answer's end and cannot see a slow first token"
        } else {
            ""
        };
        findings.warnings.push(format!(
            "route \"{}\" has stream_upstream = false: serve bounds its non-streamed calls by --total-timeout-ms only{breaker}",
            route.name
        ));
    }
}

/// Fallbacks only onto capacity that exists.
fn check_capacity(findings: &mut Findings, table: &ResolvedTable) {
    for fallback in &table.fallbacks {
        let Some(primary) = table.route(&fallback.route) else {
            continue;
        };
        for target in fallback.to.iter().filter_map(|name| table.route(name)) {
            if target.rpm < primary.rpm || target.tpm < primary.tpm {
                findings.fail(
                    Rule::Capacity,
                    None,
                    format!(
                        "fallback \"{}\" ({} rpm, {} tpm) cannot absorb \"{}\" ({} rpm, {} tpm)",
                        target.name, target.rpm, target.tpm, primary.name, primary.rpm, primary.tpm
                    ),
                );
            }
        }
    }
}

/// Each slice's quality (or its bound, or the joint Holm certificate)
/// against the target.
fn check_quality(findings: &mut Findings, evaluation: &Evaluation, context: &RuleContext<'_>) {
    let jointly = context
        .confidence
        .filter(|_| context.familywise)
        .map(|confidence| holm(evaluation, context.target, 1.0 - confidence));
    for (index, metrics) in evaluation.slices.iter().enumerate() {
        if let Some(jointly) = &jointly {
            let (p_value, level, certified) = jointly[index];
            if !certified {
                findings.fail(
                    Rule::BelowTarget,
                    Some(&metrics.slice),
                    format!(
                        "quality {:.4} on {} rows does not certify the target {} for all slices jointly (Holm: p = {p_value:.2e}, level {level:.2e})",
                        metrics.quality, metrics.n, context.target
                    ),
                );
            }
            continue;
        }
        let (measure, value) = match (context.confidence, metrics.quality_lower_bound) {
            (Some(confidence), Some(bound)) => (
                format!("quality lower bound at confidence {confidence}"),
                bound,
            ),
            _ => ("quality".to_owned(), metrics.quality),
        };
        if value < context.target {
            findings.fail(
                Rule::BelowTarget,
                Some(&metrics.slice),
                format!(
                    "{measure} {value:.4} is below the target {}",
                    context.target
                ),
            );
        }
    }
}

/// A slice that regressed beyond the margin fails; one too small to tell
/// warns.
fn check_regressions(
    findings: &mut Findings,
    regressions: &[SliceRegression],
    context: &RuleContext<'_>,
) {
    for regression in regressions {
        match regression.verdict {
            PairedVerdict::Regressed => findings.fail(
                Rule::Regression,
                Some(&regression.slice),
                format!(
                    "quality is {:.4} below the deployed config's, more than the margin {} (paired test on {} rows: {} right only before, {} right only now, p = {:.2e})",
                    -regression.difference,
                    context.max_regression,
                    regression.n,
                    regression.baseline_only,
                    regression.candidate_only,
                    regression.p_value
                ),
            ),
            // A candidate the data show better needs no warning that a drop
            // could not be ruled out.
            PairedVerdict::TooSmallToTell if regression.better => {}
            PairedVerdict::TooSmallToTell => findings.warnings.push(format!(
                "slice {}: not enough rows to tell whether quality fell more than {} below the deployed config's ({} rows, power {:.0}%)",
                regression.slice,
                context.max_regression,
                regression.n,
                regression.power * 100.0
            )),
            PairedVerdict::NotWorse => {}
        }
    }
}

/// Holm's step-down over the slices' exact tests of "quality ≥ target"
/// (p = P(Bin(n, 1 − target) ≤ failures)): per slice, in the evaluation's
/// order, the p-value, the level it was held to, and whether it certified.
/// The chance that any uncertified-in-truth slice is certified is at most
/// `delta`, whatever the slices' dependence.
fn holm(evaluation: &Evaluation, target: f64, delta: f64) -> Vec<(f64, f64, bool)> {
    let alpha = 1.0 - target;
    let p_values: Vec<f64> = evaluation
        .counts
        .iter()
        .map(|counts| binomial_cdf(counts.n, alpha, counts.n - counts.successes))
        .collect();
    crate::stats::holm(&p_values, delta)
        .into_iter()
        .zip(&p_values)
        .map(|((level, certified), &p_value)| (p_value, level, certified))
        .collect()
}

/// Without recorded versions, a tier's rows measure the policy's route of
/// that tier; a route pinning another model has no rows behind it.
fn measure_mismatch(
    measured: Option<&crate::routes::Route>,
    route: &crate::routes::Route,
) -> Option<String> {
    match measured {
        Some(measured) if measured.model == route.model => None,
        Some(measured) => Some(format!(
            "route \"{}\" pins {}, but the results' {} tier measured \"{}\" ({}); evaluate it like the primary",
            route.name,
            route.model,
            route.tier.name(),
            measured.name,
            measured.model
        )),
        None => Some(format!(
            "route \"{}\" is measured by the {} tier, which the policy does not use, so no rows evaluate it",
            route.name,
            route.tier.name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Counts;

    fn evaluation(counts: &[(u64, u64)]) -> Evaluation {
        let counts: Vec<Counts> = counts
            .iter()
            .map(|&(n, successes)| Counts {
                n,
                successes,
                ..Counts::default()
            })
            .collect();
        let metrics = |slice: String| crate::policy::Tally::default().metrics(slice, false, None);
        Evaluation {
            slices: (0..counts.len())
                .map(|index| metrics(format!("s{index}")))
                .collect(),
            outcomes: vec![Vec::new(); counts.len()],
            counts,
            overall: metrics("*".to_owned()),
            slices_without_threshold: Vec::new(),
        }
    }

    #[test]
    fn holm_steps_down_through_the_slices_p_values() {
        // Target 0.9. p-values P(Bin(n, 0.1) <= failures): 0 failures of 60
        // rows gives 0.9^60 = 1.8e-3; 1 of 60 gives 0.0138; 0 of 25 gives
        // 0.9^25 = 0.0718.
        let slices = evaluation(&[(60, 59), (60, 60), (25, 25)]);
        let held = holm(&slices, 0.9, 0.05);
        let p = |failures: u64, n: u64| binomial_cdf(n, 0.1, failures);
        assert!((held[1].0 - p(0, 60)).abs() < 1e-15);
        // Smallest first, against δ/3, then δ/2, then δ.
        assert_eq!(held[1], (p(0, 60), 0.05 / 3.0, true));
        assert_eq!(held[0], (p(1, 60), 0.05 / 2.0, true));
        assert_eq!(held[2], (p(0, 25), 0.05, false));
        // Once one fails, every larger p-value fails too.
        let stopped = holm(&evaluation(&[(25, 25), (60, 60), (30, 30)]), 0.9, 0.05);
        assert!(stopped[1].2);
        assert!(!stopped[2].2 && !stopped[0].2);
    }
}
