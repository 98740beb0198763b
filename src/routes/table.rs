//! A candidate route table and its resolution against a calibration.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::calibrate::{CalibrationDocument, Policy as CalibratedPolicy, Threshold};

use super::error::RouteError;
use super::pin::floating_alias;
use super::policy::{PolicySpec, ResolvedPolicy, Thresholds};

/// Which tier of the graded results measures a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Small,
    Large,
    Verifier,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::Small, Tier::Large, Tier::Verifier];

    pub fn parse(name: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|tier| tier.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Tier::Small => "small",
            Tier::Large => "large",
            Tier::Verifier => "verifier",
        }
    }
}

/// One way to serve requests: a provider's model in a region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub name: String,
    pub provider: String,
    /// A pinned model version; floating aliases are refused.
    pub model: String,
    pub region: String,
    pub tier: Tier,
    pub prompt_variant: String,
    pub price_input_per_mtok: f64,
    #[serde(default)]
    pub price_cached_input_per_mtok: Option<f64>,
    pub price_output_per_mtok: f64,
    pub rpm: u64,
    pub tpm: u64,
    /// The OpenAI-compatible endpoint serving the route (a self-hosted pool,
    /// serve-sim); none for the provider's own API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding the route's API key; the key itself
    /// never enters a route table or a signed config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

/// Where a route's traffic goes when it fails before its first token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    pub route: String,
    pub to: Vec<String>,
}

/// Rules for one slice (or `"*"`, every slice) that filter the routes before
/// anything is ranked.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constraint {
    /// Regions requests of the slice may be served in (residency).
    #[serde(default)]
    pub regions: Option<Vec<String>>,
    /// Routes the slice may use.
    #[serde(default)]
    pub routes: Option<Vec<String>>,
}

/// A candidate route table as written in `routes/*.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    pub logical_model: String,
    pub routes: Vec<Route>,
    pub policy: PolicySpec,
    #[serde(default)]
    pub fallbacks: Vec<Fallback>,
    #[serde(default)]
    pub constraints: BTreeMap<String, Constraint>,
}

/// A route table with concrete thresholds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedTable {
    pub logical_model: String,
    pub routes: Vec<Route>,
    pub policy: ResolvedPolicy,
    pub fallbacks: Vec<Fallback>,
    pub constraints: BTreeMap<String, Constraint>,
}

impl ResolvedTable {
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|route| route.name == name)
    }

    /// The fallback targets of `route`.
    pub fn fallbacks_of(&self, route: &str) -> impl Iterator<Item = &str> {
        self.fallbacks
            .iter()
            .filter(move |fallback| fallback.route == route)
            .flat_map(|fallback| fallback.to.iter().map(String::as_str))
    }
}

