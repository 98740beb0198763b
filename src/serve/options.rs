//! What `routeval serve` is asked to do: the typed options its flags
//! become.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::policy::BudgetSettings;

use super::admission::Limits;
use super::connections::ConnectionLimits;
use super::deployed::{Sources, StartExpired};
use super::journal::{Durability, Roll};
use super::log::LogSettings;
use super::origins::CorsOrigins;
use super::settings::{RecordsPrompts, Timeouts};
use super::trace::TraceSettings;

/// The largest request body serve reads, unless `--max-body-bytes` says.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub sources: Sources,
    pub public_key: String,
    pub keys: PathBuf,
    pub listen: SocketAddr,
    pub records: PathBuf,
    pub trust_slice_header: bool,
    pub strict_expiry: bool,
    pub max_body_bytes: usize,
    /// How long a request's body may take to arrive whole.
    pub body_timeout: std::time::Duration,
    /// When a journal rolls into its Parquet part.
    pub roll: Roll,
    /// Refuse requests (503) while the records cannot be written.
    pub records_fail_closed: bool,
    /// What an answer's end waits for of its record.
    pub records_durability: Durability,
    /// Whether a start takes a config that has expired, as a running serve
    /// keeps serving one (answering unless `strict_expiry`).
    pub start_expired: StartExpired,
    /// Requests in flight at once, in total and per route.
    pub limits: Limits,
    /// Client connections open at once, and how long one may say nothing.
    pub connections: ConnectionLimits,
    pub timeouts: Timeouts,
    /// The share of extra calls falling back may make.
    pub budget: BudgetSettings,
    /// A candidate config decided for every request, never served.
    pub shadow: Option<PathBuf>,
    /// What a record keeps of the conversation.
    pub records_prompts: RecordsPrompts,
    /// How serve logs, and whether each request gets a line.
    pub log: LogSettings,
    /// Where traces are exported (OTLP/HTTP), if anywhere.
    pub tracing: Option<TraceSettings>,
    /// Where `/metrics` and the probes are also served, and `/metrics`
    /// only: off the traffic port.
    pub admin_listen: Option<SocketAddr>,
    /// The browser origins whose scripts may call serve.
    pub cors_origins: CorsOrigins,
}
