//! One call to an OpenAI-compatible chat endpoint, through `async-openai`
//! (streaming, so time to first token is measured), with the first-token,
//! stall and total deadlines. The transport under async-openai is our own
//! tower service over reqwest: it leaves retries to the runner and keeps the
//! status and `Retry-After` of a refused request.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::{OpenAIError, StreamError};
use async_openai::middleware::HttpRequestFactory;
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage,
    ChatCompletionStreamOptions, CreateChatCompletionRequest, FinishReason,
};
use futures_util::StreamExt;

use crate::client::EndpointConfig;
use crate::schema::{Message, Role};

/// What to send, apart from the endpoint's own settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    pub messages: Vec<Message>,
    pub temperature: f32,
    pub max_tokens: u32,
    pub seed: i64,
    pub logprobs: bool,
}

/// Token counts from `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub cached_input: u64,
    pub output: u64,
}

/// A complete answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    pub finish_reason: String,
    pub model_version: Option<String>,
    pub usage: Option<Usage>,
    pub ttft: Duration,
    pub total: Duration,
    /// Alternatives of the first word-like token, when log-probabilities were asked for.
    pub verdict_logprobs: Option<Vec<(String, f64)>>,
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    Status {
        status: u16,
        retry_after: Option<Duration>,
        message: String,
    },
    Connect(String),
    Reset(String),
    FirstTokenTimeout,
    Stall,
    TotalTimeout,
    /// The stream ended without a finish reason.
    CutStream,
    MalformedChunk(String),
    Client(String),
}

impl AttemptError {
    pub fn kind(&self) -> &'static str {
        match self {
            AttemptError::Status { status: 429, .. } => "rate_limited",
            AttemptError::Status { status, .. } if *status >= 500 => "server_error",
            AttemptError::Status {
                status: 401 | 403, ..
            } => "unauthorized",
            AttemptError::Status { .. } => "rejected",
            AttemptError::Connect(_) => "connect",
            AttemptError::Reset(_) => "reset",
            AttemptError::FirstTokenTimeout => "first_token_timeout",
            AttemptError::Stall => "stall",
            AttemptError::TotalTimeout => "total_timeout",
            AttemptError::CutStream => "cut_stream",
            AttemptError::MalformedChunk(_) => "malformed_chunk",
            AttemptError::Client(_) => "client",
        }
    }

    /// 5xx, 429, resets, timeouts and broken streams may succeed on a retry;
    /// 400/401/403/404/422 and other client errors never will.
    pub fn retryable(&self) -> bool {
        match self {
            AttemptError::Status { status, .. } => {
                *status == 429 || *status == 408 || *status >= 500
            }
            AttemptError::Client(_) => false,
            _ => true,
        }
    }

    pub fn message(&self) -> String {
        match self {
            AttemptError::Status {
                status, message, ..
            } => format!("HTTP {status}: {message}"),
            AttemptError::Connect(message)
            | AttemptError::Reset(message)
            | AttemptError::MalformedChunk(message)
            | AttemptError::Client(message) => message.clone(),
            AttemptError::FirstTokenTimeout => {
                "no first token before the first-token deadline".to_owned()
            }
            AttemptError::Stall => "the stream stalled longer than the stall timer".to_owned(),
            AttemptError::TotalTimeout => "the request exceeded its total deadline".to_owned(),
            AttemptError::CutStream => "the stream ended without a finish reason".to_owned(),
        }
    }
}

/// A chat endpoint: the seam where tests and benchmarks swap the network.
pub trait ChatEndpoint: Send + Sync + 'static {
    fn complete(
        &self,
        request: &CallRequest,
    ) -> impl Future<Output = Result<Completion, AttemptError>> + Send;
}

/// A refused request as the transport saw it.
#[derive(Debug)]
struct StatusError {
    status: u16,
    retry_after: Option<Duration>,
    message: String,
}

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.message)
    }
}

impl std::error::Error for StatusError {}

/// `Retry-After` as seconds or an HTTP date, or `retry-after-ms`, which
/// some providers send.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| Some(headers.get(name)?.to_str().ok()?.trim().to_owned());
    let seconds = text("retry-after-ms")
        .and_then(|ms| ms.parse::<f64>().ok())
        .map(|ms| ms / 1000.0)
        .or_else(|| {
            let value = text("retry-after")?;
            value.parse::<f64>().ok().or_else(|| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()?
                    .as_secs_f64();
                Some((http_date(&value)? as f64 - now).max(0.0))
            })
        })?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// Unix seconds of an HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`).
