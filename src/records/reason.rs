//! Why a request went where it went: the `reason` column, one typed value
//! with one spelling. serve and every importer write it, drift, replay and
//! the importers read it, all through [`Reason`], so a new reason is a
//! compile error wherever it is not handled. A reason another gateway
//! wrote that routeval does not know is kept as it is ([`Reason::Other`]).

use std::fmt;
use std::str::FromStr;

/// Why a request was answered (or refused) the way it was.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A predictive policy chose the tier of this name (`routed-small`).
    Routed { tier: String },
    /// A single or static policy's one route (`routed`).
    RoutedOnly,
    /// The strongest tier, for a slice the table does not name.
    UnknownSlice,
    /// A cascade released its first stage's answer.
    CascadeAccepted,
    /// A cascade released a later stage's answer.
    Escalated,
    /// What the decision API says of a cascade: the gateway calls its first
    /// stage and asks again.
    CascadeStart,
    /// Refused before any call.
    Refused(Refusal),
    /// Refused by an admission bound (429).
    Admission(Bound),
    /// The upstream could not be reached.
    UpstreamUnreachable,
    /// The upstream refused serve's credentials for it (401 or 403): the
    /// client got a 502 naming the route.
    UpstreamCredentials,
    /// The upstream's answer broke before serve could pass it on.
    UpstreamCut,
    /// The cascade's verifier failed.
    VerifierFailed,
    /// No first byte within the first-token deadline (504).
    FirstTokenTimeout,
    /// Moved to the route's fallback before its first token.
    Fallback(Move),
    /// The attempt a request moved from (`ID-attempt-1`).
    Abandoned(Cause),
    /// Failed before its first token, and could not move.
    NoFallback(Stay),
    /// The route's breaker sent it on and no fallback could take it (503).
    BreakerOpen,
    /// A hedged request's answer.
    HedgeWon,
    /// A hedged request's cancelled copy (`ID-hedge-1`).
    HedgeLost,
    /// A row of a labelled routeval run, imported as a record.
    LabelledRun,
    /// A reason routeval does not know, as the source wrote it.
    Other(String),
}

/// Why a request was refused before any call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    Unauthorized,
    BadRequest,
    UnknownModel,
    /// No route the request's constraints allow.
    Constrained,
    /// The config passed its expiry and serve refuses expired configs.
    Expired,
    /// `--records-fail closed` while the records cannot be written.
    RecordsFailing,
}

/// Which admission bound refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bound {
    Total,
    Route,
    Tenant,
    TenantTokens,
}

/// Why a request moved to its fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Move {
    /// The route failed.
    Error,
    /// The route gave no first token by its deadline.
    Deadline,
    /// The route's breaker was open: no call was made.
    Breaker,
}

/// How an abandoned attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    Error,
    Deadline,
}

/// Why a failed request could not move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stay {
    /// Every fallback was at its limits, or its own breaker was open.
    Capacity,
    /// The retry budget was spent.
    Budget,
}

impl Reason {
    /// Whether the request moved to a fallback before its first token.
    pub fn is_fallback(&self) -> bool {
        matches!(self, Reason::Fallback(_))
    }

    /// Whether the record is of an attempt the request abandoned.
    pub fn is_abandoned(&self) -> bool {
        matches!(self, Reason::Abandoned(_))
    }

    /// Whether the record is of a call beside its request's own: an
    /// attempt it abandoned, or a hedge's losing copy. Told by the reason,
    /// which only the gateway sets, never by the id, which a client may
    /// choose (`x-request-id: abc-attempt-1`).
    pub fn is_beside_a_request(&self) -> bool {
        matches!(self, Reason::Abandoned(_) | Reason::HedgeLost)
    }

    /// Whether the policy escalated the request, where the reason says:
    /// a two-tier predictive policy's tier, or a cascade's release.
    pub fn escalation(&self) -> Option<bool> {
        match self {
            Reason::Routed { tier } => match tier.as_str() {
                "small" => Some(false),
                "large" => Some(true),
                _ => None,
            },
            Reason::CascadeAccepted => Some(false),
            Reason::Escalated => Some(true),
            Reason::RoutedOnly
            | Reason::UnknownSlice
            | Reason::CascadeStart
            | Reason::Refused(_)
            | Reason::Admission(_)
            | Reason::UpstreamUnreachable
            | Reason::UpstreamCredentials
            | Reason::UpstreamCut
            | Reason::VerifierFailed
            | Reason::FirstTokenTimeout
            | Reason::Fallback(_)
            | Reason::Abandoned(_)
            | Reason::NoFallback(_)
            | Reason::BreakerOpen
            | Reason::HedgeWon
            | Reason::HedgeLost
            | Reason::LabelledRun
            | Reason::Other(_) => None,
        }
    }

