//! LiteLLM's StandardLoggingPayload as request records: what its S3, GCS
//! and generic-API loggers write, one object per call and per attempt,
//! grouped into requests; an attempt a request left is its own record
//! (`from_litellm.rs` says how LiteLLM's logs are read).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::from_litellm::{
    Deployments, abandoned_attempt, failure_status, missing_slice, of_config, refused_cooling,
    served_model,
};
use super::log_fields::{
    Problem, at, last_user_message, messages_at, number_at, required, text_at, timestamp_at,
    tokens_at,
};
use super::reason::{Move, Reason};
use super::record::Record;
use super::schema::Status;
use crate::schema::for_each_object;
use crate::schema::{InputError, RowLocation};

/// One call's or attempt's StandardLoggingPayload, as much as a record
/// needs.
#[derive(Debug)]
struct Payload {
    location: RowLocation,
    request: String,
    id: String,
    call_id: Option<String>,
    ok: bool,
    status: Status,
    /// The router refused to try (every deployment of the group cooling
    /// down): no attempt, the request moved on at once.
    cooling_down: bool,
    stream: bool,
    start_ms: f64,
    first_token_ms: Option<f64>,
    end_ms: f64,
    deployment: Option<String>,
    group: Option<String>,
    model: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cost_usd: Option<f64>,
    slice: Option<String>,
    messages: Option<Value>,
}

/// Epoch seconds (LiteLLM's floats), or any timestamp a record reads, as
/// epoch milliseconds.
fn epoch_ms(object: &serde_json::Map<String, Value>, field: &str) -> Result<Option<f64>, Problem> {
    match at(object, field).as_deref() {
        Some(Value::Number(number)) => {
            let seconds = number.as_f64().unwrap_or(f64::NAN);
            if seconds.is_finite() && seconds >= 0.0 {
                Ok(Some(seconds * 1000.0))
            } else {
                Err((field.to_owned(), format!("{number} is not epoch seconds")))
            }
        }
        _ => Ok(timestamp_at(object, field)?.map(|ms| ms as f64)),
    }
}

fn payload(
    location: RowLocation,
    object: &serde_json::Map<String, Value>,
    slice_field: &str,
) -> Result<Payload, Problem> {
    let start_ms = epoch_ms(object, "startTime")?
        .ok_or_else(|| ("startTime".to_owned(), "missing".to_owned()))?;
    let end_ms = epoch_ms(object, "endTime")?.unwrap_or(start_ms);
    let status_text = required(object, "status")?;
    let ok = match status_text.as_str() {
        "success" => true,
        "failure" => false,
        other => {
            return Err((
                "status".to_owned(),
                format!("{other:?} is not success or failure"),
            ));
        }
    };
    let status = if ok {
        Status::Ok
    } else {
        failure_status(
            text_at(object, "error_information.error_code"),
            text_at(object, "error_information.error_class"),
        )
    };
    let id = required(object, "id")?;
    let call_id = text_at(object, "litellm_call_id");
    Ok(Payload {
        location,
        // A request's payloads share its call id; a refusal to try a
        // cooling group has a trace of its own.
        request: call_id
            .clone()
            .or_else(|| text_at(object, "trace_id"))
            .unwrap_or_else(|| id.clone()),
        id,
        call_id,
        ok,
        status,
        cooling_down: refused_cooling(object, "error_information.error_class"),
        stream: matches!(at(object, "stream").as_deref(), Some(Value::Bool(true))),
        start_ms,
        first_token_ms: epoch_ms(object, "completionStartTime")?,
        end_ms,
        deployment: text_at(object, "model_id"),
        group: text_at(object, "model_group"),
        model: served_model(object),
        input_tokens: tokens_at(object, "prompt_tokens")?,
        output_tokens: tokens_at(object, "completion_tokens")?,
        cost_usd: number_at(object, "response_cost")?,
        slice: text_at(object, slice_field),
        messages: messages_at(object, "messages"),
    })
}

/// The records of a file of StandardLoggingPayloads: one per request (its
/// payloads share a `trace_id`), answered by its last successful call or
/// failed with its last, and one per attempt it abandoned before that, on
/// the routes it was sent along (the route first asked for, then its
/// fallbacks, in the config's order).
pub fn standard_records(
    path: &Path,
    slice_field: &str,
    deployments: Option<&Deployments>,
    mut push: impl FnMut(RowLocation, Record<'static>) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    let mut written = 0;
    for payloads in requests_of(path, slice_field)? {
        let (location, record, attempts) =
            request_records(path, slice_field, deployments, &payloads)?;
        push(location, record)?;
        written += 1;
        for (location, attempt) in attempts {
            push(location, attempt)?;
            written += 1;
        }
    }
    if written == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the file has no records",
        });
    }
    Ok(written)
}

/// The file's payloads, grouped by request, in the order the requests
/// first appear.
fn requests_of(path: &Path, slice_field: &str) -> Result<Vec<Vec<Payload>>, InputError> {
    let mut requests: Vec<Vec<Payload>> = Vec::new();
    let mut by_trace: HashMap<String, usize> = HashMap::new();
    for_each_object::<InputError>(path, |location, object| {
        let object = &object;
        let payload = payload(location, object, slice_field).map_err(|(field, problem)| {
            InputError::Invalid {
                path: path.to_owned(),
                location,
                field,
                problem,
            }
        })?;
        let index = *by_trace.entry(payload.request.clone()).or_insert_with(|| {
            requests.push(Vec::new());
            requests.len() - 1
        });
        requests[index].push(payload);
        Ok(())
    })?;
    Ok(requests)
}

