//! What a serve is started with and keeps for its life: the settings its
//! flags give, apart from the state that changes while it runs.

use std::time::Duration;

/// What this serve was started with, fixed for its life.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--trust-slice-header`: a request's claimed slice counts.
    pub trust_slice_header: bool,
    /// `--strict-expiry`: nothing is served past the config's expiry.
    pub strict_expiry: bool,
    /// `--max-body-bytes`.
    pub max_body_bytes: usize,
    /// `--body-timeout-ms`: a body not read whole within this of its
    /// request's arrival is refused with 408.
    pub body_timeout: Duration,
    /// `--records-fail closed`: no request is answered while the records
    /// cannot be written.
    pub records_fail_closed: bool,
    pub timeouts: Timeouts,
    /// What a record keeps of the conversation.
    pub records_prompts: RecordsPrompts,
    /// Distinguishes this process's request ids from another's.
    pub started_ms: i64,
    /// `--cors-origin`.
    pub cors_origins: super::origins::CorsOrigins,
    /// `--admin-listen`: `/metrics` is served there, not on the traffic
    /// port.
    pub metrics_apart: bool,
}

/// What a request's record keeps of its conversation (`--records-prompts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordsPrompts {
    /// The last user message and every message, as sent.
    Full,
    /// The same, with keys, tokens and assigned passwords replaced by
    /// `[redacted]` (the rules `sample` applies).
    Redacted,
    /// Neither: `prompt` and `messages` are null.
    None,
}

/// The three timers of a call: to its first byte, between bytes, and to
/// its end (from the request's arrival), from `--first-token-timeout-ms`,
/// `--stall-timeout-ms` and `--total-timeout-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub first_token: Duration,
    pub stall: Duration,
    pub total: Duration,
}

/// As far off as a deadline goes: one past what an instant holds is never
/// reached anyway.
const FAR_OFF: Duration = Duration::from_secs(365 * 24 * 3600);

/// `by` after `at`. A timeout a flag or a signed config sets so far off
/// that the instant would overflow is a deadline a year away, not a panic
/// in the request path.
pub fn after(at: tokio::time::Instant, by: Duration) -> tokio::time::Instant {
    at.checked_add(by)
        .or_else(|| at.checked_add(FAR_OFF))
        .unwrap_or(at)
}

/// `ms` milliseconds, as a signed config's deadline gives them; one that is
/// not a finite, non-negative number of seconds a duration holds is
/// [`FAR_OFF`].
pub fn millis(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1e3).unwrap_or(FAR_OFF)
}
