//! The request-record table: one row per request a gateway served, the
//! columns defined once here (docs/schema.md, "Request records").

use std::sync::{Arc, LazyLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// Version of the request-record table, in the Parquet metadata under
/// [`SCHEMA_VERSION_KEY`].
pub const RECORDS_SCHEMA_VERSION: u32 = 1;
pub const SCHEMA_VERSION_KEY: &str = "routeval.records.schema_version";

/// What `records import --out` writes.
pub const RECORDS_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a request-record table",
    crate::atomic::Replaces::Table(SCHEMA_VERSION_KEY),
);

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Text,
    /// Milliseconds since 1970.
    Millis,
    Count,
    Real,
}

impl RecordKind {
    pub fn data_type(self) -> DataType {
        match self {
            RecordKind::Text => DataType::Utf8,
            RecordKind::Millis => DataType::Int64,
            RecordKind::Count => DataType::UInt64,
            RecordKind::Real => DataType::Float64,
        }
    }
}

/// A column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordColumn {
    pub name: &'static str,
    pub kind: RecordKind,
    pub required: bool,
    pub meaning: &'static str,
}

const fn column(
    name: &'static str,
    kind: RecordKind,
    required: bool,
    meaning: &'static str,
) -> RecordColumn {
    RecordColumn {
        name,
        kind,
        required,
        meaning,
    }
}

const TEXT: RecordKind = RecordKind::Text;
const MILLIS: RecordKind = RecordKind::Millis;
const COUNT: RecordKind = RecordKind::Count;
const REAL: RecordKind = RecordKind::Real;

/// The id suffix of the record of a route's abandoned attempt (serve's,
/// when a request moved to a fallback before its first token): the
/// request's own record is under the id without it.
pub const ATTEMPT_ID_SUFFIX: &str = "-attempt-1";

/// The id suffix of the record of a hedged request's losing copy.
pub const HEDGE_ID_SUFFIX: &str = "-hedge-1";