/// A request's record with where its answering (or last) payload is, and
/// the records of the attempts it abandoned, each with its payload's place.
type RequestRecords = (
    RowLocation,
    Record<'static>,
    Vec<(RowLocation, Record<'static>)>,
);

/// The records of one request's payloads.
fn request_records(
    path: &Path,
    slice_field: &str,
    deployments: Option<&Deployments>,
    payloads: &[Payload],
) -> Result<RequestRecords, InputError> {
    let final_index = payloads
        .iter()
        .rposition(|payload| payload.ok)
        .unwrap_or(payloads.len() - 1);
    let last = &payloads[final_index];
    let invalid = |field: &str, problem: String| InputError::Invalid {
        path: path.to_owned(),
        location: last.location,
        field: field.to_owned(),
        problem,
    };
    let start = payloads
        .iter()
        .map(|payload| payload.start_ms)
        .fold(f64::INFINITY, f64::min);
    let slice = payloads
        .iter()
        .find_map(|payload| payload.slice.clone())
        .ok_or_else(|| {
            let (field, problem) = missing_slice(slice_field);
            invalid(&field, problem)
        })?;
    let route_of = |deployment: &str| {
        deployments
            .and_then(|deployments| deployments.route_or_first(deployment))
            .map_or_else(|| deployment.to_owned(), str::to_owned)
    };
    let deployment = last
        .deployment
        .clone()
        .or_else(|| last.group.clone())
        .ok_or_else(|| invalid("model_id", "missing (and model_group)".to_owned()))?;
    let id = if last.ok {
        last.id.clone()
    } else {
        last.call_id.clone().unwrap_or_else(|| last.id.clone())
    };
    let mut record = Record::new(
        id,
        start.round() as i64,
        slice,
        route_of(&deployment),
        last.status,
    );
    // The first payload's group is the model asked for; a later one
    // may already name the fallback's.
    let asked_for = payloads.iter().find_map(|payload| payload.group.clone());
    let ours =
        deployments.is_some_and(|deployments| deployments.logical_model_of(&deployment).is_some());
    of_config(&mut record, deployments, asked_for.as_deref(), ours);
    record.model = last.model.clone().map(Cow::Owned);
    record.input_tokens = last.input_tokens;
    record.output_tokens = last.output_tokens;
    // Each attempt's cost is on its own record.
    record.cost_usd = last.cost_usd;
    record.total_ms = Some((last.end_ms - start).max(0.0));
    // A stream's first token where LiteLLM measured one; an answer that
    // did not stream, and a failure, have none measured.
    record.ttft_ms = match (last.ok, last.stream) {
        (true, true) => last.first_token_ms.filter(|first| *first < last.end_ms),
        _ => None,
    }
    .map(|first| (first - start).max(0.0));
    if let Some(messages) = payloads.iter().find_map(|payload| payload.messages.clone())
        && messages.as_array().is_some_and(|list| !list.is_empty())
    {
        record.prompt = last_user_message(&messages).map(Cow::Owned);
        record.messages = Some(Cow::Owned(messages.to_string()));
    }
    // The attempts the request left; a cooling group it was not sent to
    // is no attempt, and moved it as an open breaker does.
    let left = &payloads[..final_index];
    if left.is_empty() && last.cooling_down {
        record.reason = Some(Reason::BreakerOpen);
    }
    if let Some(moved) = left.last() {
        record.reason = Some(Reason::Fallback(if moved.cooling_down {
            Move::Breaker
        } else if moved.status == Status::Timeout {
            Move::Deadline
        } else {
            Move::Error
        }));
    }
    let attempts = left_attempts(
        &record,
        left,
        start,
        deployments,
        &route_of(&deployment),
        &route_of,
    );
    Ok((last.location, record, attempts))
}

/// The records of the attempts a request left before its last payload (a
/// cooling group it was not sent to is no attempt), on the routes it was
/// sent along (the config's chain, with `deployments`): `reached` is the
/// route it ended on, `route_of` reads a deployment as a route.
fn left_attempts(
    record: &Record<'static>,
    left: &[Payload],
    start: f64,
    deployments: Option<&Deployments>,
    reached: &str,
    route_of: &dyn Fn(&str) -> String,
) -> Vec<(RowLocation, Record<'static>)> {
    // The routes the request was sent along: the first, then its
    // fallbacks. LiteLLM may have overwritten a failed attempt's
    // deployment fields (even its group) with the fallback's it moved
    // on to, so the config's chain that ends where the request ended
    // says which route each attempt was.
    let first_route = deployments
        .and_then(|deployments| deployments.first_route_to(reached, left.len()))
        .map(str::to_owned);
    let mut chain: Vec<String> = first_route.into_iter().collect();
    if let (Some(first), Some(deployments)) = (chain.first().cloned(), deployments) {
        chain.extend(deployments.fallbacks_of(&first).iter().cloned());
    }
    let mut attempts = Vec::new();
    for (position, attempt) in left.iter().enumerate() {
        if attempt.cooling_down {
            continue;
        }
        let route =
            chain
                .get(position)
                .cloned()
                .unwrap_or_else(|| match attempt.deployment.as_deref() {
                    Some(deployment) => route_of(deployment),
                    None => reached.to_owned(),
                });
        let mut kept = abandoned_attempt(record, &route, attempt.status);
        if !attempts.is_empty() {
            kept.id = Cow::Owned(format!("{}-attempt-{}", record.id, attempts.len() + 1));
        }
        kept.total_ms = Some((attempt.end_ms - start).max(0.0));
        kept.cost_usd = attempt.cost_usd.or(Some(0.0));
        // Its own model where its deployment fields still name its route.
        kept.model = attempt
            .model
            .clone()
            .filter(|_| {
                attempt
                    .deployment
                    .as_deref()
                    .is_some_and(|deployment| route_of(deployment) == route)
            })
            .map(Cow::Owned);
        attempts.push((attempt.location, kept));
    }
    attempts
}