    /// The spelling of a reason without a name in it.
    fn word(&self) -> Option<&'static str> {
        Some(match self {
            Reason::Routed { .. } | Reason::Other(_) => return None,
            Reason::RoutedOnly => "routed",
            Reason::UnknownSlice => "unknown-slice",
            Reason::CascadeAccepted => "cascade-accepted",
            Reason::Escalated => "escalated",
            Reason::CascadeStart => "cascade-start",
            Reason::Refused(Refusal::Unauthorized) => "unauthorized",
            Reason::Refused(Refusal::BadRequest) => "bad-request",
            Reason::Refused(Refusal::UnknownModel) => "unknown-model",
            Reason::Refused(Refusal::Constrained) => "constrained",
            Reason::Refused(Refusal::Expired) => "expired",
            Reason::Refused(Refusal::RecordsFailing) => "records-failing",
            Reason::Admission(Bound::Total) => "admission:total",
            Reason::Admission(Bound::Route) => "admission:route",
            Reason::Admission(Bound::Tenant) => "admission:tenant",
            Reason::Admission(Bound::TenantTokens) => "admission:tenant-tpm",
            Reason::UpstreamUnreachable => "upstream-unreachable",
            Reason::UpstreamCredentials => "upstream-credentials",
            Reason::UpstreamCut => "upstream-cut",
            Reason::VerifierFailed => "verifier-failed",
            Reason::FirstTokenTimeout => "timeout:first-token",
            Reason::Fallback(Move::Error) => "fallback:error",
            Reason::Fallback(Move::Deadline) => "fallback:deadline",
            Reason::Fallback(Move::Breaker) => "fallback:breaker",
            Reason::Abandoned(Cause::Error) => "abandoned:error",
            Reason::Abandoned(Cause::Deadline) => "abandoned:deadline",
            Reason::NoFallback(Stay::Capacity) => "no-fallback:capacity",
            Reason::NoFallback(Stay::Budget) => "no-fallback:budget",
            Reason::BreakerOpen => "breaker-open",
            Reason::HedgeWon => "hedge-won",
            Reason::HedgeLost => "hedge-lost",
            Reason::LabelledRun => "labelled-run",
        })
    }

    /// Every reason without a name in it, for the reader and the tests.
    pub const WORDS: [Reason; 31] = [
        Reason::RoutedOnly,
        Reason::UnknownSlice,
        Reason::CascadeAccepted,
        Reason::Escalated,
        Reason::CascadeStart,
        Reason::Refused(Refusal::Unauthorized),
        Reason::Refused(Refusal::BadRequest),
        Reason::Refused(Refusal::UnknownModel),
        Reason::Refused(Refusal::Constrained),
        Reason::Refused(Refusal::Expired),
        Reason::Refused(Refusal::RecordsFailing),
        Reason::Admission(Bound::Total),
        Reason::Admission(Bound::Route),
        Reason::Admission(Bound::Tenant),
        Reason::Admission(Bound::TenantTokens),
        Reason::UpstreamUnreachable,
        Reason::UpstreamCredentials,
        Reason::UpstreamCut,
        Reason::VerifierFailed,
        Reason::FirstTokenTimeout,
        Reason::Fallback(Move::Error),
        Reason::Fallback(Move::Deadline),
        Reason::Fallback(Move::Breaker),
        Reason::Abandoned(Cause::Error),
        Reason::Abandoned(Cause::Deadline),
        Reason::NoFallback(Stay::Capacity),
        Reason::NoFallback(Stay::Budget),
        Reason::BreakerOpen,
        Reason::HedgeWon,
        Reason::HedgeLost,
        Reason::LabelledRun,
    ];
}

const ROUTED_PREFIX: &str = "routed-";

impl fmt::Display for Reason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Routed { tier } => write!(formatter, "{ROUTED_PREFIX}{tier}"),
            Reason::Other(text) => formatter.write_str(text),
            known => formatter.write_str(known.word().unwrap_or_default()),
        }
    }
}

impl FromStr for Reason {
    type Err = std::convert::Infallible;

    /// Any text reads: a reason routeval does not write is [`Reason::Other`].
    fn from_str(text: &str) -> Result<Reason, Self::Err> {
        if let Some(known) = Reason::WORDS
            .iter()
            .find(|known| known.word() == Some(text))
        {
            return Ok(known.clone());
        }
        Ok(match text.strip_prefix(ROUTED_PREFIX) {
            Some(tier) if !tier.is_empty() => Reason::Routed {
                tier: tier.to_owned(),
            },
            _ => Reason::Other(text.to_owned()),
        })
    }
}

impl From<&str> for Reason {
    fn from(text: &str) -> Reason {
        let Ok(reason) = text.parse();
        reason
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_as_it_was_written() {
        let named = [
            Reason::Routed {
                tier: "mid".to_owned(),
            },
            Reason::Other("cooldown".to_owned()),
        ];
        for reason in Reason::WORDS.iter().chain(&named) {
            let written = reason.to_string();
            assert_eq!(Reason::from(written.as_str()), *reason, "{written}");
        }
        let spellings: std::collections::BTreeSet<String> =
            Reason::WORDS.iter().map(Reason::to_string).collect();
        assert_eq!(spellings.len(), Reason::WORDS.len(), "one spelling each");
    }

    #[test]
    fn unknown_text_is_kept_as_it_was() {
        assert_eq!(Reason::from("routed-"), Reason::Other("routed-".to_owned()));
        assert_eq!(
            Reason::from("Fallback:Error"),
            Reason::Other("Fallback:Error".to_owned())
        );
        assert!(Reason::from("fallback:breaker").is_fallback());
        assert_eq!(Reason::from("routed-large").escalation(), Some(true));
        assert_eq!(Reason::from("routed-mid").escalation(), None);
    }
}
