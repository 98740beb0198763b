//! Route tables: how a gateway serves one logical model. A candidate table
//! (`routes/*.toml`, strict) names its routes, each pinned to a model
//! version, the policy that chooses between them, fallbacks taken only before
//! the first token, and per-slice constraints. [`RouteTable::resolve`] turns
//! a candidate into a [`ResolvedTable`] with concrete per-slice thresholds:
//! the form the gate evaluates and the signed route config carries.

mod error;
mod pin;
mod policy;
mod table;

pub use error::RouteError;
pub use pin::floating_alias;
pub use policy::{PolicySpec, ResolvedPolicy, Thresholds, TierThresholds, WrittenThreshold};
pub use table::{
    Constraint, Fallback, ResolvedTable, Route, RouteBreaker, RouteTable, RouteTier, Tier,
};