/// Every column, in the order routeval writes them.
pub const RECORD_COLUMNS: [RecordColumn; 29] = [
    column(
        "id",
        TEXT,
        true,
        "the request's id, unique in the file; serve records a route's abandoned attempt of request `ID` as `ID-attempt-1`, and a hedge's losing copy as `ID-hedge-1`",
    ),
    column(
        "timestamp",
        MILLIS,
        true,
        "when the request arrived: milliseconds since 1970 (written), or RFC 3339 text or epoch milliseconds (read)",
    ),
    column(
        "slice",
        TEXT,
        true,
        "the tenant or task the request belongs to",
    ),
    column(
        "logical_model",
        TEXT,
        false,
        "the name the application asked for (`support-fast`)",
    ),
    column(
        "route",
        TEXT,
        true,
        "the route that answered (or last tried)",
    ),
    column(
        "model",
        TEXT,
        false,
        "the model version the provider reported",
    ),
    column(
        "reason",
        TEXT,
        false,
        "why this route: `routed-small`, `routed-large`, `cascade-accepted`, `escalated`, `fallback:error`, `fallback:deadline`, `fallback:breaker` (moved before its first token), `abandoned:deadline`, `abandoned:error` (the attempt it moved from), `no-fallback:capacity`, `no-fallback:budget` (failed, and could not move), `hedge-won`, `hedge-lost`, or another word",
    ),
    column(
        "score",
        REAL,
        false,
        "the router's or verifier's score, when one was computed",
    ),
    column(
        "status",
        TEXT,
        true,
        "`ok`, `error`, `rate_limited` or `timeout` (read also as an HTTP status, or LiteLLM's `success`/`failure`)",
    ),
    column("input_tokens", COUNT, false, "prompt tokens"),
    column(
        "cached_input_tokens",
        COUNT,
        false,
        "prompt tokens served from the provider's cache",
    ),
    column("output_tokens", COUNT, false, "completion tokens"),
    column("ttft_ms", REAL, false, "time to the first token, ms"),
    column("total_ms", REAL, false, "time to the end of the answer, ms"),
    column(
        "finish_reason",
        TEXT,
        false,
        "`stop`, `length`, `content_filter`, ...",
    ),
    column("cost_usd", REAL, false, "what the request cost, USD"),
    column("prompt", TEXT, false, "the last user message"),
    column(
        "messages",
        TEXT,
        false,
        "the conversation, as OpenAI chat-format JSON text",
    ),
    column(
        "config_version",
        COUNT,
        false,
        "the version of the signed route config that decided the request (`routeval serve`)",
    ),
    column(
        "config_sha256",
        TEXT,
        false,
        "the sha256 of that config's file",
    ),
    column(
        "shadow_route",
        TEXT,
        false,
        "the route the `serve --shadow` candidate would have chosen (a cascade: where it would start)",
    ),
    column(
        "shadow_reason",
        TEXT,
        false,
        "the candidate's reason, or why it would have refused the request",
    ),
    column(
        "shadow_score",
        REAL,
        false,
        "the candidate's router score, when it computed one",
    ),
    column(
        "shadow_config_version",
        COUNT,
        false,
        "the version of the shadowed candidate's signed config",
    ),
    column(
        "propensity",
        REAL,
        false,
        "the probability that the signed policy would send this request to the tier it went to, given its slice and score: 1 for a deterministic decision, below 1 under the config's `[serving.explore]` (`routeval serve`)",
    ),
    column(
        "draw",
        TEXT,
        false,
        "`policy` (the signed policy's tier) or `explore` (a tier drawn uniformly by the config's exploration)",
    ),
    column(
        "decided_route",
        TEXT,
        false,
        "the route the decision chose, before any fallback (a cascade: its first stage); `propensity` is this route's probability",
    ),
    column(
        "token_source",
        TEXT,
        false,
        "where `input_tokens` and `output_tokens` come from: `provider` (the usage the route reported) or `estimated` (it reported none, and they were counted from the text as `run` counts them); null where they are null or the source did not say",
    ),
    column(
        "tenant",
        TEXT,
        false,
        "the tenant of the client's key (`routeval serve`), whose constraints and limits applied; null for a request refused before its key was known",
    ),
];

/// Each field's position in [`RECORD_COLUMNS`], for the readers.
pub(super) mod field {
    pub const ID: usize = 0;
    pub const TIMESTAMP: usize = 1;
    pub const SLICE: usize = 2;
    pub const LOGICAL_MODEL: usize = 3;
    pub const ROUTE: usize = 4;
    pub const MODEL: usize = 5;
    pub const REASON: usize = 6;
    pub const SCORE: usize = 7;
    pub const STATUS: usize = 8;
    pub const INPUT_TOKENS: usize = 9;
    pub const CACHED_INPUT_TOKENS: usize = 10;
    pub const OUTPUT_TOKENS: usize = 11;
    pub const TTFT_MS: usize = 12;
    pub const TOTAL_MS: usize = 13;
    pub const FINISH_REASON: usize = 14;
    pub const COST_USD: usize = 15;
    pub const PROMPT: usize = 16;
    pub const MESSAGES: usize = 17;
    pub const CONFIG_VERSION: usize = 18;
    pub const CONFIG_SHA256: usize = 19;
    pub const SHADOW_ROUTE: usize = 20;
    pub const SHADOW_REASON: usize = 21;
    pub const SHADOW_SCORE: usize = 22;
    pub const SHADOW_CONFIG_VERSION: usize = 23;
    pub const PROPENSITY: usize = 24;
    pub const DRAW: usize = 25;
    pub const DECIDED_ROUTE: usize = 26;
    pub const TOKEN_SOURCE: usize = 27;
    pub const TENANT: usize = 28;
}

