//! `routeval gate`: scores every candidate route table on the same graded
//! results, rejects those that break a rule (constraints first, so cost never
//! outranks a rule), picks the cheapest that passes, and emits the deployable
//! route config: canonical JSON, versioned, signed with minisign, with a
//! LiteLLM export. `routeval keygen` and `routeval verify` manage and check
//! the signatures.

mod config;
mod engine;
mod evaluate;
mod keys;
mod litellm;
mod render;
mod report;
mod rules;
mod verify;

pub use config::{Provenance, ROUTE_CONFIG_SCHEMA, RouteConfig, signature_path};
pub use engine::{GateOptions, gate};
pub use evaluate::{Evaluation, TieredRows, evaluate, recorded_models, scores_of, tiered_rows};
pub use keys::{
    SignatureError, generate as generate_keys, load_public, load_secret, public_key_path, sign,
    verify as verify_signature,
};
pub use litellm::litellm_yaml;
pub use render::{comparison_rows, markdown, terminal};
pub use report::{
    BaselineRef, CandidateReport, Emitted, GATE_MARKDOWN_OUTPUT, GATE_REPORT_OUTPUT,
    GATE_REPORT_SCHEMA_VERSION, GateReport, SliceRegression,
};
pub use rules::{Failure, Rule, regressions};
pub use verify::{Verified, VerifyError, check as check_config, verify_config};
