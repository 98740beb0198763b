//! What a resolved table decides for one live request of a slice: which
//! routes may answer under the slice's constraints, and the plan the policy
//! follows (one route, a router score against thresholds, or a cascade's
//! stages). `serve` carries the plan out; the thresholds and the tier a
//! score lands in are the same functions the gate evaluates rows with.

use crate::records::Reason;
use crate::routes::{Constraint, ResolvedPolicy, ResolvedTable, UnknownSlice};

use super::tiers::{cascade_stage, predictive_tier};

/// How a request of one slice is answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// One route, chosen without a score.
    Route { route: String, reason: Reason },
    /// A router score picks the tier: the number of `thresholds` it is at
    /// or above.
    Predictive {
        tiers: Vec<String>,
        thresholds: Vec<f64>,
    },
    /// Each stage answers in turn; the verifier's score at or above a
    /// stage's threshold escalates to the next.
    Cascade {
        stages: Vec<String>,
        verifier: String,
        thresholds: Vec<f64>,
    },
}

/// Why a request cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("slice {0:?} is not in the signed table, which refuses slices it does not name")]
    UnknownSlice(String),
    #[error("no route of {model} may serve slice {slice:?} under its constraints")]
    NoAllowedRoute { model: String, slice: String },
}

impl Plan {
    /// The reason a record gives for the tier `tier` of this plan.
    pub fn reason(&self, table: &ResolvedTable, tier: usize) -> Reason {
        match self {
            Plan::Route { reason, .. } => reason.clone(),
            Plan::Predictive { tiers, .. } => Reason::Routed {
                tier: table
                    .route(&tiers[tier])
                    .map_or("large", |route| route.tier.name())
                    .to_owned(),
            },
            Plan::Cascade { .. } if tier == 0 => Reason::CascadeAccepted,
            Plan::Cascade { .. } => Reason::Escalated,
        }
    }

    /// The tier a predictive `score` goes to.
    pub fn tier_for_score(&self, score: f64) -> usize {
        match self {
            Plan::Predictive { thresholds, .. } => predictive_tier(score, thresholds),
            _ => 0,
        }
    }

    /// Whether a cascade escalates from `stage` with the verifier's `score`.
    pub fn escalates_from(&self, stage: usize, score: f64) -> bool {
        match self {
            Plan::Cascade { thresholds, .. } => {
                stage < thresholds.len() && cascade_stage(&[score], &thresholds[stage..=stage]) == 1
            }
            _ => false,
        }
    }
}

/// The constraints that hold for a request: the table's and the
/// organisation's, for the slice, the tenant and every slice (`"*"`).
pub fn applicable<'a>(
    table: &'a ResolvedTable,
    organisation: &'a std::collections::BTreeMap<String, Constraint>,
    keys: &[&str],
) -> Vec<&'a Constraint> {
    let mut found = Vec::new();
    for constraints in [&table.constraints, organisation] {
        for key in keys.iter().copied().chain(std::iter::once("*")) {
            if let Some(constraint) = constraints.get(key) {
                found.push(constraint);
            }
        }
    }
    found
}

/// Whether `route` is within every one of `constraints`.
pub fn allowed(table: &ResolvedTable, constraints: &[&Constraint], route: &str) -> bool {
    let Some(found) = table.route(route) else {
        return false;
    };
    constraints.iter().all(|constraint| {
        constraint
            .regions
            .as_ref()
            .is_none_or(|regions| regions.contains(&found.region))
            && constraint
                .routes
                .as_ref()
                .is_none_or(|routes| routes.iter().any(|name| name == route))
    })
}

