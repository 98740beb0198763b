//! What a runtime needs, beyond the table, to reproduce the gated decisions
//! on live requests: how a request's slice is found, what a slice the table
//! does not name gets, the scorer a predictive policy's thresholds belong
//! to, and a cascade's verifier prompt. A candidate writes the parts it owns
//! in `[serving]` ([`ServingSpec`]); the gate adds the router's pin and
//! signs the whole as the config's `serving` block ([`Serving`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::constraint::Constraint;
use super::thresholds::ResolvedPolicy;

/// The header a request's slice is read from unless the table says otherwise.
pub const SLICE_HEADER: &str = "x-routeval-slice";

/// Where a request says which slice it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SliceSource {
    /// An HTTP header.
    Header(String),
    /// A key of the request body's `metadata` object.
    Metadata(String),
    /// The request body's `user` field.
    User,
}

impl Default for SliceSource {
    fn default() -> Self {
        SliceSource::Header(SLICE_HEADER.to_owned())
    }
}

impl SliceSource {
    pub fn describe(&self) -> String {
        match self {
            SliceSource::Header(name) => format!("the header {name}"),
            SliceSource::Metadata(key) => format!("metadata.{key}"),
            SliceSource::User => "the user field".to_owned(),
        }
    }
}

/// What a request of a slice the table has no entry for gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownSlice {
    /// The table's thresholds (or route) for every slice, `"*"`.
    Global,
    /// The policy's strongest tier, with no score computed.
    Strongest,
    /// A 403: the slice must be gated before it is served.
    Refuse,
}

impl UnknownSlice {
    pub fn name(self) -> &'static str {
        match self {
            UnknownSlice::Global => "global",
            UnknownSlice::Strongest => "strongest",
            UnknownSlice::Refuse => "refuse",
        }
    }
}

/// A router outside routeval whose score a request carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalScorer {
    pub name: String,
    pub version: String,
    /// The request header holding the score.
    pub header: String,
}

/// The scorer a predictive policy's thresholds were calibrated on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Scorer {
    /// routeval's learned router (`router train --out`), by the sha256 of
    /// its file, the file format and the featurisation it scores with.
    Builtin {
        sha256: String,
        format: String,
        features: String,
    },
    External(ExternalScorer),
}

/// How a verifier's answer becomes the score a cascade threshold compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictScore {
    /// The probability of "reject" the verifier states (or 1/0 from its
    /// verdict word).
    #[default]
    Stated,
    /// From the verdict token's log-probabilities.
    Logprobs,
}

/// A cascade's verifier prompt as a candidate names it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierSpec {
    /// A template in the rubrics' `prompts/` (`verifier` for
    /// `rubrics/prompts/verifier.toml`).
    pub template: String,
    #[serde(default)]
    pub score: VerdictScore,
    /// The verifier call's `max_tokens`.
    #[serde(default = "default_verifier_tokens")]
    pub max_tokens: u32,
}

fn default_verifier_tokens() -> u32 {
    256
}

/// The verifier prompt, carried in the config so a deploy needs no
/// rubrics directory: the template file's text and its sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedVerifier {
    pub route: String,
    pub template: String,
    pub template_sha256: String,
    pub template_toml: String,
    pub score: VerdictScore,
    pub max_tokens: u32,
}

/// A candidate's `[serving]` section.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingSpec {
    #[serde(default)]
    pub slice: SliceSource,
    #[serde(default)]
    pub unknown_slice: Option<UnknownSlice>,
    /// A predictive policy scored by a router outside routeval; without it
    /// the gate pins its `--router`.
    #[serde(default)]
    pub scorer: Option<ExternalScorer>,
    /// A cascade's verifier prompt.
    #[serde(default)]
    pub verifier: Option<VerifierSpec>,
    /// Admission limits per tenant (`"*"`: each tenant the table does not
    /// name).
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantLimit>,
    /// Exploration: a share of requests answered at a tier drawn uniformly.
    #[serde(default)]
    pub explore: Option<Explore>,
}