fn http_date(text: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let month = MONTHS.iter().position(|name| name == month)? + 1;
    let day: u32 = day.parse().ok()?;
    crate::clock::parse_rfc3339(&format!("{year}-{month:02}-{day:02}T{time}Z"))
}

#[derive(Clone, Debug)]
struct Transport {
    client: reqwest::Client,
    send_key: bool,
    key: String,
}

impl tower_service::Service<HttpRequestFactory> for Transport {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), OpenAIError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let transport = self.clone();
        Box::pin(async move {
            let mut request = factory.build().await?;
            if !transport.send_key {
                request.headers_mut().remove(reqwest::header::AUTHORIZATION);
            }
            let response = transport
                .client
                .execute(request)
                .await
                .map_err(OpenAIError::Reqwest)?;
            if response.status().is_success() {
                return Ok(response);
            }
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let body = response.bytes().await.unwrap_or_default();
            let text = String::from_utf8_lossy(&body[..body.len().min(2048)]);
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|json| json["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| text.trim().to_owned());
            Err(OpenAIError::Boxed(Box::new(StatusError {
                status,
                retry_after,
                message: redact(&message, &transport.key),
            })))
        })
    }
}

/// `message` without the key or any recognisable part of it (providers echo
/// a masked key such as `sk-abc***wxyz` when they refuse it).
pub fn redact(message: &str, key: &str) -> String {
    let message = &redact_url(message);
    if key.len() < 8 {
        return message.to_owned();
    }
    let head = &key[..6];
    let tail = &key[key.len() - 4..];
    message
        .split_inclusive(char::is_whitespace)
        .map(|word| {
            if word.contains(head) || word.contains(tail) || word.contains(key) {
                let space = &word[word.trim_end().len()..];
                format!("[redacted]{space}")
            } else {
                word.to_owned()
            }
        })
        .collect()
}

/// An endpoint of the config, reached through async-openai.
#[derive(Debug)]
pub struct OpenAiEndpoint {
    client: Client<OpenAIConfig>,
    model: String,
    first_token: Duration,
    stall: Duration,
    total: Duration,
}

/// The HTTP client every endpoint shares: one connection pool per host.
pub fn http_client(max_idle: usize) -> anyhow::Result<reqwest::Client> {
    Ok(client_builder(max_idle).build()?)
}

/// The client serve calls its routes with: as [`http_client`], but a
/// redirect is returned as it is, never followed, so that a prompt goes
/// only to an address the signed config names.
pub fn proxy_client(max_idle: usize) -> anyhow::Result<reqwest::Client> {
    Ok(client_builder(max_idle)
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

fn client_builder(max_idle: usize) -> reqwest::ClientBuilder {
    // Ignore the error: another part of the process may have installed it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_max_idle_per_host(max_idle)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
}

impl OpenAiEndpoint {
    /// `key` is the API key's value, or none to send no key.
    pub fn new(
        http: reqwest::Client,
        endpoint: &EndpointConfig,
        key: Option<String>,
    ) -> OpenAiEndpoint {
        let config = OpenAIConfig::new()
            .with_api_base(endpoint.base_url.trim_end_matches('/'))
            .with_api_key(key.clone().unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        let transport = Transport {
            client: http,
            send_key: key.is_some(),
            key: key.unwrap_or_default(),
        };
        OpenAiEndpoint {
            client: Client::with_config(config).with_http_service(transport),
            model: endpoint.model.clone(),
            first_token: endpoint.first_token(),
            stall: endpoint.stall(),
            total: endpoint.total(),
        }
    }

    #[allow(
        deprecated,
        reason = "OpenAI calls seed deprecated; vLLM, SGLang and llama.cpp honour it"
    )]
    fn request(&self, call: &CallRequest) -> CreateChatCompletionRequest {
        let messages = call
            .messages
            .iter()
            .map(|message| match message.role {
                Role::System => ChatCompletionRequestMessage::System(
                    ChatCompletionRequestSystemMessage::from(message.content.as_str()),
                ),
                Role::User => ChatCompletionRequestMessage::User(
                    ChatCompletionRequestUserMessage::from(message.content.as_str()),
                ),
                Role::Assistant => ChatCompletionRequestMessage::Assistant(
                    ChatCompletionRequestAssistantMessage::from(message.content.as_str()),
                ),
            })
            .collect();
        CreateChatCompletionRequest {
            messages,
            model: self.model.clone(),
            temperature: Some(call.temperature),
            max_completion_tokens: Some(call.max_tokens),
            seed: Some(call.seed),
            stream: Some(true),
            stream_options: Some(ChatCompletionStreamOptions {
                include_usage: Some(true),
                include_obfuscation: None,
            }),
            logprobs: call.logprobs.then_some(true),
            top_logprobs: call.logprobs.then_some(5),
            ..CreateChatCompletionRequest::default()
        }
    }
}

fn classify(error: OpenAIError) -> AttemptError {
    match error {
        OpenAIError::Boxed(boxed) => match boxed.downcast::<StatusError>() {
            Ok(status) => AttemptError::Status {
                status: status.status,
                retry_after: status.retry_after,
                message: status.message,
            },
            Err(other) => AttemptError::Client(other.to_string()),
        },
        OpenAIError::Reqwest(error) if error.is_connect() => {
            AttemptError::Connect(format!("cannot connect: {}", source_chain(&error)))
        }
        OpenAIError::Reqwest(error) if error.is_timeout() => AttemptError::TotalTimeout,
        OpenAIError::Reqwest(error) => AttemptError::Reset(source_chain(&error)),
        OpenAIError::StreamError(stream) => match *stream {
            StreamError::EventStream(message) => AttemptError::Reset(message),
            StreamError::UnknownEvent(event) => {
                AttemptError::MalformedChunk(format!("unknown event {:?}", event.event))
            }
        },
        OpenAIError::JSONDeserialize(error, _) => {
            AttemptError::MalformedChunk(format!("a chunk is not valid JSON: {error}"))
        }
        other => AttemptError::Client(other.to_string()),
    }
}

fn source_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

fn finish_name(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::FunctionCall => "function_call",
    }
}

