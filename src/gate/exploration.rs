//! What a candidate's signed exploration costs at the gate's measurements,
//! and the failure when it costs more than the candidate allows.

use std::collections::BTreeSet;

use crate::policy::{Evaluation, TieredRows, price_table};
use crate::routes::{ResolvedTable, Serving};
use crate::schema::{ExplorationPrice, Failure, GradedTable, Rule};

/// The price of `serving`'s exploration of `table` (empty where it does not
/// explore), and the failure of a price above its `max_added_cost`.
pub(super) fn priced(
    table: &ResolvedTable,
    serving: Option<&Serving>,
    evaluation: &Evaluation,
    graded: &GradedTable,
    scores: &[f64],
    tiered: Option<&TieredRows>,
) -> (Vec<ExplorationPrice>, Option<Failure>) {
    let Some(explore) = serving.and_then(|serving| serving.explore.as_ref()) else {
        return (Vec::new(), None);
    };
    let prices = price_table(table, explore, evaluation, graded, scores, tiered)
        .expect("a pinned exploration is on a policy with tiers");
    let overall = &prices[0];
    let failure = explore
        .max_added_cost
        .filter(|bound| overall.added_cost_share > *bound)
        .map(|bound| Failure {
            rule: Rule::Exploration,
            slice: None,
            message: format!(
                "exploring adds {:.2}% to the mean cost per request ({:.6} to {:.6} USD), above its bound max_added_cost = {bound}",
                overall.added_cost_share * 100.0,
                overall.mean_cost,
                overall.mean_cost_exploring,
            ),
        });
    (prices, failure)
}

/// Refuses an exploration share for a slice the results do not have: it
/// would be signed unpriced, and a misspelt slice would never explore.
pub(super) fn check_slices(serving: &Serving, slices: &BTreeSet<String>) -> Result<(), String> {
    let Some(explore) = &serving.explore else {
        return Ok(());
    };
    match explore.slices.keys().find(|slice| !slices.contains(*slice)) {
        Some(slice) => Err(format!(
            "[serving.explore.slices] names slice {slice:?}, which the results do not have (its share would be signed unpriced); fix the name or pass --allow-unknown-slices"
        )),
        None => Ok(()),
    }
}