/// The plan for a request of `slice` under `constraints`. A slice the
/// policy does not name gets what `unknown` says. Constraints filter the
/// answering routes before anything is ranked: a forbidden tier is dropped
/// with its threshold, so a score that would have reached it goes to the
/// next allowed tier above (or, above the last, the strongest allowed).
pub fn plan(
    table: &ResolvedTable,
    slice: &str,
    unknown: UnknownSlice,
    constraints: &[&Constraint],
) -> Result<Plan, Refusal> {
    let policy = &table.policy;
    let named = policy.slices().contains(&slice);
    let answering = answering_routes(policy, slice);
    if !named && policy.decides_by_score() {
        match unknown {
            UnknownSlice::Refuse => return Err(Refusal::UnknownSlice(slice.to_owned())),
            UnknownSlice::Strongest => {
                let route = answering
                    .iter()
                    .rev()
                    .find(|route| allowed(table, constraints, route))
                    .ok_or_else(|| no_route(table, slice))?;
                return Ok(Plan::Route {
                    route: (*route).to_owned(),
                    reason: Reason::UnknownSlice,
                });
            }
            UnknownSlice::Global => {}
        }
    } else if !named
        && unknown == UnknownSlice::Refuse
        && matches!(policy, ResolvedPolicy::Static { .. })
    {
        return Err(Refusal::UnknownSlice(slice.to_owned()));
    }
    let thresholds: Vec<f64> = match policy {
        ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => {
            let route = answering[0];
            if !allowed(table, constraints, route) {
                return Err(no_route(table, slice));
            }
            return Ok(Plan::Route {
                route: route.to_owned(),
                reason: Reason::RoutedOnly,
            });
        }
        ResolvedPolicy::Predictive { thresholds, .. }
        | ResolvedPolicy::Cascade { thresholds, .. } => {
            // A slice without a threshold never escalates, as the gate
            // evaluates it (and refuses to sign it).
            vec![thresholds.for_slice(slice).map_or(f64::INFINITY, |t| t.0)]
        }
        ResolvedPolicy::PredictiveTiers { thresholds, .. }
        | ResolvedPolicy::CascadeStages { thresholds, .. } => thresholds
            .for_slice(slice)
            .map(|values| values.iter().map(|threshold| threshold.0).collect())
            .unwrap_or_else(|| vec![f64::INFINITY; answering.len() - 1]),
    };
    // Tier i is reached from threshold i − 1; dropping a tier drops the
    // threshold that leads into it, so its scores go on to the next.
    let mut kept_routes: Vec<String> = Vec::new();
    let mut kept_thresholds: Vec<f64> = Vec::new();
    let mut pending: Option<f64> = None;
    for (index, route) in answering.iter().enumerate() {
        let entry = if index == 0 {
            None
        } else {
            Some(thresholds[index - 1])
        };
        let entry = match (pending, entry) {
            (Some(earlier), Some(_)) => Some(earlier),
            (_, entry) => entry,
        };
        if allowed(table, constraints, route) {
            if !kept_routes.is_empty()
                && let Some(entry) = entry
            {
                kept_thresholds.push(entry);
            }
            kept_routes.push((*route).to_owned());
            pending = None;
        } else if !kept_routes.is_empty() {
            pending = entry;
        }
    }
    if kept_routes.is_empty() {
        return Err(no_route(table, slice));
    }
    Ok(match policy {
        ResolvedPolicy::Cascade { verifier, .. }
        | ResolvedPolicy::CascadeStages { verifier, .. } => Plan::Cascade {
            stages: kept_routes,
            verifier: verifier.clone(),
            thresholds: kept_thresholds,
        },
        _ => Plan::Predictive {
            tiers: kept_routes,
            thresholds: kept_thresholds,
        },
    })
}

fn no_route(table: &ResolvedTable, slice: &str) -> Refusal {
    Refusal::NoAllowedRoute {
        model: table.logical_model.clone(),
        slice: slice.to_owned(),
    }
}