impl ChatEndpoint for OpenAiEndpoint {
    async fn complete(&self, call: &CallRequest) -> Result<Completion, AttemptError> {
        let started = Instant::now();
        let total_deadline = tokio::time::Instant::from_std(started + self.total);
        let first_deadline =
            tokio::time::Instant::from_std(started + self.first_token).min(total_deadline);
        let timed_out = |deadline: tokio::time::Instant| {
            if deadline >= total_deadline {
                AttemptError::TotalTimeout
            } else {
                AttemptError::FirstTokenTimeout
            }
        };
        let request = self.request(call);
        let chat = self.client.chat();
        let mut stream =
            match tokio::time::timeout_at(first_deadline, chat.create_stream(request)).await {
                Err(_) => return Err(timed_out(first_deadline)),
                Ok(Err(error)) => return Err(classify(error)),
                Ok(Ok(stream)) => stream,
            };
        let mut text = String::new();
        let mut first_token: Option<Instant> = None;
        let mut finish_reason = None;
        let mut model_version = None;
        let mut usage = None;
        let mut verdict_logprobs = None;
        loop {
            let deadline = match first_token {
                None => first_deadline,
                Some(_) => (tokio::time::Instant::now() + self.stall).min(total_deadline),
            };
            // Dropping the stream on a deadline drops its connection.
            let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) if first_token.is_none() => return Err(timed_out(deadline)),
                Err(_) if deadline >= total_deadline => return Err(AttemptError::TotalTimeout),
                Err(_) => return Err(AttemptError::Stall),
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(classify(error)),
                Ok(Some(Ok(chunk))) => chunk,
            };
            if model_version.is_none() && !chunk.model.is_empty() {
                model_version = Some(chunk.model.clone());
            }
            if let Some(reported) = chunk.usage {
                usage = Some(Usage {
                    input: u64::from(reported.prompt_tokens),
                    cached_input: reported
                        .prompt_tokens_details
                        .and_then(|details| details.cached_tokens)
                        .map_or(0, u64::from),
                    output: u64::from(reported.completion_tokens),
                });
            }
            for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
                if let Some(content) = choice.delta.content
                    && !content.is_empty()
                {
                    first_token.get_or_insert_with(Instant::now);
                    text.push_str(&content);
                }
                if verdict_logprobs.is_none()
                    && let Some(tokens) = choice.logprobs.and_then(|logprobs| logprobs.content)
                    && let Some(token) = tokens
                        .iter()
                        .find(|token| token.token.chars().any(char::is_alphabetic))
                {
                    verdict_logprobs = Some(
                        token
                            .top_logprobs
                            .iter()
                            .map(|top| (top.token.clone(), f64::from(top.logprob)))
                            .collect(),
                    );
                }
                if let Some(reason) = choice.finish_reason {
                    finish_reason = Some(finish_name(reason));
                    first_token.get_or_insert_with(Instant::now);
                }
            }
        }
        let Some(finish_reason) = finish_reason else {
            return Err(AttemptError::CutStream);
        };
        let ended = Instant::now();
        Ok(Completion {
            text,
            finish_reason: finish_reason.to_owned(),
            model_version,
            usage,
            ttft: first_token.unwrap_or(ended) - started,
            total: ended - started,
            verdict_logprobs,
        })
    }
}

