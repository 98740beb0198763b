//! What a fallback replay reads from the request records: the primary
//! route's requests and the fallback's first tokens.

use super::replay::PrimaryRequest;
use crate::records::{Move, Reason, Status};
use crate::schema::InputError;

/// What `replay fallback --write-routes` writes: a new route table beside
/// the one it came from, never a replacement.
pub const ROUTE_TABLE_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a route table (--write-routes)",
    crate::atomic::Replaces::Nothing,
);

/// What a replay of the fallback reads from the records.
#[derive(Debug, Clone)]
pub struct FallbackInputs {
    /// The primary route's requests, by arrival.
    pub requests: Vec<PrimaryRequest>,
    /// The fallback route's (arrival, first token) pairs, by arrival.
    pub fallback_points: Vec<(f64, f64)>,
    /// Records in the file.
    pub rows: u64,
    /// Which of the fallback's records timed it.
    pub latency_source: crate::schema::FallbackLatencySource,
}

/// A record of the fallback route that a request moved to.
struct Moved {
    at: i64,
    id: String,
    ttft_ms: Option<f64>,
    by_breaker: bool,
}

/// The primary route's requests and the fallback's first tokens, from
/// the records at `path`: sorted by arrival, milliseconds from the first.
///
/// Records serve writes when a request moves are read as what they are:
/// the primary's abandoned attempt (`<id>-attempt-1`) is the primary's
/// request, and its fallback's record (`fallback:deadline`,
/// `fallback:error`) gives the fallback's own first token for it; a
/// request the open breaker moved without a try (`fallback:breaker`) is a
/// request of the primary it never saw.
pub fn load_fallback_inputs(
    path: &std::path::Path,
    route: &str,
    fallback_route: Option<&str>,
) -> Result<FallbackInputs, crate::schema::InputError> {
    use crate::records::{FieldNames, for_each_record};
    let mut primary: Vec<PrimaryRow> = Vec::new();
    let mut moved: Vec<Moved> = Vec::new();
    let mut fallback: Vec<(i64, f64)> = Vec::new();
    let mut latency_source = crate::schema::FallbackLatencySource::default();
    let rows = for_each_record(path, &FieldNames::default(), |location, record| {
        let missing_ttft = || InputError::Invalid {
            path: path.to_owned(),
            location,
            field: "ttft_ms".to_owned(),
            problem:
                "missing, and total_ms too: the replay needs each answered request's first byte"
                    .to_owned(),
        };
        // An answer with no first token recorded came whole (it did not
        // stream): its first byte is its last.
        let first_byte = if record.status == Status::Ok {
            record.ttft_ms.or(record.total_ms)
        } else {
            record.ttft_ms
        };
        if record.route == route {
            if record.status == Status::Ok && first_byte.is_none() {
                return Err(missing_ttft());
            }
            // An attempt is told by its reason, which a client cannot set;
            // an id a client chose that ends like one is a request.
            let attempt_of = record
                .reason
                .as_ref()
                .filter(|reason| reason.is_abandoned())
                .and_then(|_| record.id.strip_suffix(crate::records::ATTEMPT_ID_SUFFIX))
                .map(str::to_owned);
            primary.push((
                record.timestamp_ms,
                attempt_of,
                PrimaryRequest::tried(0.0, first_byte, record.total_ms, record.status),
            ));
        } else if fallback_route == Some(record.route.as_ref()) {
            if let Some(Reason::Fallback(why)) = &record.reason {
                if record.status == Status::Ok && first_byte.is_none() {
                    return Err(missing_ttft());
                }
                moved.push(Moved {
                    at: record.timestamp_ms,
                    id: record.id.to_string(),
                    ttft_ms: first_byte,
                    by_breaker: *why == Move::Breaker,
                });
            } else if record.status == Status::Ok {
                latency_source.direct += 1;
                fallback.push((record.timestamp_ms, first_byte.ok_or_else(missing_ttft)?));
            }
        }
        Ok(())
    })?;
    join_moved(&mut primary, moved, &mut fallback, &mut latency_source);
    refuse_untold(
        path,
        route,
        fallback_route,
        &primary,
        &fallback,
        &latency_source,
    )?;
    primary.sort_by_key(|request| request.0);
    fallback.sort_by_key(|point| point.0);
    let origin = primary[0]
        .0
        .min(fallback.first().map_or(i64::MAX, |point| point.0));
    let requests = primary
        .into_iter()
        .map(|(at, _, request)| PrimaryRequest {
            arrival_ms: (at - origin) as f64,
            ..request
        })
        .collect();
    let points = fallback
        .into_iter()
        .map(|(at, ttft)| ((at - origin) as f64, ttft))
        .collect();
    Ok(FallbackInputs {
        requests,
        fallback_points: points,
        rows,
        latency_source,
    })
}

