//! The rules a route table keeps before anything resolves it: pinned
//! models, plain URLs, sane prices and breakers, and every route a policy,
//! a fallback or a constraint names defined, of the tier it is measured by.

use super::table::{Form, Route, RouteTable, Tier, check_thresholds, two_or_more};
use super::thresholds::PolicySpec;
use crate::schema::floating_alias;

impl RouteTable {
    pub(super) fn check(&self) -> Result<(), String> {
        if self.logical_model.trim().is_empty() {
            return Err("logical_model is empty".to_owned());
        }
        if let Some(accepted) = self.gate.accept_cost_increase
            && !(accepted.is_finite() && accepted >= 0.0)
        {
            return Err(format!(
                "gate.accept_cost_increase must be a number of at least 0 (0.5: up to 50% more than the deployed config), got {accepted}"
            ));
        }
        self.check_routes()?;
        self.check_policy_routes()?;
        self.check_references()
    }

    /// Each route on its own.
    fn check_routes(&self) -> Result<(), String> {
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
            if let Some(breaker) = &route.breaker {
                breaker
                    .check()
                    .map_err(|problem| format!("route \"{}\": breaker: {problem}", route.name))?;
            }
            if let Some(hedge) = &route.hedge {
                hedge
                    .check()
                    .map_err(|problem| format!("route \"{}\": hedge: {problem}", route.name))?;
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
        Ok(())
    }

    fn route_named(&self, name: &str, role: &str) -> Result<&Route, String> {
        self.routes
            .iter()
            .find(|route| route.name == name)
            .ok_or_else(|| format!("{role} names route \"{name}\", which is not defined"))
    }

    fn known_route(&self, name: &str, role: &str) -> Result<(), String> {
        self.route_named(name, role).map(|_| ())
    }

    fn route_of_tier(&self, name: &str, role: &str, tier: Tier) -> Result<(), String> {
        let route = self.route_named(name, role)?;
        if route.tier.known() == Some(tier) {
            Ok(())
        } else {
            Err(format!(
                "{role} route \"{name}\" is measured by the {} tier, expected {}",
                route.tier.name(),
                tier.name()
            ))
        }
    }

    /// The routes the policy names, each of the tier its role needs.
    fn check_policy_routes(&self) -> Result<(), String> {
        for route in &self.routes {
            let name = route.tier.name();
            if !crate::schema::is_tier_name(name) {
                return Err(format!(
                    "route \"{}\": tier {name:?} is not a tier name (letters, digits, - and _)",
                    route.name
                ));
            }
        }
        match &self.policy {
            PolicySpec::Single { route } => self.answering_route(route, "policy.single")?,
            PolicySpec::Static { default, slices } => {
                self.answering_route(default, "policy.static.default")?;
                for (slice, route) in slices {
                    self.answering_route(route, &format!("policy.static.slices.{slice}"))?;
                }
            }
            PolicySpec::Predictive {
                small,
                large,
                tiers,
                thresholds,
                thresholds_from_calibration,
                ..
            } => match two_or_more(small, large, tiers, "predictive", "tiers")? {
                Form::Two(small, large) => {
                    self.route_of_tier(small, "policy.predictive.small", Tier::Small)?;
                    self.route_of_tier(large, "policy.predictive.large", Tier::Large)?;
                    check_thresholds(
                        thresholds.as_ref(),
                        *thresholds_from_calibration,
                        "predictive",
                        None,
                    )?;
                }
                Form::Many(tiers) => {
                    self.check_tier_routes(tiers, "policy.predictive.tiers")?;
                    check_thresholds(
                        thresholds.as_ref(),
                        *thresholds_from_calibration,
                        "predictive",
                        Some((tiers.len() - 1, true)),
                    )?;
                }
            },
            PolicySpec::Cascade {
                small,
                verifier,
                large,
                stages,
                thresholds,
                thresholds_from_calibration,
                ..
            } => {
                self.route_of_tier(verifier, "policy.cascade.verifier", Tier::Verifier)?;
                match two_or_more(small, large, stages, "cascade", "stages")? {
                    Form::Two(small, large) => {
                        self.route_of_tier(small, "policy.cascade.small", Tier::Small)?;
                        self.route_of_tier(large, "policy.cascade.large", Tier::Large)?;
                        check_thresholds(
                            thresholds.as_ref(),
                            *thresholds_from_calibration,
                            "cascade",
                            None,
                        )?;
                    }
                    Form::Many(stages) => {
                        self.check_tier_routes(stages, "policy.cascade.stages")?;
                        check_thresholds(
                            thresholds.as_ref(),
                            *thresholds_from_calibration,
                            "cascade",
                            Some((stages.len() - 1, false)),
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A route that answers requests: a verifier scores answers; it does
    /// not give them.
    fn answering_route(&self, name: &str, role: &str) -> Result<(), String> {
        let route = self.route_named(name, role)?;
        match route.tier.known() {
            Some(Tier::Verifier) => Err(format!(
                "{role} route \"{name}\" is a verifier and cannot answer requests"
            )),
            Some(_) => Ok(()),
            None => Err(format!(
                "{role} route \"{name}\" is measured by the tier \"{}\", which only a tiers or stages policy can use",
                route.tier.name()
            )),
        }
    }

    /// A k-tier policy's routes, cheapest first: the first measured by the
    /// small tier and the last by the large one (their columns are the
    /// two-tier table's), the ones between by tiers of their own.
    fn check_tier_routes(&self, names: &[String], role: &str) -> Result<(), String> {
        if names.len() < 2 {
            return Err(format!("{role}: name at least two routes, cheapest first"));
        }
        let mut seen: Vec<&str> = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let route = self.route_named(name, role)?;
            let expected = match index {
                0 => Some(Tier::Small),
                last if last + 1 == names.len() => Some(Tier::Large),
                _ => None,
            };
            let tier = route.tier.known();
            let fits = match expected {
                Some(expected) => tier == Some(expected),
                None => tier.is_none(),
            };
            if !fits {
                let wanted = expected.map_or_else(
                    || "a tier of its own between small and large".to_owned(),
                    |tier| format!("the {} tier", tier.name()),
                );
                return Err(format!(
                    "{role}: route \"{name}\" is measured by the tier \"{}\"; position {} needs {wanted}",
                    route.tier.name(),
                    index + 1
                ));
            }
            if seen.contains(&route.tier.name()) {
                return Err(format!(
                    "{role}: two routes are measured by the tier \"{}\"",
                    route.tier.name()
                ));
            }
            seen.push(route.tier.name());
        }
        Ok(())
    }

    /// The routes fallbacks and constraints name.
    fn check_references(&self) -> Result<(), String> {
        for fallback in &self.fallbacks {
            self.known_route(&fallback.route, "a fallback")?;
            for target in &fallback.to {
                self.known_route(target, &format!("the fallback of \"{}\"", fallback.route))?;
                if *target == fallback.route {
                    return Err(format!("route \"{target}\" falls back to itself"));
                }
            }
        }
        for (slice, constraint) in &self.constraints {
            for route in constraint.routes.iter().flatten() {
                self.known_route(route, &format!("constraints.{slice}.routes"))?;
            }
        }
        Ok(())
    }
}
