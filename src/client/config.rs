//! How to call one OpenAI-compatible endpoint (its URL, pinned model, key,
//! prices, limits and deadlines) and the generation parameters of a call:
//! the `[tiers.NAME]`, `[verifier]` and `[run]` sections of `routeval.toml`.

use std::time::Duration;

use serde::Deserialize;

/// One OpenAI-compatible endpoint and how to treat it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    pub base_url: String,
    /// A pinned model version; floating aliases are refused.
    pub model: String,
    /// The environment variable holding the API key; none sends no key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Dollars per million tokens.
    pub price_input_per_mtok: f64,
    #[serde(default)]
    pub price_cached_input_per_mtok: Option<f64>,
    pub price_output_per_mtok: f64,
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// Requests per minute; none is unlimited.
    #[serde(default)]
    pub rpm: Option<u32>,
    /// Tokens per minute (input plus `max_tokens`); none is unlimited.
    #[serde(default)]
    pub tpm: Option<u64>,
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// First delay of the exponential backoff, before jitter.
    #[serde(default = "default_backoff_ms")]
    pub backoff_base_ms: u64,
    #[serde(default = "default_first_token_s")]
    pub first_token_s: f64,
    #[serde(default = "default_stall_s")]
    pub stall_s: f64,
    #[serde(default = "default_total_s")]
    pub total_s: f64,
    /// Verifier only: the prompt template in `<rubrics>/prompts/NAME.toml`.
    #[serde(default)]
    pub template: Option<String>,
    /// Ask for token log-probabilities (verifier only; not every server has them).
    #[serde(default)]
    pub logprobs: bool,
}

fn default_concurrency() -> usize {
    32
}

fn default_max_retries() -> u32 {
    4
}

fn default_backoff_ms() -> u64 {
    500
}

fn default_first_token_s() -> f64 {
    60.0
}

fn default_stall_s() -> f64 {
    30.0
}

fn default_total_s() -> f64 {
    300.0
}

impl EndpointConfig {
    pub fn first_token(&self) -> Duration {
        Duration::from_secs_f64(self.first_token_s)
    }
    pub fn stall(&self) -> Duration {
        Duration::from_secs_f64(self.stall_s)
    }
    pub fn total(&self) -> Duration {
        Duration::from_secs_f64(self.total_s)
    }

    /// Dollars for a call's tokens.
    pub fn cost(&self, input: u64, cached_input: u64, output: u64) -> f64 {
        TokenPrices {
            input_per_mtok: self.price_input_per_mtok,
            cached_input_per_mtok: self.price_cached_input_per_mtok,
            output_per_mtok: self.price_output_per_mtok,
        }
        .cost(input, cached_input, output)
    }
}

/// An endpoint's prices per million tokens: what `run` and `serve` charge a
/// call, the same way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenPrices {
    pub input_per_mtok: f64,
    /// Cached input tokens; the input price where the endpoint has none.
    pub cached_input_per_mtok: Option<f64>,
    pub output_per_mtok: f64,
}

impl TokenPrices {
    /// Dollars for a call's tokens.
    pub fn cost(&self, input: u64, cached_input: u64, output: u64) -> f64 {
        let cached = cached_input.min(input);
        let cached_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        ((input - cached) as f64 * self.input_per_mtok
            + cached as f64 * cached_price
            + output as f64 * self.output_per_mtok)
            / 1e6
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationConfig {
    #[serde(default)]
    pub temperature: f32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub seed: i64,
    /// Samples of each prompt per tier (self-consistency wants several).
    #[serde(default = "default_samples")]
    pub samples: u32,
    /// Retries allowed as a share of first attempts, per tier.
    #[serde(default = "default_retry_budget")]
    pub retry_budget: f64,
    /// The `[tiers.NAME]` sections, cheapest first; may be left out when
    /// they are `small` and `large`.
    #[serde(default)]
    pub tiers: Option<Vec<String>>,
}

fn default_max_tokens() -> u32 {
    512
}

fn default_samples() -> u32 {
    1
}

fn default_retry_budget() -> f64 {
    0.1
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            temperature: 0.0,
            max_tokens: default_max_tokens(),
            seed: 0,
            samples: default_samples(),
            retry_budget: default_retry_budget(),
            tiers: None,
        }
    }
}
