//! `routeval serve`: an OpenAI-compatible endpoint that serves a signed
//! route config exactly as it was gated. docs/serve.md says each behaviour
//! exactly; docs/architecture.md draws the request path.
//!
//! - Starting, stopping and reloading: [`start`] (the config and every
//!   artifact it pins verified before it listens), [`stop`], [`reload`]
//!   (SIGHUP or a changed file: the new config must verify and follow the
//!   running one, or the running one keeps serving).
//! - What it runs with: [`options`] (the flags, typed), [`settings`]
//!   (fixed for its life) and [`app`] (the live state every request
//!   shares).
//! - The request path: [`stack`] builds it top-down, one file per layer;
//!   [`http`] holds the handlers at its bottom, which only decide and
//!   proxy; [`decision`] is what the policy kernel decides for a request,
//!   [`turn`] a decided request's turn at its routes, [`forward`] the call
//!   and the bytes passed back.
//! - What a request leaves: the [`witness`], the one consumer of its
//!   events (its record, the metrics, its spans, the breakers, the log),
//!   the [`journal`] its record is written to, and the [`served`] ledger
//!   that sees it written exactly once.

#![deny(clippy::arithmetic_side_effects)]
mod admission;
mod answer;
mod app;
mod assemble;
mod cascade;
mod connections;
mod decision;
mod deployed;
mod draws;
mod ending;
mod failure;
mod forward;
mod http;
mod journal;
mod keys;
mod log;
mod members;
mod metrics;
mod notify;
mod options;
mod origins;
mod passing;
mod pending;
mod provider_keys;
mod reload;
mod reply;
mod resilience;
mod retention;
mod served;
mod settings;
mod sse;
mod stack;
mod start;
mod stop;
mod trace;
mod turn;
mod upstream_error;
mod witness;

pub use crate::policy::BudgetSettings;
pub use admission::Limits;
pub use connections::{ConnectionLimits, default_max_connections};
pub use decision::ROUTE_DECISION_SCHEMA_VERSION;
pub use deployed::{Deployed, LoadError, Sources, StartExpired, load};
pub use journal::{Durability, LOCK as RECORDS_LOCK, MAX_UNCOMMITTED, Roll};
pub use keys::{Identity, Keys};
pub use log::{LOG_SCHEMA_VERSION, Level as LogLevel, LogFormat, LogSettings};
pub use metrics::MAX_SLICE_LABELS;
pub use options::{DEFAULT_MAX_BODY_BYTES, ServeOptions};
pub use origins::CorsOrigins;
pub use served::ServedRecord;
pub use settings::{RecordsPrompts, Timeouts};
pub use stack::{Access, Endpoint};
pub use start::{Checked, check, serve};
pub use trace::{Root as TraceRoot, TraceSampling, TraceSettings};
