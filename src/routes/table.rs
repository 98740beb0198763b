//! A candidate route table and its resolution against a calibration.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::schema::{CalibrationDocument, Policy as CalibratedPolicy, Threshold};

use super::constraint::Constraint;
use super::error::RouteError;
use super::serving::ServingSpec;
use super::thresholds::{PolicySpec, ResolvedPolicy, Thresholds, TierThresholds, WrittenThreshold};

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

/// The graded-results tier that measures a route: `small`, `large`,
/// `verifier`, or a tier between them named in the results (`mid`: its
/// `mid_ok` and `cost_mid` columns), which only a `tiers` or `stages`
/// policy can use.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RouteTier(String);

impl RouteTier {
    pub fn new(name: impl Into<String>) -> RouteTier {
        RouteTier(name.into())
    }

    /// The two-tier tier this is, if it is one.
    pub fn known(&self) -> Option<Tier> {
        Tier::parse(&self.0)
    }

    pub fn name(&self) -> &str {
        &self.0
    }
}

impl From<Tier> for RouteTier {
    fn from(tier: Tier) -> RouteTier {
        RouteTier(tier.name().to_owned())
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
    pub tier: RouteTier,
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
    /// The route's circuit breaker, as `replay fallback --calibrate` chose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<RouteBreaker>,
    /// A second copy of a short request still waiting for its first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<RouteHedge>,
    /// Whether serve may call the route with streaming for a client that
    /// did not stream, and assemble the answer (docs/serve.md). `false` for
    /// an upstream that cannot stream: its non-streamed calls are bounded
    /// by the total deadline only, and its breaker cannot see a slow first
    /// token (the gate warns).
    #[serde(default = "streams", skip_serializing_if = "is_streaming")]
    pub stream_upstream: bool,
}

fn streams() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_streaming(stream_upstream: &bool) -> bool {
    *stream_upstream
}

/// Hedging: a request whose prompt is at most `max_prompt_tokens` (as
/// estimated) and that has no first token `after_ms` after it was sent
/// gets a second copy on the same route; the first to give a first token
/// answers, and the other is cancelled. `replay hedge` shows the trade-off
/// (`after_ms` is one of its delays, a quantile of the route's first
/// tokens).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteHedge {
    pub after_ms: f64,
    pub max_prompt_tokens: u64,
}

