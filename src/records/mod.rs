//! The gateway's request records: one row per request it served (route,
//! reason, score, status, tokens, latencies, cost), read from Parquet, CSV
//! or JSON lines, and the importers that turn what teams already log
//! (LiteLLM's spend logs, OpenAI-style request/response lines, any table by
//! `--map`, a routeval run) into it. `replay fallback`, `replay hedge`,
//! `drift --records` and `sample` read it.

mod columns;
mod fields;
mod from_litellm;
mod from_litellm_standard;
mod from_logs;
mod log_fields;
mod normalise;
mod read;
mod reason;
mod record;
mod redact;
mod rows;
mod schema;
mod write;

pub use columns::{RecordChunk, RecordColumns, Texts, fold_record_chunks};
pub use fields::{FieldNames, parse_timestamp};
pub use from_litellm::Deployments;
pub use from_logs::{
    ImportFormat, Imported, LogImportOptions, UniqueIds, import_into, import_records,
};
pub use log_fields::last_user_message;
pub use normalise::{Normalised, normalise};
pub use read::{MAX_TOKENS, fold_records, for_each_record, record_parts};
pub use reason::{Bound, Cause, Move, Reason, Refusal, Stay};
pub use record::Record;
pub use redact::redact;
pub use schema::{
    ATTEMPT_ID_SUFFIX, Draw, HEDGE_ID_SUFFIX, RECORD_COLUMNS, RECORDS_OUTPUT, RECORDS_SCHEMA,
    RECORDS_SCHEMA_VERSION, RecordColumn, RecordKind, SCHEMA_VERSION_KEY, Status, TokenSource,
};
pub use write::RecordsWriter;
