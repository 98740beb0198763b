//! LiteLLM's logs as request records: rows of its `LiteLLM_SpendLogs`
//! table (one per request the proxy answered or failed) here, and its
//! StandardLoggingPayload (what its S3, GCS and generic-API loggers write:
//! one per call and per attempt) in `from_litellm_standard.rs`, with what
//! both read the same way. docs/schema.md maps both, field by field.
//!
//! Two things LiteLLM's logs do not say the way records do, and how they
//! are read:
//! - **Attempts.** A request that fell back is one spend row, under the
//!   deployment that answered; the deployment it left is logged nowhere but
//!   in the StandardLoggingPayload of the failed attempt (whose deployment
//!   fields LiteLLM may already have overwritten with the fallback's). So
//!   the abandoned attempt is kept as its own record, `<id>-attempt-1`, on
//!   the route the request was sent to first: the logical model's route, or
//!   the route whose group the application asked for. From spend rows its
//!   time is unknown; from the StandardLoggingPayload it is the attempt's.
//! - **First tokens.** LiteLLM sets `completionStartTime` to the end where
//!   it measured no first token: a failure's record, and an answer that did
//!   not stream, have no `ttft_ms` (`total_ms` is its wait). A streamed
//!   request that fell back is timed from the request's start, so its
//!   `ttft_ms` is the user's wait, as in the records `routeval serve`
//!   writes.
//! - **Models.** The proxy writes its own names into `response.model` (the
//!   group, the logical model, `<logical model>/<route>`): the served model
//!   is then the deployment's `model` without its provider.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::Value;

use super::log_fields::{
    Problem, last_user_message, messages_at, number_at, required, text_at, timestamp_at, tokens_at,
};
use super::reason::{Cause, Move, Reason};
use super::record::Record;
use super::schema::{ATTEMPT_ID_SUFFIX, Status};
use crate::schema::InputError;
use crate::schema::for_each_object;

/// What an export's deployment ids stand for: `<logical model>/<route>` and
/// `<logical model>#<route>` are the route, under the logical model. Read
/// from the signed config the export came from (`--config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployments {
    pub logical_model: String,
    pub routes: Vec<String>,
    /// The route the logical model's own deployment serves (a single-route
    /// policy); `None` when the export sends it to `routeval serve`.
    pub logical_route: Option<String>,
    /// The config's version and the sha256 of its file, which every
    /// deployment of the export carries.
    pub config_version: u64,
    pub config_sha256: String,
    /// The table's fallbacks: the routes a request leaving each route is
    /// sent to, in order.
    pub fallbacks: Vec<(String, Vec<String>)>,
}

impl Deployments {
    /// The route a deployment id or group names, if it is one of ours.
    fn route_of<'a>(&'a self, name: &str) -> Option<&'a str> {
        let rest = name.strip_prefix(self.logical_model.as_str())?;
        let route = rest.strip_prefix('/').or_else(|| rest.strip_prefix('#'))?;
        self.routes
            .iter()
            .map(String::as_str)
            .find(|known| *known == route)
    }

    /// The route a deployment id names, or the route a request for the
    /// logical model itself goes to (a row LiteLLM wrote before it chose a
    /// deployment names the group).
    pub(super) fn route_or_first<'a>(&'a self, name: &str) -> Option<&'a str> {
        self.route_of(name).or_else(|| {
            (name == self.logical_model)
                .then_some(self.logical_route.as_deref())
                .flatten()
        })
    }

    /// The route a request to `group` (the model the application asked
    /// for) is sent to first.
    fn first_route<'a>(&'a self, group: &str) -> Option<&'a str> {
        if group == self.logical_model {
            self.logical_route.as_deref()
        } else {
            self.route_of(group)
        }
    }

    pub(super) fn fallbacks_of(&self, route: &str) -> &[String] {
        self.fallbacks
            .iter()
            .find(|(from, _)| from == route)
            .map_or(&[], |(_, to)| to.as_slice())
    }

    /// The route a request that reached `reached` after `hops` fallbacks
    /// was first sent to: the logical model's route where its chain leads
    /// there, else the first route whose chain does.
    pub(super) fn first_route_to(&self, reached: &str, hops: usize) -> Option<&str> {
        let leads_there = |first: &str| match hops {
            0 => first == reached,
            _ => self
                .fallbacks_of(first)
                .get(hops - 1)
                .is_some_and(|to| to == reached),
        };
        self.logical_route
            .as_deref()
            .filter(|first| leads_there(first))
            .or_else(|| {
                self.routes
                    .iter()
                    .map(String::as_str)
                    .find(|first| leads_there(first))
            })
    }

    /// The logical model a deployment or group of ours belongs to.
    pub(super) fn logical_model_of(&self, name: &str) -> Option<&str> {
        (name == self.logical_model || self.route_of(name).is_some())
            .then_some(self.logical_model.as_str())
    }
}