impl RouteHedge {
    pub(super) fn check(&self) -> Result<(), String> {
        if !(self.after_ms.is_finite() && self.after_ms > 0.0) {
            return Err(format!(
                "after_ms must be a positive number, got {}",
                self.after_ms
            ));
        }
        if self.max_prompt_tokens == 0 {
            return Err("max_prompt_tokens must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// A route's circuit breaker: a first token later than the deadline, an
/// error or a 429 is a failure; `open_after` consecutive failures open it
/// for `open_ms`, then one half-open probe tries the route again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteBreaker {
    pub first_token_deadline_ms: f64,
    pub open_after: u32,
    pub open_ms: f64,
}

impl RouteBreaker {
    pub(super) fn check(&self) -> Result<(), String> {
        if !(self.first_token_deadline_ms.is_finite() && self.first_token_deadline_ms > 0.0) {
            return Err(format!(
                "first_token_deadline_ms must be a positive number, got {}",
                self.first_token_deadline_ms
            ));
        }
        if !(self.open_ms.is_finite() && self.open_ms > 0.0) {
            return Err(format!(
                "open_ms must be a positive number, got {}",
                self.open_ms
            ));
        }
        if self.open_after == 0 {
            return Err("open_after must be at least 1".to_owned());
        }
        Ok(())
    }

    /// The table's text with this breaker as route `route`'s
    /// `[routes.breaker]`, replacing one it had. The text is edited, not
    /// rewritten: comments, spacing, key order, any spelling of the route's
    /// header or name, and the file's line endings stay as they were.
    pub fn written_into(&self, text: &str, route: &str) -> Result<String, String> {
        use toml_edit::{DocumentMut, InlineTable, Item, Table, Value, value};
        let mut document: DocumentMut = text
            .parse()
            .map_err(|error| format!("not a TOML table: {error}"))?;
        let named = |name: Option<&Item>| name.and_then(Item::as_str) == Some(route);
        let missing = || format!("no [[routes]] named {route:?}");
        let routes = document.get_mut("routes").ok_or_else(missing)?;
        if let Some(tables) = routes.as_array_of_tables_mut() {
            let entry = tables
                .iter_mut()
                .find(|table| named(table.get("name")))
                .ok_or_else(missing)?;
            let mut breaker = Table::new();
            breaker["first_token_deadline_ms"] = value(self.first_token_deadline_ms);
            breaker["open_after"] = value(i64::from(self.open_after));
            breaker["open_ms"] = value(self.open_ms);
            breaker
                .decor_mut()
                .set_suffix("  # routeval replay fallback --calibrate");
            entry.insert("breaker", Item::Table(breaker));
        } else if let Some(inline) = routes.as_array_mut() {
            let entry = inline
                .iter_mut()
                .filter_map(Value::as_inline_table_mut)
                .find(|table| table.get("name").and_then(Value::as_str) == Some(route))
                .ok_or_else(missing)?;
            let mut breaker = InlineTable::new();
            breaker.insert(
                "first_token_deadline_ms",
                self.first_token_deadline_ms.into(),
            );
            breaker.insert("open_after", i64::from(self.open_after).into());
            breaker.insert("open_ms", self.open_ms.into());
            entry.insert("breaker", Value::InlineTable(breaker));
        } else {
            return Err(missing());
        }
        let written = document.to_string();
        // New lines come out as \n: a CRLF file keeps CRLF throughout.
        Ok(if text.contains("\r\n") {
            written.replace("\r\n", "\n").replace('\n', "\r\n")
        } else {
            written
        })
    }
}

/// Where a route's traffic goes when it fails before its first token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    pub route: String,
    pub to: Vec<String>,
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
    /// What serving the table needs beyond it (docs/serve.md).
    #[serde(default)]
    pub serving: ServingSpec,
    /// What the table asks of the gate; not signed into the config.
    #[serde(default)]
    pub gate: GateSpec,
}

/// A table's own settings for the gate (`[gate]`), part of the change a
/// reviewer approves.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateSpec {
    /// The cost increase over the deployed config this table accepts (3.0:
    /// up to four times its mean cost per request), above the gate's
    /// `--max-cost-increase`.
    pub accept_cost_increase: Option<f64>,
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

    /// The tier names of `routes`, in their order.
    fn tier_names(&self, routes: &[String]) -> Vec<String> {
        routes
            .iter()
            .filter_map(|name| self.routes.iter().find(|route| route.name == *name))
            .map(|route| route.tier.name().to_owned())
            .collect()
    }

    /// Concrete thresholds and score column: thresholds from the table, or
    /// from the one calibration of the table's policy on its score column.
    /// `default_score` is the column of a policy that names none.
    pub fn resolve(
        &self,
        calibrations: &[CalibrationDocument],
        default_score: &str,
    ) -> Result<ResolvedTable, String> {
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
                tiers,
                score,
                thresholds: written,
                thresholds_from_calibration,
            } => {
                let score = score_of(score);
                let source = ThresholdSource::new(
                    calibrations,
                    CalibratedPolicy::Predictive,
                    written,
                    *thresholds_from_calibration,
                );
                match two_or_more(small, large, tiers, "predictive", "tiers")? {
                    Form::Two(small, large) => ResolvedPolicy::Predictive {
                        small: small.to_owned(),
                        large: large.to_owned(),
                        thresholds: source.two_tier(&score)?,
                        score,
                    },
                    Form::Many(tiers) => ResolvedPolicy::PredictiveTiers {
                        tiers: tiers.to_vec(),
                        thresholds: source.tiers(self.tier_names(tiers), Some(&score))?,
                        score,
                    },
                }
            }
            PolicySpec::Cascade {
                small,
                verifier,
                large,
                stages,
                score,
                thresholds: written,
                thresholds_from_calibration,
            } => {
                let source = ThresholdSource::new(
                    calibrations,
                    CalibratedPolicy::Cascade,
                    written,
                    *thresholds_from_calibration,
                );
                match two_or_more(small, large, stages, "cascade", "stages")? {
                    Form::Two(small, large) => {
                        let score = score_of(score);
                        ResolvedPolicy::Cascade {
                            small: small.to_owned(),
                            verifier: verifier.clone(),
                            large: large.to_owned(),
                            thresholds: source.two_tier(&score)?,
                            score,
                        }
                    }
                    Form::Many(stages) => {
                        if score.is_some() {
                            return Err("policy.cascade: with stages, each stage's verifier score is its tier's score_NAME column; drop score".to_owned());
                        }
                        ResolvedPolicy::CascadeStages {
                            stages: stages.to_vec(),
                            verifier: verifier.clone(),
                            thresholds: source.tiers(self.tier_names(stages), None)?,
                        }
                    }
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

/// Where a policy's thresholds come from: the table as written, or the one
/// calibration of the same policy (and tiers) on the same score column.
struct ThresholdSource<'a> {
    written: &'a Option<BTreeMap<String, WrittenThreshold>>,
    from_calibration: bool,
    calibrations: &'a [CalibrationDocument],
    policy: CalibratedPolicy,
}

impl<'a> ThresholdSource<'a> {
    fn new(
        calibrations: &'a [CalibrationDocument],
        policy: CalibratedPolicy,
        written: &'a Option<BTreeMap<String, WrittenThreshold>>,
        from_calibration: bool,
    ) -> ThresholdSource<'a> {
        ThresholdSource {
            written,
            from_calibration,
            calibrations,
            policy,
        }
    }

    /// A two-tier policy's threshold per slice (`*` the default).
    fn two_tier(&self, score: &str) -> Result<Thresholds, String> {
        let mut resolved = Thresholds::default();
        if !self.from_calibration {
            for (slice, value) in self.written.iter().flatten() {
                let WrittenThreshold::One(value) = *value else {
                    unreachable!("checked when the table was loaded")
                };
                if slice == "*" {
                    resolved.default = Some(Threshold(value));
                } else {
                    resolved.slices.insert(slice.clone(), Threshold(value));
                }
            }
            return Ok(resolved);
        }
        let calibration = match_calibration(self.calibrations, self.policy, Some(score), None)?;
        for slice in &calibration.slices {
            if let Some(threshold) = slice.threshold {
                if slice.slice == crate::schema::GLOBAL_SLICE {
                    resolved.default = Some(threshold);
                } else {
                    resolved.slices.insert(slice.slice.clone(), threshold);
                }
            }
        }
        Ok(resolved)
    }

    /// A k-tier policy's ordered thresholds per slice, over `tiers`.
    fn tiers(&self, tiers: Vec<String>, score: Option<&str>) -> Result<TierThresholds, String> {
        let mut resolved = TierThresholds::default();
        if !self.from_calibration {
            for (slice, value) in self.written.iter().flatten() {
                let WrittenThreshold::Many(values) = value else {
                    unreachable!("checked when the table was loaded")
                };
                let values: Vec<Threshold> = values.iter().map(|&value| Threshold(value)).collect();
                if slice == "*" {
                    resolved.default = Some(values);
                } else {
                    resolved.slices.insert(slice.clone(), values);
                }
            }
            return Ok(resolved);
        }
        let calibration = match_calibration(self.calibrations, self.policy, score, Some(&tiers))?;
        for slice in &calibration.slices {
            let Some(tiered) = slice.tiered.as_ref().filter(|_| slice.feasible) else {
                continue;
            };
            if slice.slice == crate::schema::GLOBAL_SLICE {
                resolved.default = Some(tiered.thresholds.clone());
            } else {
                resolved
                    .slices
                    .insert(slice.slice.clone(), tiered.thresholds.clone());
            }
        }
        Ok(resolved)
    }
}

/// The one calibration for `policy` whose thresholds apply to `score` (any
/// score column when `None`) over `tiers` (two-tier calibrations when
/// `None`).
fn match_calibration<'a>(
    calibrations: &'a [CalibrationDocument],
    policy: CalibratedPolicy,
    score: Option<&str>,
    tiers: Option<&[String]>,
) -> Result<&'a CalibrationDocument, String> {
    if calibrations.is_empty() {
        return Err(
            "the policy takes its thresholds from a calibration; pass --calibration".to_owned(),
        );
    }
    let fits_tiers = |calibration: &CalibrationDocument| match (tiers, &calibration.tiers) {
        (None, None) => true,
        (None, Some(theirs)) => theirs.len() == 2,
        (Some(ours), Some(theirs)) => ours == theirs.as_slice(),
        (Some(_), None) => false,
    };
    let fitting: Vec<&CalibrationDocument> = calibrations
        .iter()
        .filter(|calibration| {
            calibration.policy == policy
                && score.is_none_or(|score| calibration.score_column == score)
                && fits_tiers(calibration)
        })
        .collect();
    let wanted = match (score, tiers) {
        (Some(score), None) => {
            format!("a {} policy on the score column \"{score}\"", policy.name())
        }
        (Some(score), Some(tiers)) => format!(
            "a {} policy over the tiers {} on the score column \"{score}\"",
            policy.name(),
            tiers.join(", ")
        ),
        (None, Some(tiers)) => format!(
            "a {} policy over the tiers {}",
            policy.name(),
            tiers.join(", ")
        ),
        (None, None) => format!("a {} policy", policy.name()),
    };
    match fitting.as_slice() {
        [one] => Ok(one),
        [] => {
            let given: Vec<String> = calibrations
                .iter()
                .map(|calibration| {
                    format!(
                        "{} on \"{}\"{}",
                        calibration.policy.name(),
                        calibration.score_column,
                        calibration
                            .tiers
                            .as_ref()
                            .map(|tiers| format!(" over {}", tiers.join(", ")))
                            .unwrap_or_default()
                    )
                })
                .collect();
            Err(format!(
                "no calibration is for {wanted} (given: {})",
                given.join(", ")
            ))
        }
        _ => Err(format!(
            "{} calibrations are for {wanted}; pass one",
            fitting.len()
        )),
    }
}

