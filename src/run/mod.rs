//! `routeval run`: labelled prompts to every tier (small and large, and
//! any tiers between) and each non-final tier's answer to the verifier over OpenAI-compatible APIs, with rate limits, retries,
//! deadlines, a cache and resume; and `routeval merge` of shard outputs.
//! The output is the responses table (`responses.parquet`) and
//! `manifest.json` under `--out`.

mod config;
mod engine;
mod journal;
mod merge;
mod progress;
mod store;

pub use config::{RunConfig, TierEndpoint};
pub use engine::{
    Endpoints, Prepared, RunSettings, RunSummary, Shard, TierSummary, execute, prepare,
};
pub use merge::merge_runs;
pub use store::merge_sorted;
