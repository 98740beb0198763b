//! Why a route gave no first byte, as the breaker, the record and the
//! fallback read it, and an upstream's status as `/metrics` counts it.

use axum::http::StatusCode;

use crate::policy::CallOutcome;
use crate::records::{Move, Reason, Status};

use super::forward::Called;

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