/// What the config says of a record: its logical model (a group of ours
/// reads as the config's), and, on a deployment of ours, the config's
/// version and digest.
pub(super) fn of_config(
    record: &mut Record<'static>,
    deployments: Option<&Deployments>,
    asked_for: Option<&str>,
    ours: bool,
) {
    record.logical_model = asked_for
        .map(|group| {
            deployments
                .and_then(|deployments| deployments.logical_model_of(group))
                .unwrap_or(group)
                .to_owned()
        })
        .map(Cow::Owned);
    if let (Some(deployments), true) = (deployments, ours) {
        record.config_version = Some(deployments.config_version);
        record.config_sha256 = Some(Cow::Owned(deployments.config_sha256.clone()));
    }
}

/// Spend-row fields of a request's abandoned attempt, for a record of it.
pub(super) fn abandoned_attempt(
    request: &Record<'static>,
    route: &str,
    status: Status,
) -> Record<'static> {
    let mut attempt = Record::new(
        format!("{}{ATTEMPT_ID_SUFFIX}", request.id),
        request.timestamp_ms,
        request.slice.to_string(),
        route.to_owned(),
        status,
    );
    attempt.logical_model = request.logical_model.clone();
    attempt.reason = Some(Reason::Abandoned(match status {
        Status::Timeout => Cause::Deadline,
        _ => Cause::Error,
    }));
    attempt.input_tokens = Some(0);
    attempt.output_tokens = Some(0);
    attempt.cost_usd = Some(0.0);
    attempt.config_version = request.config_version;
    attempt.config_sha256 = request.config_sha256.clone();
    attempt
}

/// A failure's status from LiteLLM's error information: its HTTP code and
/// exception class.
pub(super) fn failure_status(code: Option<String>, class: Option<String>) -> Status {
    if class
        .as_deref()
        .is_some_and(|class| class.contains("Timeout"))
    {
        return Status::Timeout;
    }
    code.as_deref()
        .and_then(|code| code.trim().parse::<u16>().ok())
        .map_or(Status::Error, Status::from_http)
}

/// LiteLLM's billed retry attempts of a file: rows whose id is a request's
/// id and `-attempt-N` (or whose `metadata.billed_retry_attempt` is set),
/// by the request they belong to, with what they spent.
#[derive(Debug, Default)]
pub struct BilledAttempts {
    requests: HashSet<String>,
    /// Failed requests LiteLLM logged twice, as `chatcmpl-<uuid>` beside
    /// the row of `<uuid>` (its call id): the `chatcmpl-` rows, folded
    /// into the call id's, so one request is one record.
    doubled: HashSet<String>,
    spend: HashMap<String, f64>,
    /// Requests the file has attempts of but no row of their own (a
    /// request that failed in every attempt): read as one request.
    orphans: HashMap<String, Orphan>,
}

/// A request known only by its attempts.
#[derive(Debug, Clone, Copy)]
struct Orphan {
    /// The number of its last attempt, the one that stands for it.
    last: u64,
    /// What all of its attempts spent.
    spend: f64,
    /// When its first attempt started, ms since 1970.
    start_ms: Option<i64>,
}

/// How LiteLLM's response ids begin; a failure logged under one as well as
/// under its bare call id is one request.
const LITELLM_RESPONSE_ID: &str = "chatcmpl-";

/// The request a billed attempt's id belongs to, and the attempt's number.
fn attempt_of(id: &str) -> Option<(&str, u64)> {
    let (request, number) = id.rsplit_once("-attempt-")?;
    let number = (!number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| number.parse().ok())??;
    Some((request, number))
}