/// `[serving.explore]`: the share of requests serve answers at a tier drawn
/// uniformly among the plan's tiers instead of the policy's, so every
/// tier's outcome is observed on production traffic with a known
/// probability. The gate prices it and signs it; serve never explores more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Explore {
    /// The share of every slice's requests that explores.
    pub share: f64,
    /// Shares of their own for some slices.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slices: BTreeMap<String, f64>,
    /// The most exploring may add to the policy's mean cost per request,
    /// as a share of it (`0.05`: 5%), at the gate's measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_added_cost: Option<f64>,
    /// The label draw of the records this config decides, fixed before any
    /// of them exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<LabelCommitment>,
}

/// `[serving.explore.labels]`: which of the config's decisions are drawn
/// to be labelled (each on its own with probability `share`, by a hash of
/// `seed` and its id), signed with the config so the draw is fixed before
/// the records exist: a seed chosen afterwards could be tried until a label
/// set passes. `sample --records --config` draws it; `replay candidate`
/// refuses any other; `gate --production` fails evidence whose config
/// commits none. Choose the seed at random (`od -An -N8 -tu8
/// /dev/urandom`) and keep it from clients, who choose request ids.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelCommitment {
    pub share: f64,
    pub seed: u64,
}

impl Explore {
    /// The share of `slice`'s requests that explores.
    pub fn share_for(&self, slice: &str) -> f64 {
        self.slices.get(slice).copied().unwrap_or(self.share)
    }

    /// Each share in [0, 1) and the cost bound non-negative, or the one
    /// that is not.
    fn check(&self, policy: &ResolvedPolicy) -> Result<(), String> {
        if !matches!(
            policy,
            ResolvedPolicy::Predictive { .. } | ResolvedPolicy::PredictiveTiers { .. }
        ) {
            return Err(format!(
                "[serving.explore]: exploration answers a request at one tier drawn instead of the policy's, which a predictive policy has; a {} policy has none to draw",
                policy.kind()
            ));
        }
        let valid = |share: f64| (0.0..1.0).contains(&share);
        if !valid(self.share) {
            return Err(format!(
                "[serving.explore] share = {}: a share is at least 0 and below 1",
                self.share
            ));
        }
        if let Some((slice, share)) = self.slices.iter().find(|(_, share)| !valid(**share)) {
            return Err(format!(
                "[serving.explore.slices] {slice:?} = {share}: a share is at least 0 and below 1"
            ));
        }
        if let Some(bound) = self.max_added_cost
            && !(bound.is_finite() && bound >= 0.0)
        {
            return Err(format!(
                "[serving.explore] max_added_cost = {bound}: a share of the policy's cost is at least 0"
            ));
        }
        if let Some(labels) = &self.labels
            && !(labels.share > 0.0 && labels.share <= 1.0)
        {
            return Err(format!(
                "[serving.explore.labels] share = {}: a label share is above 0 and at most 1",
                labels.share
            ));
        }
        Ok(())
    }
}

/// What one tenant may have at once: requests in flight, and tokens (each
/// request's prompt estimate plus its `max_tokens`) reserved per minute.
/// Beyond either, a 429 with `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
}

/// The signed config's `serving` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Serving {
    pub slice: SliceSource,
    pub unknown_slice: UnknownSlice,
    /// A predictive policy's scorer.
    pub scorer: Option<Scorer>,
    /// A cascade's verifier prompt.
    pub verifier: Option<PinnedVerifier>,
    /// The organisation's constraints the gate held the table to
    /// (`gate --constraints`), enforced beside the table's own.
    pub constraints: BTreeMap<String, Constraint>,
    /// Admission limits per tenant.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, TenantLimit>,
    /// The exploration the gate priced and signed (route-config/5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explore: Option<Explore>,
}

impl Serving {
    /// The limit of `tenant`: its own, else `"*"`'s.
    pub fn tenant_limit(&self, tenant: &str) -> Option<TenantLimit> {
        self.tenants
            .get(tenant)
            .or_else(|| self.tenants.get("*"))
            .copied()
    }
}

