//! The `tier` of a responses-table row: an answering tier (`small`,
//! `large`, or a tier between them by its name in `routeval.toml`) or the
//! verifier of one cascade stage (`verifier` checks the first tier's
//! answer, `verifier_NAME` the answer of the tier NAME after it).
//!
//! Names are interned: a run touches a handful of them millions of times,
//! in keys, sets and sorts, so a [`CallTier`] is a `Copy` index that
//! compares in the table's order: small, the tiers between by name, large,
//! then the verifiers (the first stage's before the later ones by name).

use std::sync::{LazyLock, RwLock};

/// More distinct names than any run has: a file naming more is not a run's.
const MAX_NAMES: usize = 1024;

static NAMES: LazyLock<RwLock<Vec<&'static str>>> =
    LazyLock::new(|| RwLock::new(vec!["small", "large", "verifier"]));

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallTier(u16);

impl CallTier {
    pub const SMALL: CallTier = CallTier(0);
    pub const LARGE: CallTier = CallTier(1);
    pub const VERIFIER: CallTier = CallTier(2);

    /// The tier named `name`, if it is a tier name (letters, digits, `-`
    /// and `_`).
    pub fn parse(name: &str) -> Option<CallTier> {
        if !crate::schema::is_tier_name(name) {
            return None;
        }
        if let Some(index) = NAMES
            .read()
            .expect("unpoisoned")
            .iter()
            .position(|known| *known == name)
        {
            return Some(CallTier(index as u16));
        }
        let mut names = NAMES.write().expect("unpoisoned");
        // Another thread may have added it between the two locks.
        if let Some(index) = names.iter().position(|known| *known == name) {
            return Some(CallTier(index as u16));
        }
        if names.len() >= MAX_NAMES {
            return None;
        }
        names.push(Box::leak(name.to_owned().into_boxed_str()));
        Some(CallTier((names.len() - 1) as u16))
    }

    pub fn name(self) -> &'static str {
        NAMES.read().expect("unpoisoned")[usize::from(self.0)]
    }

    /// A small integer unique to this name within the process, for packed keys.
    pub fn id(self) -> u16 {
        self.0
    }

    /// The tier of [`CallTier::id`].
    pub fn from_id(id: u16) -> CallTier {
        assert!(
            usize::from(id) < NAMES.read().expect("unpoisoned").len(),
            "an interned id"
        );
        CallTier(id)
    }

    pub fn is_verifier(self) -> bool {
        let name = self.name();
        name == "verifier" || name.starts_with("verifier_")
    }

    /// The verifier of stage `stage` (0-based) whose answering tier is
    /// `tier`: `verifier` for the first stage, as a two-tier run names it.
    pub fn verifier_of(stage: usize, tier: CallTier) -> CallTier {
        if stage == 0 {
            return CallTier::VERIFIER;
        }
        CallTier::parse(&format!("verifier_{}", tier.name())).expect("a tier name stays one")
    }

    fn rank(self) -> (u8, &'static str) {
        let name = self.name();
        let class = match name {
            "small" => 0,
            "large" => 2,
            "verifier" => 3,
            _ if self.is_verifier() => 4,
            _ => 1,
        };
        (class, name)
    }
}

impl Ord for CallTier {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.0 == other.0 {
            return std::cmp::Ordering::Equal;
        }
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for CallTier {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for CallTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallTier({})", self.name())
    }
}

impl std::fmt::Display for CallTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for CallTier {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for CallTier {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        CallTier::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("{name:?} is not a tier name")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_order_keeps_the_two_tier_order_and_puts_tiers_between() {
        let mid = CallTier::parse("mid").unwrap();
        let verify_mid = CallTier::verifier_of(1, mid);
        let mut tiers = [
            verify_mid,
            CallTier::VERIFIER,
            CallTier::LARGE,
            mid,
            CallTier::SMALL,
        ];
        tiers.sort();
        let names: Vec<&str> = tiers.iter().map(|tier| tier.name()).collect();
        assert_eq!(names, ["small", "mid", "large", "verifier", "verifier_mid"]);
        assert!(verify_mid.is_verifier() && !mid.is_verifier());
        assert_eq!(CallTier::parse("mid"), Some(mid));
        assert_eq!(CallTier::from_id(mid.id()), mid);
        assert_eq!(CallTier::parse("no spaces"), None);
    }
}