impl BilledAttempts {
    pub fn of_file(path: &Path) -> Result<BilledAttempts, InputError> {
        let mut attempts = BilledAttempts::default();
        let mut tried: Vec<(String, u64, f64, Option<i64>)> = Vec::new();
        let mut failed: HashSet<String> = HashSet::new();
        for_each_object::<InputError>(path, |_, object| {
            let object = &object;
            let Some(id) = text_at(object, "request_id") else {
                return Ok(());
            };
            if text_at(object, "status").as_deref() == Some("failure") {
                failed.insert(id.clone());
            }
            match attempt_of(&id) {
                Some((request, number)) => tried.push((
                    request.to_owned(),
                    number,
                    number_at(object, "spend").ok().flatten().unwrap_or(0.0),
                    timestamp_at(object, "startTime").ok().flatten(),
                )),
                None => {
                    attempts.requests.insert(id);
                }
            }
            Ok(())
        })?;
        attempts.doubled = failed
            .iter()
            .filter(|id| {
                id.strip_prefix(LITELLM_RESPONSE_ID)
                    .is_some_and(|call_id| failed.contains(call_id))
            })
            .cloned()
            .collect();
        for (request, number, spent, start_ms) in tried {
            if attempts.requests.contains(&request) {
                *attempts.spend.entry(request).or_default() += spent;
                continue;
            }
            let orphan = attempts.orphans.entry(request).or_insert(Orphan {
                last: number,
                spend: 0.0,
                start_ms,
            });
            orphan.last = orphan.last.max(number);
            orphan.spend += spent;
            orphan.start_ms = match (orphan.start_ms, start_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(attempts)
    }

    /// Whether `object` is folded into another row's request: an attempt of
    /// a request in the file, or of a request known only by its attempts
    /// but the last, which stands for it; or the second row of a failure
    /// logged twice.
    pub fn folds(&self, object: &serde_json::Map<String, Value>) -> bool {
        let Some(id) = text_at(object, "request_id") else {
            return false;
        };
        if self.doubled.contains(&id) {
            return true;
        }
        attempt_of(&id).is_some_and(|(request, number)| {
            self.requests.contains(request)
                || self
                    .orphans
                    .get(request)
                    .is_some_and(|orphan| orphan.last != number)
        })
    }

    /// A request known only by its attempts, from its last attempt's
    /// record: its id, from its first attempt's start, and what all of them
    /// spent. Any other record is left as it is.
    pub fn stand_for_request(&self, record: &mut Record<'static>) {
        let Some((request, orphan)) = attempt_of(&record.id)
            .and_then(|(request, _)| Some((request.to_owned(), *self.orphans.get(request)?)))
        else {
            return;
        };
        record.id = Cow::Owned(request);
        if let Some(start_ms) = orphan.start_ms.filter(|start| *start < record.timestamp_ms) {
            let earlier = (record.timestamp_ms - start_ms) as f64;
            record.total_ms = record.total_ms.map(|total| total + earlier);
            record.ttft_ms = record.ttft_ms.map(|ttft| ttft + earlier);
            record.timestamp_ms = start_ms;
        }
        record.cost_usd = Some(orphan.spend);
    }

    /// What the attempts of request `id` spent, if it had any.
    pub fn spend_of(&self, id: &str) -> Option<f64> {
        self.spend.get(id).copied()
    }
}

/// The message for a slice field a row does not have.
pub(super) fn missing_slice(field: &str) -> Problem {
    (
        field.to_owned(),
        "missing: a proxy without keys per team has no team_id; a tenant is often in metadata.user_api_key_team_alias, metadata.spend_logs_metadata.<key> or request_tags (give --slice-field)".to_owned(),
    )
}

/// One `LiteLLM_SpendLogs` row: `request_id`, `startTime`,
/// `completionStartTime` and `endTime` (the first token and the end, as
/// milliseconds after the start), `model_group` (the logical model),
/// `model_id` or `model` (the route), `spend`, `prompt_tokens`,
/// `completion_tokens`, `status`, `messages`, `response` and `metadata`;
/// with the attempt it abandoned, when it fell back and `--config` says
/// where it was first sent.
pub fn spend_row(
    object: &serde_json::Map<String, Value>,
    slice_field: &str,
    deployments: Option<&Deployments>,
) -> Result<(Record<'static>, Option<Record<'static>>), Problem> {
    let start = timestamp_at(object, "startTime")?
        .ok_or_else(|| ("startTime".to_owned(), "missing".to_owned()))?;
    let after_start = |field: &str| -> Result<Option<f64>, Problem> {
        match timestamp_at(object, field)? {
            Some(at) if at < start => Err((
                field.to_owned(),
                format!("{} ms before startTime", start - at),
            )),
            Some(at) => Ok(Some((at - start) as f64)),
            None => Ok(None),
        }
    };
    let status = match text_at(object, "status") {
        None => Status::Ok,
        Some(text) => match Status::parse(&text).ok_or_else(|| {
            (
                "status".to_owned(),
                format!("{text:?} is not success or failure"),
            )
        })? {
            Status::Error => failure_status(
                text_at(object, "metadata.error_information.error_code"),
                text_at(object, "metadata.error_information.error_class"),
            ),
            other => other,
        },
    };
    let deployment = text_at(object, "model_id")
        .or_else(|| text_at(object, "model"))
        .ok_or_else(|| ("model".to_owned(), "missing (and model_id)".to_owned()))?;
    let route = deployments
        .and_then(|deployments| deployments.route_or_first(&deployment))
        .map_or(deployment.clone(), str::to_owned);
    let ours =
        deployments.is_some_and(|deployments| deployments.logical_model_of(&deployment).is_some());
    let slice = text_at(object, slice_field).ok_or_else(|| missing_slice(slice_field))?;
    let mut record = Record::new(required(object, "request_id")?, start, slice, route, status);
    // A deployment's own group (`support-assistant/small`) is not the name
    // the application asked for; LiteLLM keeps that one as the original.
    let asked_for =
        text_at(object, "metadata.original_model_group").or_else(|| text_at(object, "model_group"));
    of_config(&mut record, deployments, asked_for.as_deref(), ours);
    record.model = served_model(object).map(Cow::Owned);
    record.input_tokens = tokens_at(object, "prompt_tokens")?;
    record.output_tokens = tokens_at(object, "completion_tokens")?;
    record.cached_input_tokens = tokens_at(
        object,
        "metadata.usage_object.prompt_tokens_details.cached_tokens",
    )?;
    record.total_ms = after_start("endTime")?;
    // LiteLLM sets completionStartTime to the end where it measured no
    // first token: a failure, and an answer that did not stream. None is
    // recorded then (one after the end is refused below, as every reader
    // refuses it).
    record.ttft_ms =
        after_start("completionStartTime")?.filter(|ttft| record.total_ms != Some(*ttft));
    record.cost_usd = number_at(object, "spend")?;
    record.finish_reason = text_at(object, "response.choices.0.finish_reason")
        .or_else(|| super::log_fields::first_choice_finish(object, "response"))
        .map(Cow::Owned);
    // A proxy storing prompts may write `messages: "{}"` and keep the
    // request under `proxy_server_request`.
    let messages = messages_at(object, "messages")
        .filter(|messages| messages.as_array().is_some_and(|list| !list.is_empty()))
        .or_else(|| messages_at(object, "proxy_server_request.messages"));
    if let Some(messages) = messages {
        record.prompt = last_user_message(&messages).map(Cow::Owned);
        record.messages = Some(Cow::Owned(messages.to_string()));
    }
    // LiteLLM logs no routing reason, but a request that fell back says how
    // many fallbacks it tried, and the group it was first sent to.
    let fell_back = number_at(object, "metadata.attempted_fallbacks")
        .ok()
        .flatten()
        .is_some_and(|tried| tried > 0.0);
    let mut attempt = None;
    if !fell_back && refused_cooling(object, "metadata.error_information.error_class") {
        record.reason = Some(Reason::BreakerOpen);
    }
    if fell_back {
        record.reason = Some(Reason::Fallback(Move::Error));
        let first = deployments
            .zip(asked_for.as_deref())
            .and_then(|(deployments, group)| deployments.first_route(group))
            .filter(|first| *first != record.route);
        // Spend rows do not say why the first deployment failed, nor when.
        attempt = first.map(|first| abandoned_attempt(&record, first, Status::Error));
    }
    Ok((record, attempt))
}

/// LiteLLM's providers, as the prefix of a `model` (`openai/…`).
const LITELLM_PROVIDERS: [&str; 24] = [
    "openai",
    "azure",
    "azure_ai",
    "anthropic",
    "bedrock",
    "vertex_ai",
    "gemini",
    "groq",
    "mistral",
    "cohere",
    "together_ai",
    "fireworks_ai",
    "deepseek",
    "ollama",
    "ollama_chat",
    "hosted_vllm",
    "vllm",
    "openrouter",
    "xai",
    "perplexity",
    "huggingface",
    "sagemaker",
    "databricks",
    "watsonx",
];

/// The model that answered: the provider's own in `response.model`, but
/// where LiteLLM wrote one of its names there (a streamed response's, and
/// the proxy's: the group, the logical model or a `<logical>/<route>`
/// deployment), the deployment's `model` without its provider; none where
/// that too is one of LiteLLM's names (a request no deployment was tried
/// for).
pub(super) fn served_model(object: &serde_json::Map<String, Value>) -> Option<String> {
    let ours = [
        text_at(object, "model_group"),
        text_at(object, "metadata.original_model_group"),
        text_at(object, "metadata.model_group"),
    ];
    let is_ours = |model: &str| ours.iter().flatten().any(|name| name == model);
    text_at(object, "response.model")
        .filter(|model| !model.contains(['/', '#']) && !is_ours(model))
        .or_else(|| {
            text_at(object, "model")
                .map(|model| without_provider(&model).to_owned())
                .filter(|model| !is_ours(model))
        })
}

/// Whether LiteLLM's router refused to try because every deployment it
/// could send the request to was cooling down: no call was made, as when
/// an open breaker has no fallback to send a request to.
pub(super) fn refused_cooling(object: &serde_json::Map<String, Value>, error_class: &str) -> bool {
    text_at(object, error_class).as_deref() == Some("RouterRateLimitError")
}

/// `model` without the LiteLLM provider it is routed through: the model
/// version the provider knows (`openai/gpt-4o-mini` is `gpt-4o-mini`);
/// a name whose first part is no provider (`meta-llama/…`) as it is.
fn without_provider(model: &str) -> &str {
    match model.split_once('/') {
        Some((provider, rest)) if LITELLM_PROVIDERS.contains(&provider) => rest,
        _ => model,
    }
}