pub static RECORDS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(
        RECORD_COLUMNS
            .iter()
            .map(|column| Field::new(column.name, column.kind.data_type(), !column.required))
            .collect::<Vec<_>>(),
    ))
});

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Error,
    RateLimited,
    Timeout,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::RateLimited => "rate_limited",
            Status::Timeout => "timeout",
        }
    }

    /// A status as a gateway logs it: a word, LiteLLM's `success` and
    /// `failure`, or an HTTP status code.
    pub fn parse(text: &str) -> Option<Status> {
        let text = text.trim();
        if let Ok(code) = text.parse::<u16>() {
            return Some(Status::from_http(code));
        }
        match text.to_ascii_lowercase().as_str() {
            "ok" | "success" | "succeeded" => Some(Status::Ok),
            "error" | "failure" | "failed" => Some(Status::Error),
            "rate_limited" | "rate-limited" | "throttled" => Some(Status::RateLimited),
            "timeout" | "timed_out" | "deadline_exceeded" => Some(Status::Timeout),
            _ => None,
        }
    }

    pub fn from_http(code: u16) -> Status {
        match code {
            200..=299 => Status::Ok,
            429 => Status::RateLimited,
            408 | 504 => Status::Timeout,
            _ => Status::Error,
        }
    }

    /// What a breaker counts as a failure of the route.
    pub fn is_failure(self) -> bool {
        self != Status::Ok
    }
}

/// How serve chose a request's tier: by the signed policy, or by an
/// exploration draw the config signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Draw {
    Policy,
    Explore,
}

impl Draw {
    pub fn name(self) -> &'static str {
        match self {
            Draw::Policy => "policy",
            Draw::Explore => "explore",
        }
    }

    pub fn parse(text: &str) -> Option<Draw> {
        match text.trim() {
            "policy" => Some(Draw::Policy),
            "explore" => Some(Draw::Explore),
            _ => None,
        }
    }
}

/// Where a record's token counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenSource {
    /// The usage the route reported.
    Provider,
    /// Counted from the text, as `run` counts a prompt whose endpoint
    /// reported no usage.
    Estimated,
}

impl TokenSource {
    pub fn name(self) -> &'static str {
        match self {
            TokenSource::Provider => "provider",
            TokenSource::Estimated => "estimated",
        }
    }

    pub fn parse(text: &str) -> Option<TokenSource> {
        match text.trim() {
            "provider" => Some(TokenSource::Provider),
            "estimated" => Some(TokenSource::Estimated),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_positions_name_their_columns() {
        let positions = [
            (field::ID, "id"),
            (field::TIMESTAMP, "timestamp"),
            (field::SLICE, "slice"),
            (field::LOGICAL_MODEL, "logical_model"),
            (field::ROUTE, "route"),
            (field::MODEL, "model"),
            (field::REASON, "reason"),
            (field::SCORE, "score"),
            (field::STATUS, "status"),
            (field::INPUT_TOKENS, "input_tokens"),
            (field::CACHED_INPUT_TOKENS, "cached_input_tokens"),
            (field::OUTPUT_TOKENS, "output_tokens"),
            (field::TTFT_MS, "ttft_ms"),
            (field::TOTAL_MS, "total_ms"),
            (field::FINISH_REASON, "finish_reason"),
            (field::COST_USD, "cost_usd"),
            (field::PROMPT, "prompt"),
            (field::MESSAGES, "messages"),
            (field::CONFIG_VERSION, "config_version"),
            (field::CONFIG_SHA256, "config_sha256"),
            (field::SHADOW_ROUTE, "shadow_route"),
            (field::SHADOW_REASON, "shadow_reason"),
            (field::SHADOW_SCORE, "shadow_score"),
            (field::SHADOW_CONFIG_VERSION, "shadow_config_version"),
            (field::PROPENSITY, "propensity"),
            (field::DRAW, "draw"),
            (field::DECIDED_ROUTE, "decided_route"),
            (field::TOKEN_SOURCE, "token_source"),
            (field::TENANT, "tenant"),
        ];
        assert_eq!(positions.len(), RECORD_COLUMNS.len());
        for (position, name) in positions {
            assert_eq!(RECORD_COLUMNS[position].name, name);
        }
    }
}