/// What the gate adds to a candidate's `[serving]`: the router it pins and
/// the verifier template it read.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServingInputs<'a> {
    /// The built-in router's file: its sha256.
    pub router_sha256: Option<&'a str>,
    /// The verifier template's name, file text and sha256.
    pub template: Option<(&'a str, &'a str, &'a str)>,
    pub constraints: Option<&'a BTreeMap<String, Constraint>>,
}

/// The format of the router file the gate pins: one that keeps the prompts
/// it was fitted on (serve also loads the format before it).
pub const BUILTIN_ROUTER_FORMAT: &str = "RVROUTE3";

impl ServingSpec {
    /// The signed `serving` block for `policy`, or the one thing left open.
    pub fn pin(
        &self,
        policy: &ResolvedPolicy,
        inputs: ServingInputs<'_>,
        features: &str,
    ) -> Result<Serving, String> {
        let unknown_slice = self.unknown_slice.ok_or(
            "[serving] unknown_slice is not set: say what a slice the table does not name gets (\"global\", \"strongest\" or \"refuse\")",
        )?;
        if unknown_slice == UnknownSlice::Global && !has_global(policy) {
            return Err(format!(
                "[serving] unknown_slice = \"global\", but the {} policy has no thresholds for \"*\"; use \"strongest\" or \"refuse\", or give \"*\" a threshold",
                policy.kind()
            ));
        }
        let predictive = matches!(
            policy,
            ResolvedPolicy::Predictive { .. } | ResolvedPolicy::PredictiveTiers { .. }
        );
        let scorer = match (predictive, &self.scorer, inputs.router_sha256) {
            (false, None, _) => None,
            (false, Some(_), _) => {
                return Err(format!(
                    "[serving] scorer: a {} policy has no router score",
                    policy.kind()
                ));
            }
            (true, Some(_), Some(_)) => {
                return Err(
                    "[serving] scorer names an external router and --router pins the built-in one; keep one"
                        .to_owned(),
                );
            }
            (true, Some(external), None) => Some(Scorer::External(external.clone())),
            (true, None, Some(sha256)) => Some(Scorer::Builtin {
                sha256: sha256.to_owned(),
                format: BUILTIN_ROUTER_FORMAT.to_owned(),
                features: features.to_owned(),
            }),
            (true, None, None) => {
                return Err(
                    "the predictive policy's scorer is not pinned: pass --router ROUTER.bin (the built-in router that produced its score column) or name an external one in [serving.scorer]"
                        .to_owned(),
                );
            }
        };
        let cascade_verifier = match policy {
            ResolvedPolicy::Cascade { verifier, .. }
            | ResolvedPolicy::CascadeStages { verifier, .. } => Some(verifier),
            _ => None,
        };
        let verifier = match (cascade_verifier, &self.verifier, inputs.template) {
            (None, None, _) => None,
            (None, Some(_), _) => {
                return Err(format!(
                    "[serving] verifier: a {} policy calls no verifier",
                    policy.kind()
                ));
            }
            (Some(_), None, _) => {
                return Err(
                    "the cascade's verifier prompt is not pinned: give [serving.verifier] template = \"NAME\" (a file in the rubrics' prompts/)"
                        .to_owned(),
                );
            }
            (Some(_), Some(spec), None) => {
                return Err(format!(
                    "[serving.verifier] template {:?} was not read",
                    spec.template
                ));
            }
            (Some(route), Some(spec), Some((name, text, sha256))) => Some(PinnedVerifier {
                route: route.clone(),
                template: name.to_owned(),
                template_sha256: sha256.to_owned(),
                template_toml: text.to_owned(),
                score: spec.score,
                max_tokens: spec.max_tokens,
            }),
        };
        check_tenants(&self.tenants)?;
        if let Some(explore) = &self.explore {
            explore.check(policy)?;
        }
        Ok(Serving {
            slice: self.slice.clone(),
            unknown_slice,
            scorer,
            verifier,
            constraints: inputs.constraints.cloned().unwrap_or_default(),
            tenants: self.tenants.clone(),
            explore: self.explore.clone(),
        })
    }
}

