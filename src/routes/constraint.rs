//! A slice's constraints: which routes and regions it may use, applied
//! before anything is ranked, by the table and by serving alike.

use serde::{Deserialize, Serialize};

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
