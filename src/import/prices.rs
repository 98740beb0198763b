//! What each imported call cost: flat per-call prices from flags, or per
//! model from a price file.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub enum Prices {
    /// USD per call of each tier.
    Flat { small: f64, large: f64 },
    /// USD per call by model name.
    PerModel(BTreeMap<String, f64>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    models: BTreeMap<String, ModelPrice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelPrice {
    per_call: f64,
}

impl Prices {
    /// A price file: `[models."name"] per_call = 0.01`.
    pub fn load(path: &Path) -> anyhow::Result<Prices> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read (--prices)", path.display()))?;
        let file: PriceFile = toml::from_str(&text).map_err(|error| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                crate::toml_message::one_line(&error.to_string())
            )
        })?;
        let mut prices = BTreeMap::new();
        for (model, price) in file.models {
            if !(price.per_call.is_finite() && price.per_call >= 0.0) {
                bail!(
                    "{}: models.\"{model}\".per_call must be a non-negative number of USD",
                    path.display()
                );
            }
            prices.insert(model, price.per_call);
        }
        Ok(Prices::PerModel(prices))
    }

    /// The price of one call of `model` on the small or the large tier.
    pub fn per_call(&self, model: &str, large: bool) -> anyhow::Result<f64> {
        match self {
            Prices::Flat {
                small,
                large: large_price,
            } => Ok(if large { *large_price } else { *small }),
            Prices::PerModel(prices) => prices
                .get(model)
                .copied()
                .with_context(|| format!("--prices: no price for model \"{model}\"")),
        }
    }
}
