//! `routeval run`: labelled prompts to every tier (small and large, and
//! any tiers between) and each non-final tier's answer to the verifier over OpenAI-compatible APIs, with rate limits, retries,
//! deadlines, a cache and resume; and `routeval merge` of shard outputs.
//! The output is the responses table (`responses.parquet`) and
//! `manifest.json` under `--out`.

mod cache;
mod caller;
mod config;
mod endpoint;
mod engine;
mod journal;
mod limits;
mod merge;
mod progress;
mod store;

pub use cache::{Cache, CachedCall, cache_key};
pub use caller::{CallOutcome, Caller};
pub use config::{EndpointConfig, GenerationConfig, PromptTemplate, RunConfig, TierEndpoint};
pub use endpoint::{
    AttemptError, CallRequest, ChatEndpoint, Completion, OpenAiEndpoint, Usage, http_client,
    preflight, redact,
};
pub use engine::{
    Endpoints, Prepared, RunSettings, RunSummary, Shard, TierSummary, execute, prepare,
};
pub use merge::merge_runs;
pub use store::merge_sorted;
