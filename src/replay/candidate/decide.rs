//! Each record decided again by the kernel, both ways: the route the
//! candidate would choose for it, and the probability the config that
//! logged it gave every route, checked against the one the record carries.

use std::collections::BTreeMap;

use crate::policy::{Plan, applicable, plan, propensity};
use crate::records::{Reason, Record};
use crate::routes::{ResolvedTable, RouteConfig, Serving, UnknownSlice};

use super::direct::DirectModel;
use super::estimate::Logged;

/// What is needed to decide a record again, both ways.
pub(super) struct Decisions<'a> {
    pub config: &'a RouteConfig,
    pub serving: &'a Serving,
    pub config_sha256: &'a str,
    pub candidate: &'a ResolvedTable,
    pub unknown: UnknownSlice,
    pub model: &'a DirectModel,
}

/// A record decided again: what the estimators read, and the route the
/// candidate needs where the logging config could not have chosen it.
pub(super) struct Decided {
    pub logged: Logged,
    pub unsupported: Option<String>,
}

impl Decisions<'_> {
    /// The smallest probability the config can give any route of any
    /// request, from its signed exploration alone: `share / tiers` at the
    /// smallest share it explores at, or 1 where it does not explore.
    pub fn min_propensity(&self) -> f64 {
        let Some(explore) = &self.serving.explore else {
            return 1.0;
        };
        let tiers = self
            .config
            .table
            .policy
            .tier_routes()
            .map_or(2, |tiers| tiers.len().max(2));
        let least = std::iter::once(explore.share)
            .chain(explore.slices.values().copied())
            .filter(|share| *share > 0.0)
            .fold(f64::INFINITY, f64::min);
        if least.is_finite() {
            least / tiers as f64
        } else {
            1.0
        }
    }

    /// The direct model's tier of one of the candidate's routes: its place
    /// among a k-tier table's tiers, else small (0) or large (1).
    fn tier_of(&self, route: &str) -> usize {
        if let Some(tiers) = self.candidate.policy.tier_routes() {
            return tiers.iter().position(|tier| tier == route).unwrap_or(0);
        }
        self.candidate.route(route).map_or(0, |found| {
            usize::from(found.tier.known() == Some(crate::routes::Tier::Large))
        })
    }

    /// `None` for a record that is not one of the config's decisions: a
    /// refusal, an abandoned attempt or a hedge's losing copy.
    pub fn decide(&self, record: &Record<'_>) -> Result<Option<Decided>, (&'static str, String)> {
        let id = record.id.as_ref();
        if record
            .reason
            .as_ref()
            .is_some_and(Reason::is_beside_a_request)
        {
            return Ok(None);
        }
        let Some(decided_route) = record.decided_route.as_deref() else {
            return Ok(None);
        };
        match record.config_sha256.as_deref() {
            Some(found) if found == self.config_sha256 => {}
            found => {
                return Err((
                    "config_sha256",
                    format!(
                        "record {id:?} was decided by the config of sha256 {}, not --config's ({}): give the records of that one config",
                        found.unwrap_or("(none)"),
                        self.config_sha256
                    ),
                ));
            }
        }
        let problem = |field: &'static str| {
            move |problem: String| (field, format!("record {id:?}: {problem}"))
        };
        let recorded = record.propensity.ok_or_else(|| {
            problem("propensity")("missing, so not a decision serve recorded".to_owned())
        })?;
        let slice = record.slice.as_ref();
        let running = route_plan(
            &self.config.table,
            self.serving.unknown_slice,
            &self.serving.constraints,
            slice,
        )
        .map_err(problem("slice"))?;
        let candidate = route_plan(
            self.candidate,
            self.unknown,
            &self.serving.constraints,
            slice,
        )
        .map_err(problem("slice"))?;
        let score = record.score;
        let running_route = running.route_for(score).map_err(problem("score"))?;
        let candidate_route = candidate.route_for(score).map_err(problem("score"))?;
        let share = match (&running, &self.serving.explore) {
            (RoutePlan::Scored { .. }, Some(explore)) => explore.share_for(slice),
            _ => 0.0,
        };
        let chance = |route: &str| running.probability(route, &running_route, share);
        let expected = chance(decided_route);
        if (expected - recorded).abs() > 1e-12 {
            return Err(problem("propensity")(format!(
                "{recorded}, where --config gives route {decided_route:?} probability {expected} for it: not a record serve wrote under that config"
            )));
        }
        let candidate_tier = self.tier_of(&candidate_route);
        Ok(Some(Decided {
            unsupported: (chance(&candidate_route) == 0.0).then(|| candidate_route.clone()),
            logged: Logged {
                matched: decided_route == candidate_route,
                running_matched: decided_route == running_route,
                propensity: recorded,
                min_propensity: running.min_probability(share),
                reward: None,
                cost: record.cost_usd.unwrap_or(0.0),
                model_quality: self.model.quality(slice, candidate_tier, score),
                model_cost: self.model.cost(slice, candidate_tier),
                escalates: candidate_route != candidate.cheapest(),
            },
        }))
    }
}

/// A slice's plan as one route per request: fixed, or by the score.
enum RoutePlan {
    Fixed(String),
    Scored { tiers: Vec<String>, plan: Plan },
}

fn route_plan(
    table: &ResolvedTable,
    unknown: UnknownSlice,
    organisation: &BTreeMap<String, crate::routes::Constraint>,
    slice: &str,
) -> Result<RoutePlan, String> {
    let constraints = applicable(table, organisation, &[slice]);
    match plan(table, slice, unknown, &constraints).map_err(|refusal| refusal.to_string())? {
        Plan::Route { route, .. } => Ok(RoutePlan::Fixed(route)),
        scored @ Plan::Predictive { .. } => {
            let Plan::Predictive { tiers, .. } = &scored else {
                unreachable!()
            };
            Ok(RoutePlan::Scored {
                tiers: tiers.clone(),
                plan: scored,
            })
        }
        Plan::Cascade { .. } => Err("a cascade plan".to_owned()),
    }
}

impl RoutePlan {
    fn route_for(&self, score: Option<f64>) -> Result<String, String> {
        match self {
            RoutePlan::Fixed(route) => Ok(route.clone()),
            RoutePlan::Scored { tiers, plan } => {
                let score = score.ok_or("no score, and the policy routes by one")?;
                Ok(tiers[plan.tier_for_score(score)].clone())
            }
        }
    }

    fn cheapest(&self) -> &str {
        match self {
            RoutePlan::Fixed(route) => route,
            RoutePlan::Scored { tiers, .. } => &tiers[0],
        }
    }

    /// The probability this plan, exploring at `share`, gives `route` for a
    /// request whose policy route is `policy_route`.
    fn probability(&self, route: &str, policy_route: &str, share: f64) -> f64 {
        match self {
            RoutePlan::Fixed(fixed) => f64::from(u8::from(fixed == route)),
            RoutePlan::Scored { tiers, .. } => {
                let Some(tier) = tiers.iter().position(|name| name == route) else {
                    return 0.0;
                };
                let policy = tiers
                    .iter()
                    .position(|name| name == policy_route)
                    .expect("the policy's route is one of its tiers");
                propensity(share, tiers.len(), policy, tier)
            }
        }
    }

    /// The smallest probability any route of the plan can have, where it
    /// can have one at all.
    fn min_probability(&self, share: f64) -> f64 {
        match self {
            RoutePlan::Scored { tiers, .. } if share > 0.0 => share / tiers.len() as f64,
            _ => 1.0,
        }
    }
}