/// Each tenant's limit sets something, and nothing to 0.
fn check_tenants(tenants: &BTreeMap<String, TenantLimit>) -> Result<(), String> {
    for (tenant, limit) in tenants {
        if limit.max_in_flight == Some(0) || limit.tpm == Some(0) {
            return Err(format!(
                "[serving.tenants.{tenant}]: max_in_flight and tpm must be at least 1"
            ));
        }
        if limit.max_in_flight.is_none() && limit.tpm.is_none() {
            return Err(format!(
                "[serving.tenants.{tenant}] sets neither max_in_flight nor tpm"
            ));
        }
    }
    Ok(())
}

/// Whether the policy decides a slice it does not name.
fn has_global(policy: &ResolvedPolicy) -> bool {
    match policy {
        ResolvedPolicy::Single { .. } | ResolvedPolicy::Static { .. } => true,
        ResolvedPolicy::Predictive { thresholds, .. }
        | ResolvedPolicy::Cascade { thresholds, .. } => thresholds.default.is_some(),
        ResolvedPolicy::PredictiveTiers { thresholds, .. }
        | ResolvedPolicy::CascadeStages { thresholds, .. } => thresholds.default.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::Thresholds;
    use crate::schema::Threshold;

    fn predictive(default: Option<f64>) -> ResolvedPolicy {
        ResolvedPolicy::Predictive {
            small: "small".to_owned(),
            large: "large".to_owned(),
            score: "router_score".to_owned(),
            thresholds: Thresholds {
                default: default.map(Threshold),
                slices: BTreeMap::from([("a".to_owned(), Threshold(0.5))]),
            },
        }
    }

    #[test]
    fn each_open_part_is_named_and_a_complete_spec_pins() {
        let spec: ServingSpec = toml::from_str("unknown_slice = \"strongest\"").unwrap();
        let open = spec
            .pin(&predictive(None), ServingInputs::default(), "f/1")
            .unwrap_err();
        assert!(open.contains("--router"), "{open}");
        let pinned = spec
            .pin(
                &predictive(None),
                ServingInputs {
                    router_sha256: Some("ab"),
                    ..ServingInputs::default()
                },
                "f/1",
            )
            .unwrap();
        assert_eq!(pinned.slice, SliceSource::Header(SLICE_HEADER.to_owned()));
        assert!(
            matches!(pinned.scorer, Some(Scorer::Builtin { ref sha256, .. }) if sha256 == "ab")
        );

        let unset = ServingSpec::default()
            .pin(&predictive(Some(0.1)), ServingInputs::default(), "f/1")
            .unwrap_err();
        assert!(unset.contains("unknown_slice is not set"), "{unset}");
        let global: ServingSpec =
            toml::from_str("unknown_slice = \"global\"\nslice = { metadata = \"tenant\" }")
                .unwrap();
        assert_eq!(global.slice, SliceSource::Metadata("tenant".to_owned()));
        let no_default = global
            .pin(
                &predictive(None),
                ServingInputs {
                    router_sha256: Some("ab"),
                    ..ServingInputs::default()
                },
                "f/1",
            )
            .unwrap_err();
        assert!(
            no_default.contains("no thresholds for \"*\""),
            "{no_default}"
        );
        let cascade = ResolvedPolicy::Cascade {
            small: "small".to_owned(),
            verifier: "verifier".to_owned(),
            large: "large".to_owned(),
            score: "score".to_owned(),
            thresholds: Thresholds::default(),
        };
        let spec: ServingSpec = toml::from_str("unknown_slice = \"refuse\"").unwrap();
        assert!(
            spec.pin(&cascade, ServingInputs::default(), "f/1")
                .unwrap_err()
                .contains("[serving.verifier]")
        );
        let user: ServingSpec =
            toml::from_str("unknown_slice = \"refuse\"\nslice = \"user\"").unwrap();
        assert_eq!(user.slice, SliceSource::User);
    }
}
