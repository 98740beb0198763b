//! What a fallback replay reads from the request records: the primary
//! route's requests and the fallback's first tokens.

use super::replay::PrimaryRequest;
use crate::records::Status;
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
}

/// The primary route's requests and the fallback's first tokens, from
/// the records at `path`: sorted by arrival, milliseconds from the first.
pub fn load_fallback_inputs(
    path: &std::path::Path,
    route: &str,
    fallback_route: Option<&str>,
) -> Result<FallbackInputs, crate::schema::InputError> {
    use crate::records::{FieldNames, for_each_record};
    let mut primary: Vec<(i64, Option<f64>, Option<f64>, Status)> = Vec::new();
    let mut fallback: Vec<(i64, f64)> = Vec::new();
    let rows = for_each_record(path, &FieldNames::default(), |location, record| {
        let missing_ttft = || InputError::Invalid {
            path: path.to_owned(),
            location,
            field: "ttft_ms".to_owned(),
            problem: "missing: the replay needs each answered request's first-token time"
                .to_owned(),
        };
        if record.route == route {
            if record.status == Status::Ok && record.ttft_ms.is_none() {
                return Err(missing_ttft());
            }
            primary.push((
                record.timestamp_ms,
                record.ttft_ms,
                record.total_ms,
                record.status,
            ));
        } else if fallback_route == Some(record.route.as_ref()) && record.status == Status::Ok {
            fallback.push((
                record.timestamp_ms,
                record.ttft_ms.ok_or_else(missing_ttft)?,
            ));
        }
        Ok(())
    })?;
    if primary.is_empty() {
        return Err(InputError::Unreadable {
            path: path.to_owned(),
            message: format!("no records of the route {route:?} (--route)"),
        });
    }
    if let Some(name) = fallback_route
        && fallback.is_empty()
    {
        return Err(InputError::Unreadable {
            path: path.to_owned(),
            message: format!(
                "no answered records of the fallback route {name:?} (--fallback); give --fallback-ttft-ms instead"
            ),
        });
    }
    primary.sort_by_key(|request| request.0);
    fallback.sort_by_key(|point| point.0);
    let origin = primary[0]
        .0
        .min(fallback.first().map_or(i64::MAX, |point| point.0));
    let requests = primary
        .into_iter()
        .map(|(at, ttft_ms, total_ms, status)| PrimaryRequest {
            arrival_ms: (at - origin) as f64,
            ttft_ms,
            total_ms,
            status,
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
    })
}
