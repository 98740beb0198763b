//! `routeval gate`: scores every candidate route table on the same graded
//! results, rejects those that break a rule (constraints first, so cost never
//! outranks a rule), picks the cheapest that passes, and emits the deployable
//! route config: canonical JSON, versioned, signed with minisign, with a
//! LiteLLM export. The config and its signatures are the contract of
//! [`crate::routes`].

mod deployed_scores;
mod engine;
mod exploration;
mod inputs;
mod litellm;
mod options;
mod outputs;
mod production;
mod render;
mod rollback;
mod rules;
mod scoring;

pub use engine::gate;
pub use litellm::{LitellmExport, ServeEndpoint, litellm_yaml};
pub use options::{GateOptions, MAX_TTL_DAYS};
pub use render::{markdown, terminal};
pub use rollback::{PRESIGNED_ROLLBACK_DIR, RollbackOptions, presign_rollback, rollback};
