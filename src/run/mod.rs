//! `routeval run`: labelled prompts to every tier (small and large, and
//! any tiers between) and each non-final tier's answer to the verifier over OpenAI-compatible APIs, with rate limits, retries,
//! deadlines, a cache and resume; and `routeval merge` of shard outputs.
//! The output is the responses table (`responses.parquet`) and
//! `manifest.json` under `--out`.

mod connect;
mod engine;
mod journal;
mod merge;
mod prepare;
mod progress;
mod session;
mod settings;
mod store;
mod summary;
mod writer;

pub use connect::Connection;
pub use engine::{Endpoints, execute};
pub use merge::merge_runs;
pub use prepare::{Prepared, prepare};
pub use session::{message, run_to_end};
pub use settings::{RunSettings, Shard};
pub use store::merge_sorted;
pub use summary::{RunSummary, TierSummary};
