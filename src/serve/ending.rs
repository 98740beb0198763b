//! How an answer's passing on ended: the one list that the stream's
//! reader, its passing on and the request's turn share.

/// What the client is told of a stream its route closed before `[DONE]`
/// and before any `finish_reason`.
pub(super) fn ended_early(route: &str) -> String {
    format!(
        "route {route:?} closed its stream before [DONE] and before any finish_reason: the answer was cut"
    )
}

/// How an answer's passing on ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Ending {
    /// Every byte went to the client.
    Finished,
    /// The client went away first (the default until the end is seen).
    #[default]
    ClientLeft,
    UpstreamCut,
    /// The upstream's stream was not one a client can read.
    Malformed,
    /// The route sent an error event: generation failed.
    UpstreamError,
    /// No byte within `--stall-timeout-ms` after the first.
    Stalled,
    /// The answer ran past `--total-timeout-ms`.
    PastTotal,
    /// An answer longer than serve assembles for a client that did not
    /// stream; recorded as a cut.
    TooLong,
    /// The client stopped reading, and its answer could not be handed on
    /// by `--total-timeout-ms`.
    ClientStalled,
}