/// Checks before the first paid request that `endpoint` answers and accepts
/// the key: `GET /models`. Servers without that route pass.
pub async fn preflight(
    http: &reqwest::Client,
    endpoint: &EndpointConfig,
    key: Option<&str>,
) -> Result<(), String> {
    let url = format!("{}/models", endpoint.base_url.trim_end_matches('/'));
    let shown = redact_url(&endpoint.base_url);
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let mut request = http.get(&url).timeout(Duration::from_secs(15));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = match request.send().await {
            Err(error) if error.is_connect() || error.is_timeout() => {
                return Err(format!(
                    "cannot reach {shown}: {}",
                    redact(&source_chain(&error), key.unwrap_or_default())
                ));
            }
            Err(error) => {
                return Err(format!(
                    "{shown}: {}",
                    redact(&source_chain(&error), key.unwrap_or_default())
                ));
            }
            Ok(response) => response,
        };
        let status = response.status().as_u16();
        match status {
            401 | 403 => {
                return Err(format!(
                    "{shown} refused the API key in ${} (HTTP {status})",
                    endpoint.api_key_env.as_deref().unwrap_or("(none)"),
                ));
            }
            // The same politeness as every call: wait at least Retry-After,
            // back off, and give up after the endpoint's retries.
            429 | 502 | 503 | 504 => {
                if attempt > endpoint.max_retries {
                    return Err(format!(
                        "{shown} answered HTTP {status} to {attempt} checks (GET /models); it is overloaded or the key is out of quota"
                    ));
                }
                let wait = crate::client::backoff(
                    Duration::from_millis(endpoint.backoff_base_ms),
                    attempt,
                    retry_after(response.headers()),
                    0.5,
                );
                tokio::time::sleep(wait).await;
            }
            _ => return Ok(()),
        }
    }
}

/// A URL with any credentials it carries (`user:password@`, a query string)
/// masked, so a key embedded in `base_url` never reaches a message.
pub fn redact_url(text: &str) -> String {
    let mut redacted = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (before, after) = rest.split_at(start + 3);
        redacted.push_str(before);
        let end = after
            .find(|character: char| {
                character.is_whitespace() || character == '"' || character == ')'
            })
            .unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        let (authority_end, query) = match url.find('?') {
            Some(index) => (index, true),
            None => (url.len(), false),
        };
        let (head, _) = url.split_at(authority_end);
        let head = match head.split_once('/') {
            Some((authority, path)) => format!("{}/{path}", mask_userinfo(authority)),
            None => mask_userinfo(head),
        };
        redacted.push_str(&head);
        if query {
            redacted.push_str("?[redacted]");
        }
        rest = tail;
    }
    redacted.push_str(rest);
    redacted
}

fn mask_userinfo(authority: &str) -> String {
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("[redacted]@{host}"),
        None => authority.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_masked() {
        assert_eq!(
            redact_url("cannot reach https://user:sk-secret@api.example.com/v1: refused"),
            "cannot reach https://[redacted]@api.example.com/v1: refused"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:9/v1/models?key=sk-secret"),
            "http://127.0.0.1:9/v1/models?[redacted]"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:9/v1 is fine"),
            "http://127.0.0.1:9/v1 is fine"
        );
    }

    #[test]
    fn redaction_removes_the_key_and_masked_echoes() {
        let key = "sk-proj-abcdefghijklmnop1234";
        let message = "Incorrect API key provided: sk-proj-***********1234. You can find your key at https://x";
        let redacted = redact(message, key);
        assert!(!redacted.contains("1234"), "{redacted}");
        assert!(redacted.contains("Incorrect API key provided: [redacted] You can"));
        assert_eq!(redact(&format!("bad {key}!"), key), "bad [redacted]");
    }

    #[test]
    fn retry_after_comes_as_seconds_milliseconds_or_a_date() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            http_date("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(1_445_412_480)
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
    }

    #[test]
    fn only_transient_failures_are_retried() {
        let status = |status| AttemptError::Status {
            status,
            retry_after: None,
            message: String::new(),
        };
        for code in [400, 401, 403, 404, 422] {
            assert!(!status(code).retryable(), "{code}");
        }
        for code in [429, 500, 502, 503, 504] {
            assert!(status(code).retryable(), "{code}");
        }
        assert!(AttemptError::CutStream.retryable());
        assert!(AttemptError::Stall.retryable());
        assert!(!AttemptError::Client("bad".into()).retryable());
    }
}
