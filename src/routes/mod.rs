//! Route tables: how a gateway serves one logical model. A candidate table
//! (`routes/*.toml`, strict) names its routes, each pinned to a model
//! version, the policy that chooses between them, fallbacks taken only before
//! the first token, and per-slice constraints. [`RouteTable::resolve`] turns
//! a candidate into a [`ResolvedTable`] with concrete per-slice thresholds:
//! the form the gate evaluates and the signed route config carries.
//!
//! The signed route config ([`RouteConfig`]) is the gate's output and what a
//! deploy trusts: its minisign signatures ([`sign`], [`verify_signature`],
//! `routeval keygen`) and the checks `routeval verify` makes before anything
//! serves it ([`verify_config`]).

mod check;
mod config;
mod constraint;
mod error;
mod serving;
mod signature;
mod table;
mod thresholds;
mod verify;

pub use config::{
    ConfigRef, EXPLORING_ROUTE_CONFIG_SCHEMA, Provenance, ROUTE_CONFIG_SCHEMA, RouteConfig,
    SERVING_ROUTE_CONFIG_SCHEMA, TIERED_ROUTE_CONFIG_SCHEMA, signature_path,
};
pub use constraint::Constraint;
pub use error::RouteError;
pub use serving::{
    BUILTIN_ROUTER_FORMAT, Explore, ExternalScorer, LabelCommitment, PinnedVerifier, SLICE_HEADER,
    Scorer, Serving, ServingInputs, ServingSpec, SliceSource, TenantLimit, UnknownSlice,
    VerdictScore, VerifierSpec,
};
pub use signature::{
    SignatureError, generate as generate_keys, load_public, load_secret, public_key_path, sign,
    verify as verify_signature,
};
pub use table::{
    Fallback, GateSpec, ResolvedTable, Route, RouteBreaker, RouteHedge, RouteTable, RouteTier, Tier,
};
pub use thresholds::{PolicySpec, ResolvedPolicy, Thresholds, TierThresholds, WrittenThreshold};
pub use verify::{
    Verified, VerifyError, check as check_config, check_signed, read_signed, verify_config,
};