/// A request's primary record, with what it was sent as and where.
type PrimaryRow = (i64, Option<String>, PrimaryRequest);

/// Joins each request the table moved to the fallback to the primary's
/// side: one the open breaker moved is a request of the primary it never
/// tried; one that left an attempt gives that attempt the fallback's own
/// first token (the user's wait less the attempt's).
fn join_moved(
    primary: &mut Vec<PrimaryRow>,
    moved: Vec<Moved>,
    fallback: &mut Vec<(i64, f64)>,
    latency_source: &mut crate::schema::FallbackLatencySource,
) {
    let attempts: std::collections::HashMap<String, usize> = primary
        .iter()
        .enumerate()
        .filter_map(|(index, (_, attempt_of, _))| attempt_of.clone().map(|id| (id, index)))
        .collect();
    for request in moved {
        if request.by_breaker {
            if let Some(ttft) = request.ttft_ms {
                latency_source.moved_timed += 1;
                fallback.push((request.at, ttft));
            }
            primary.push((
                request.at,
                None,
                PrimaryRequest {
                    tried: false,
                    fallback_ttft_ms: request.ttft_ms,
                    ..PrimaryRequest::tried(0.0, None, None, Status::Ok)
                },
            ));
        } else if let Some(&index) = attempts.get(&request.id) {
            let attempt = &mut primary[index].2;
            // The user's wait less the attempt's: the fallback's own.
            let own = request
                .ttft_ms
                .zip(attempt.total_ms)
                .map(|(ttft, moved_at)| ttft - moved_at);
            attempt.fallback_ttft_ms = own;
            match own {
                Some(own) => {
                    latency_source.moved_timed += 1;
                    fallback.push((request.at, own));
                }
                None => latency_source.moved_untimed += 1,
            }
        }
    }
}

/// Refuses records that cannot tell how the primary route answers, or
/// (with a fallback named) how the fallback does.
fn refuse_untold(
    path: &std::path::Path,
    route: &str,
    fallback_route: Option<&str>,
    primary: &[PrimaryRow],
    fallback: &[(i64, f64)],
    latency_source: &crate::schema::FallbackLatencySource,
) -> Result<(), InputError> {
    if primary.is_empty() {
        return Err(InputError::Unreadable {
            path: path.to_owned(),
            message: format!("no records of the route {route:?} (--route)"),
        });
    }
    // Requests only ever moved past the route say nothing of how it
    // answers: a replay would have to invent every one of its waits.
    if !primary.iter().any(|(_, _, request)| request.tried) {
        return Err(InputError::Unreadable {
            path: path.to_owned(),
            message: format!(
                "no request was sent to the route {route:?} (--route): every one of its {} was moved past it by an open breaker (fallback:breaker), so the records say nothing of how it answers",
                primary.len()
            ),
        });
    }
    if let Some(name) = fallback_route
        && fallback.is_empty()
    {
        let message = if latency_source.moved_untimed > 0 {
            format!(
                "the fallback route {name:?} (--fallback) answered only requests that fell back, and none of their abandoned attempts has a time (LiteLLM's spend rows do not time them), so its own latency is unknown; import LiteLLM's StandardLoggingPayload (records import --from litellm-standard) or give --fallback-ttft-ms"
            )
        } else {
            format!(
                "no answered records of the fallback route {name:?} (--fallback); give --fallback-ttft-ms instead"
            )
        };
        return Err(InputError::Unreadable {
            path: path.to_owned(),
            message,
        });
    }
    Ok(())
}