/// A policy's answering routes as written: `small` and `large`, or a list.
pub(super) enum Form<'a> {
    Two(&'a str, &'a str),
    Many(&'a [String]),
}

pub(super) fn two_or_more<'a>(
    small: &'a Option<String>,
    large: &'a Option<String>,
    list: &'a Option<Vec<String>>,
    policy: &str,
    key: &str,
) -> Result<Form<'a>, String> {
    match (small, large, list) {
        (Some(small), Some(large), None) => Ok(Form::Two(small, large)),
        (None, None, Some(list)) => Ok(Form::Many(list)),
        (_, _, Some(_)) => Err(format!(
            "policy.{policy}: give small and large, or {key}, not both"
        )),
        _ => Err(format!("policy.{policy}: needs small and large, or {key}")),
    }
}

/// `lists`: for a k-tier policy, how many thresholds each slice needs and
/// whether they must ascend.
pub(super) fn check_thresholds(
    written: Option<&BTreeMap<String, WrittenThreshold>>,
    from_calibration: bool,
    policy: &str,
    lists: Option<(usize, bool)>,
) -> Result<(), String> {
    match (written, from_calibration) {
        (Some(_), true) => Err(format!(
            "policy.{policy}: give thresholds or thresholds_from_calibration, not both"
        )),
        (None, false) => Err(format!(
            "policy.{policy}: needs thresholds or thresholds_from_calibration = true"
        )),
        (Some(thresholds), false) => {
            for (slice, value) in thresholds {
                let at = format!("policy.{policy}.thresholds.{slice}");
                let values: &[f64] = match (value, lists) {
                    (WrittenThreshold::One(value), None) => std::slice::from_ref(value),
                    (WrittenThreshold::Many(values), Some((length, ascending))) => {
                        if values.len() != length {
                            return Err(format!(
                                "{at}: {} thresholds, expected {length} (one per tier boundary{})",
                                values.len(),
                                if ascending {
                                    ""
                                } else {
                                    ": one per non-final stage"
                                }
                            ));
                        }
                        if ascending && values.windows(2).any(|pair| pair[0] > pair[1]) {
                            return Err(format!("{at}: {values:?} must ascend"));
                        }
                        values
                    }
                    (WrittenThreshold::Many(_), None) => {
                        return Err(format!(
                            "{at}: one threshold per slice for two tiers, found a list"
                        ));
                    }
                    (WrittenThreshold::One(_), Some((length, _))) => {
                        return Err(format!(
                            "{at}: a list of {length} thresholds, found one number"
                        ));
                    }
                };
                if let Some(value) = values.iter().find(|value| !value.is_finite()) {
                    return Err(format!("{at}: {value} is not finite"));
                }
            }
            Ok(())
        }
        (None, true) => Ok(()),
    }
}