/// The routes that may answer a request of `slice`, cheapest first (a
/// cascade's verifier is not one).
fn answering_routes<'a>(policy: &'a ResolvedPolicy, slice: &str) -> Vec<&'a str> {
    match policy {
        ResolvedPolicy::Cascade { small, large, .. } => vec![small, large],
        ResolvedPolicy::CascadeStages { stages, .. } => stages.iter().map(String::as_str).collect(),
        other => other.routes_for(slice),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::routes::{Route, RouteTier, TierThresholds};
    use crate::schema::Threshold;

    fn route(name: &str, region: &str) -> Route {
        Route {
            name: name.to_owned(),
            provider: "p".to_owned(),
            model: format!("{name}-2026-01-01"),
            region: region.to_owned(),
            tier: RouteTier::new(name),
            prompt_variant: "v".to_owned(),
            price_input_per_mtok: 1.0,
            price_cached_input_per_mtok: None,
            price_output_per_mtok: 1.0,
            rpm: 1,
            tpm: 1,
            base_url: None,
            api_key_env: None,
            breaker: None,
            hedge: None,
            stream_upstream: true,
        }
    }

    fn three_tiers() -> ResolvedTable {
        ResolvedTable {
            logical_model: "m".to_owned(),
            routes: vec![
                route("small", "us"),
                route("mid", "eu"),
                route("large", "eu"),
            ],
            policy: ResolvedPolicy::PredictiveTiers {
                tiers: vec!["small".to_owned(), "mid".to_owned(), "large".to_owned()],
                score: "s".to_owned(),
                thresholds: TierThresholds {
                    default: None,
                    slices: BTreeMap::from([(
                        "a".to_owned(),
                        vec![Threshold(0.3), Threshold(0.7)],
                    )]),
                },
            },
            fallbacks: Vec::new(),
            constraints: BTreeMap::from([(
                "eu-tenant".to_owned(),
                Constraint {
                    regions: Some(vec!["eu".to_owned()]),
                    routes: None,
                },
            )]),
        }
    }

    #[test]
    fn a_score_lands_where_the_gate_puts_it_and_constraints_drop_tiers() {
        let table = three_tiers();
        let none = BTreeMap::new();
        let open = plan(&table, "a", UnknownSlice::Refuse, &[]).unwrap();
        assert_eq!(open.tier_for_score(0.29), 0);
        assert_eq!(open.tier_for_score(0.3), 1);
        assert_eq!(open.tier_for_score(0.7), 2);
        assert_eq!(
            open.reason(&table, 1),
            Reason::Routed {
                tier: "mid".to_owned()
            }
        );
        let eu = applicable(&table, &none, &["a", "eu-tenant"]);
        assert_eq!(eu.len(), 1);
        let Plan::Predictive { tiers, thresholds } =
            plan(&table, "a", UnknownSlice::Refuse, &eu).unwrap()
        else {
            panic!("a predictive plan")
        };
        assert_eq!(tiers, ["mid", "large"]);
        assert_eq!(thresholds, [0.7], "mid now takes every score below 0.7");
        assert_eq!(
            plan(&table, "b", UnknownSlice::Refuse, &[]),
            Err(Refusal::UnknownSlice("b".to_owned()))
        );
        assert_eq!(
            plan(&table, "b", UnknownSlice::Strongest, &[]),
            Ok(Plan::Route {
                route: "large".to_owned(),
                reason: Reason::UnknownSlice
            })
        );
        let us_only = Constraint {
            regions: Some(vec!["ap".to_owned()]),
            routes: None,
        };
        assert!(matches!(
            plan(&table, "a", UnknownSlice::Refuse, &[&us_only]),
            Err(Refusal::NoAllowedRoute { .. })
        ));
        // Dropping the middle tier sends its scores on to the large tier.
        let no_mid = Constraint {
            regions: None,
            routes: Some(vec!["small".to_owned(), "large".to_owned()]),
        };
        let Plan::Predictive { tiers, thresholds } =
            plan(&table, "a", UnknownSlice::Refuse, &[&no_mid]).unwrap()
        else {
            panic!("a predictive plan")
        };
        assert_eq!((tiers.len(), thresholds), (2, vec![0.3]));
    }
}
