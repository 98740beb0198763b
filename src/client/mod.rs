//! The endpoint client that `run`, grade's judge and serve share: one
//! OpenAI-compatible endpoint called with its deadlines (first token, stall,
//! total), retries with backoff inside a retry budget, an adaptive
//! concurrency limit and a token bucket, and the response cache; and the
//! run config (`routeval.toml`) that names the endpoints, which `run` calls
//! and grade's judge reads.

mod cache;
mod caller;
mod config;
mod endpoint;
mod http_url;
mod limits;
mod run_config;

pub use cache::{Cache, CachedCall, cache_key};
pub use caller::{
    CallOutcome, Caller, estimate_tokens, estimated_tokens_of_chars, input_tokens_estimate,
};
pub use config::{EndpointConfig, GenerationConfig, TokenPrices};
pub use endpoint::{
    AttemptError, CallRequest, ChatEndpoint, Completion, OpenAiEndpoint, Usage, http_client,
    preflight, proxy_client, redact, redact_url,
};
pub use http_url::parse_http_url;
pub use limits::{AdaptiveLimit, RetryBudget, Slot, TokenBucket, backoff};
pub use run_config::{ConfigError, RunConfig, TierEndpoint, api_key, point_run_config_at};
