//! Why a route gave no first byte, as the breaker, the record and the
//! fallback read it, and an upstream's status as `/metrics` counts it.

use axum::http::StatusCode;

use crate::policy::CallOutcome;
use crate::records::{Cause, Move, Reason, Status};

use super::forward::Called;
use super::witness::{Billed, FailureFacts};

/// Why an attempt gave no first byte.
pub(super) enum Failure {
    /// No first byte by the deadline: the route's breaker deadline
    /// (`by_breaker`) or `--first-token-timeout-ms`.
    Deadline {
        by_breaker: bool,
    },
    Unreachable(String),
    /// An error status; its body is passed on if nothing else answers.
    Status(Box<Called>),
}

impl Failure {
    /// The call's outcome, as the route's breaker counts it.
    pub(super) fn outcome(&self) -> CallOutcome {
        match self {
            Failure::Deadline { .. } => CallOutcome::Deadline,
            Failure::Status(called) if called.status == StatusCode::TOO_MANY_REQUESTS => {
                CallOutcome::RateLimited
            }
            Failure::Unreachable(_) | Failure::Status(_) => CallOutcome::Error,
        }
    }

    pub(super) fn status(&self) -> Status {
        match self {
            Failure::Deadline { .. } => Status::Timeout,
            Failure::Unreachable(_) => Status::Error,
            Failure::Status(called) => Status::from_http(called.status.as_u16()),
        }
    }

    /// What the record, the log and the breaker say of it; `deadline_ms`
    /// is the deadline a late first byte missed, and `prompt` what the
    /// route bills for the prompt it may have read then.
    pub(super) fn facts(&self, deadline_ms: f64, prompt: Billed) -> FailureFacts {
        let (kind, what) = match self {
            Failure::Deadline { by_breaker } => (
                "deadline",
                format!(
                    "gave no first token within {} ({deadline_ms} ms)",
                    if *by_breaker {
                        "its breaker's first_token_deadline_ms"
                    } else {
                        "--first-token-timeout-ms"
                    },
                ),
            ),
            Failure::Unreachable(problem) => ("unreachable", format!("did not answer: {problem}")),
            Failure::Status(called) => ("status", format!("answered {}", called.status)),
        };
        FailureFacts {
            kind,
            what,
            status: self.status(),
            upstream_status: match self {
                Failure::Status(called) => Some(called.status.as_u16()),
                _ => None,
            },
            cause: match self {
                Failure::Deadline { .. } => Cause::Deadline,
                _ => Cause::Error,
            },
            moved_reason: self.moved_reason(),
            billed: matches!(self, Failure::Deadline { .. }).then_some(prompt),
        }
    }

    /// The reason of a request moved by this failure.
    pub(super) fn moved_reason(&self) -> Reason {
        Reason::Fallback(match self {
            Failure::Deadline { .. } => Move::Deadline,
            _ => Move::Error,
        })
    }
}

/// An upstream's status as `routeval_upstream_responses_total` counts it.
pub(super) fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        429 => "429",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