impl RouteTable {
    /// Reads and checks a candidate table.
    pub fn load(path: &Path) -> Result<RouteTable, RouteError> {
        let text = std::fs::read_to_string(path).map_err(|source| RouteError::Io {
            path: path.to_owned(),
            source,
        })?;
        let table: RouteTable = toml::from_str(&text).map_err(|error| RouteError::Syntax {
            path: path.to_owned(),
            message: crate::toml_message::one_line(&error.to_string()),
        })?;
        table.check().map_err(|message| RouteError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(table)
    }

    fn check(&self) -> Result<(), String> {
        if self.logical_model.trim().is_empty() {
            return Err("logical_model is empty".to_owned());
        }
        let mut names: Vec<&str> = Vec::new();
        for route in &self.routes {
            if names.contains(&route.name.as_str()) {
                return Err(format!("route \"{}\" is defined twice", route.name));
            }
            names.push(&route.name);
            if let Some(alias) = floating_alias(&route.model) {
                return Err(format!(
                    "route \"{}\": model \"{}\" uses {alias}; pin a version",
                    route.name, route.model
                ));
            }
            if let Some(base_url) = &route.base_url {
                let Some((_, rest)) = base_url
                    .strip_prefix("http://")
                    .map(|rest| ("http", rest))
                    .or_else(|| {
                        base_url
                            .strip_prefix("https://")
                            .map(|rest| ("https", rest))
                    })
                else {
                    return Err(format!(
                        "route \"{}\": base_url must start with http:// or https://",
                        route.name
                    ));
                };
                let authority = rest.split('/').next().unwrap_or_default();
                if authority.contains('@') || rest.contains('?') || authority.is_empty() {
                    return Err(format!(
                        "route \"{}\": base_url must be a plain URL, with no credentials or query (name the key's variable in api_key_env)",
                        route.name
                    ));
                }
            }
            if let Some(variable) = &route.api_key_env {
                let valid = variable.bytes().enumerate().all(|(index, byte)| {
                    byte == b'_'
                        || byte.is_ascii_uppercase()
                        || (index > 0 && byte.is_ascii_digit())
                });
                if variable.is_empty() || !valid {
                    return Err(format!(
                        "route \"{}\": api_key_env must name an environment variable (A-Z, 0-9, _), got {variable:?}",
                        route.name
                    ));
                }
            }
            let prices = [
                Some(route.price_input_per_mtok),
                route.price_cached_input_per_mtok,
                Some(route.price_output_per_mtok),
            ];
            if prices
                .into_iter()
                .flatten()
                .any(|price| !(price.is_finite() && price >= 0.0))
            {
                return Err(format!(
                    "route \"{}\": prices must be finite and non-negative",
                    route.name
                ));
            }
        }
        let defined = |name: &str, role: &str| -> Result<&Route, String> {
            self.routes
                .iter()
                .find(|route| route.name == name)
                .ok_or_else(|| format!("{role} names route \"{name}\", which is not defined"))
        };
        let known = |name: &str, role: &str| defined(name, role).map(|_| ());
        let tiered = |name: &str, role: &str, tier: Tier| -> Result<(), String> {
            let route = defined(name, role)?;
            if route.tier == tier {
                Ok(())
            } else {
                Err(format!(
                    "{role} route \"{name}\" is measured by the {} tier, expected {}",
                    route.tier.name(),
                    tier.name()
                ))
            }
        };
        // A verifier scores answers; it does not give them.
        let answering = |name: &str, role: &str| -> Result<(), String> {
            let route = defined(name, role)?;
            if route.tier == Tier::Verifier {
                Err(format!(
                    "{role} route \"{name}\" is a verifier and cannot answer requests"
                ))
            } else {
                Ok(())
            }
        };
        match &self.policy {
            PolicySpec::Single { route } => answering(route, "policy.single")?,
            PolicySpec::Static { default, slices } => {
                answering(default, "policy.static.default")?;
                for (slice, route) in slices {
                    answering(route, &format!("policy.static.slices.{slice}"))?;
                }
            }
            PolicySpec::Predictive {
                small,
                large,
                thresholds,
                thresholds_from_calibration,
                ..
            } => {
                tiered(small, "policy.predictive.small", Tier::Small)?;
                tiered(large, "policy.predictive.large", Tier::Large)?;
                check_thresholds(
                    thresholds.as_ref(),
                    *thresholds_from_calibration,
                    "predictive",
                )?;
            }
            PolicySpec::Cascade {
                small,
                verifier,
                large,
                thresholds,
                thresholds_from_calibration,
                ..
            } => {
                tiered(small, "policy.cascade.small", Tier::Small)?;
                tiered(verifier, "policy.cascade.verifier", Tier::Verifier)?;
                tiered(large, "policy.cascade.large", Tier::Large)?;
                check_thresholds(thresholds.as_ref(), *thresholds_from_calibration, "cascade")?;
            }
        }
        for fallback in &self.fallbacks {
            known(&fallback.route, "a fallback")?;
            for target in &fallback.to {
                known(target, &format!("the fallback of \"{}\"", fallback.route))?;
                if *target == fallback.route {
                    return Err(format!("route \"{target}\" falls back to itself"));
                }
            }
        }
        for (slice, constraint) in &self.constraints {
            for route in constraint.routes.iter().flatten() {
                known(route, &format!("constraints.{slice}.routes"))?;
            }
        }
        Ok(())
    }

    /// Concrete thresholds and score column: thresholds from the table, or
    /// from the one calibration of the table's policy on its score column.
    /// `default_score` is the column of a policy that names none.
    pub fn resolve(
        &self,
        calibrations: &[CalibrationDocument],
        default_score: &str,
    ) -> Result<ResolvedTable, String> {
        let thresholds = |written: &Option<BTreeMap<String, f64>>,
                          from_calibration: bool,
                          policy: CalibratedPolicy,
                          score: &str|
         -> Result<Thresholds, String> {
            let mut resolved = Thresholds::default();
            if !from_calibration {
                for (slice, &value) in written.iter().flatten() {
                    let threshold = Some(Threshold(value));
                    if slice == "*" {
                        resolved.default = threshold;
                    } else {
                        resolved.slices.insert(slice.clone(), Threshold(value));
                    }
                }
                return Ok(resolved);
            }
            let calibration = match_calibration(calibrations, policy, score)?;
            for slice in &calibration.slices {
                if let Some(threshold) = slice.threshold {
                    if slice.slice == crate::calibrate::GLOBAL_SLICE {
                        resolved.default = Some(threshold);
                    } else {
                        resolved.slices.insert(slice.slice.clone(), threshold);
                    }
                }
            }
            Ok(resolved)
        };
        let score_of =
            |score: &Option<String>| score.as_deref().unwrap_or(default_score).to_owned();
        let policy = match &self.policy {
            PolicySpec::Single { route } => ResolvedPolicy::Single {
                route: route.clone(),
            },
            PolicySpec::Static { default, slices } => ResolvedPolicy::Static {
                default: default.clone(),
                slices: slices.clone(),
            },
            PolicySpec::Predictive {
                small,
                large,
                score,
                thresholds: written,
                thresholds_from_calibration,
            } => {
                let score = score_of(score);
                ResolvedPolicy::Predictive {
                    small: small.clone(),
                    large: large.clone(),
                    thresholds: thresholds(
                        written,
                        *thresholds_from_calibration,
                        CalibratedPolicy::Predictive,
                        &score,
                    )?,
                    score,
                }
            }
            PolicySpec::Cascade {
                small,
                verifier,
                large,
                score,
                thresholds: written,
                thresholds_from_calibration,
            } => {
                let score = score_of(score);
                ResolvedPolicy::Cascade {
                    small: small.clone(),
                    verifier: verifier.clone(),
                    large: large.clone(),
                    thresholds: thresholds(
                        written,
                        *thresholds_from_calibration,
                        CalibratedPolicy::Cascade,
                        &score,
                    )?,
                    score,
                }
            }
        };
        Ok(ResolvedTable {
            logical_model: self.logical_model.clone(),
            routes: self.routes.clone(),
            policy,
            fallbacks: self.fallbacks.clone(),
            constraints: self.constraints.clone(),
        })
    }
}

/// The one calibration for `policy` whose thresholds apply to `score`.
fn match_calibration<'a>(
    calibrations: &'a [CalibrationDocument],
    policy: CalibratedPolicy,
    score: &str,
) -> Result<&'a CalibrationDocument, String> {
    if calibrations.is_empty() {
        return Err(
            "the policy takes its thresholds from a calibration; pass --calibration".to_owned(),
        );
    }
    let fitting: Vec<&CalibrationDocument> = calibrations
        .iter()
        .filter(|calibration| calibration.policy == policy && calibration.score_column == score)
        .collect();
    match fitting.as_slice() {
        [one] => Ok(one),
        [] => {
            let given: Vec<String> = calibrations
                .iter()
                .map(|calibration| {
                    format!(
                        "{} on \"{}\"",
                        calibration.policy.name(),
                        calibration.score_column
                    )
                })
                .collect();
            Err(format!(
                "no calibration is for a {} policy on the score column \"{score}\" (given: {})",
                policy.name(),
                given.join(", ")
            ))
        }
        _ => Err(format!(
            "{} calibrations are for a {} policy on the score column \"{score}\"; pass one",
            fitting.len(),
            policy.name()
        )),
    }
}

fn check_thresholds(
    written: Option<&BTreeMap<String, f64>>,
    from_calibration: bool,
    policy: &str,
) -> Result<(), String> {
    match (written, from_calibration) {
        (Some(_), true) => Err(format!(
            "policy.{policy}: give thresholds or thresholds_from_calibration, not both"
        )),
        (None, false) => Err(format!(
            "policy.{policy}: needs thresholds or thresholds_from_calibration = true"
        )),
        (Some(thresholds), false) => {
            match thresholds.iter().find(|(_, value)| !value.is_finite()) {
                Some((slice, value)) => Err(format!(
                    "policy.{policy}.thresholds.{slice}: {value} is not finite"
                )),
                None => Ok(()),
            }
        }
        (None, true) => Ok(()),
    }
}
