//! The HTTP server: `/v1/chat/completions` (with and without streaming),
//! `/v1/models`, and `/sim/stats` with what it received.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde_json::{Value, json};

use crate::schema::DatasetRow;

use super::answer::{Knowledge, SimModel, answer_for, verdict_for};
use super::faults::{Fault, request_unit};
use super::state::{Shared, SimSettings, Stats};

/// A server running on its own thread; it stops when dropped.
pub struct RunningSim {
    pub address: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RunningSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningSim")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl RunningSim {
    /// Holds every response where it is (or lets them go on), so a test can
    /// stop a client while none of its requests is about to complete.
    pub fn set_paused(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::SeqCst);
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats.lock().expect("unpoisoned").clone()
    }

    /// Serves until the process ends.
    pub fn wait(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the server on `listen` (port 0 picks a free one).
pub fn spawn(
    settings: SimSettings,
    rows: &[DatasetRow],
    listen: SocketAddr,
) -> anyhow::Result<RunningSim> {
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen}"))?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    let shared = Arc::new(Shared {
        instance: format!("{:x}", started ^ (u64::from(address.port()) << 48)),
        knowledge: Knowledge::new(rows),
        settings,
        requests: AtomicU64::new(0),
        paused: std::sync::atomic::AtomicBool::new(false),
        stats: Mutex::new(Stats::default()),
        refusals: Mutex::new(HashMap::new()),
        models_refusals: AtomicU64::new(0),
    });
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/sim/stats", get(stats))
        .with_state(shared.clone());
    let thread = std::thread::Builder::new()
        .name("serve-sim".to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                // Without NODELAY a response's header and body, written
                // apart, wait 40 ms for the client's delayed ACK.
                let listener = tokio::net::TcpListener::from_std(listener)
                    .expect("a tokio listener")
                    .tap_io(|stream| {
                        let _ = stream.set_nodelay(true);
                    });
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        })?;
    Ok(RunningSim {
        address,
        shared,
        shutdown: Some(shutdown),
        thread: Some(thread),
    })
}

/// A 401 like a provider's, echoing the key masked, when a key is required
/// and `headers` do not carry it.
fn refuse_key(shared: &Shared, headers: &axum::http::HeaderMap) -> Option<Response> {
    let required = shared.settings.require_key.as_deref()?;
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    if sent == required {
        return None;
    }
    let masked = if sent.len() > 10 {
        format!("{}***{}", &sent[..6], &sent[sent.len() - 4..])
    } else {
        "***".to_owned()
    };
    Some(error(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        &format!(
            "Incorrect API key provided: {masked}. You can find your API key in your account."
        ),
    ))
}

async fn models(State(shared): State<Arc<Shared>>, headers: axum::http::HeaderMap) -> Response {
    // Every listing is one request body, for the early-retry count.
    const LISTING: u64 = u64::MAX;
    if let Some(refusal) = refuse_key(&shared, &headers) {
        return refusal;
    }
    shared.check_repeat(LISTING);
    if shared.models_refusals.fetch_add(1, Ordering::Relaxed) < shared.settings.models_rate_limited
    {
        shared.record(StatusCode::TOO_MANY_REQUESTS, Some(Fault::RateLimit));
        let wait = shared.settings.faults.retry_after_s;
        shared.refused(LISTING, Some(Duration::from_secs(wait)));
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "rate limit reached",
        );
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&wait.to_string()).expect("digits"),
        );
        return response;
    }
    let data: Vec<Value> = shared
        .settings
        .models
        .iter()
        .map(|model| json!({"id": model.name, "object": "model", "owned_by": "routeval-sim"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn stats(State(shared): State<Arc<Shared>>) -> Json<Stats> {
    Json(shared.stats.lock().expect("unpoisoned").clone())
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"message": message, "type": kind}})),
    )
        .into_response()
}

/// A factor e^(σz), z standard normal, fixed by the seed, the request's
/// number and which quantity it scales.
fn lognormal_factor(seed: u64, request: u64, quantity: u64, sigma: f64) -> f64 {
    if sigma <= 0.0 {
        return 1.0;
    }
    let unit = |salt: u64| request_unit(seed, request, salt);
    // Box–Muller; 1 − u keeps the logarithm finite.
    let z = (-2.0 * (1.0 - unit(2 * quantity + 1)).ln()).sqrt()
        * (std::f64::consts::TAU * unit(2 * quantity + 2)).cos();
    (sigma * z).exp()
}

fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let request = match ChatRequest::parse(&shared, &headers, &body) {
        Ok(request) => request,
        Err(refusal) => return *refusal,
    };
    let number = shared.requests.fetch_add(1, Ordering::Relaxed);
    let fault = shared.settings.faults.draw(shared.settings.seed, number);
    let body_hash = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut hasher);
        hasher.finish()
    };
    shared.check_repeat(body_hash);
    if let Some(refusal) = refused_by_fault(&shared, fault, body_hash) {
        return refusal;
    }
    shared.record(StatusCode::OK, fault);

    let (text, prompt_id) = match verdict_for(
        &shared.knowledge,
        &request.model,
        &request.prompt,
        request.seed,
    ) {
        Some(verdict) => verdict,
        None => {
            let (text, _, prompt_id) = answer_for(
                &shared.knowledge,
                &request.model,
                &request.prompt,
                request.seed,
                shared.settings.steepness,
            );
            (text, prompt_id)
        }
    };
    let completed_key = format!(
        "{}|{}|{}",
        request.model.name,
        prompt_id.unwrap_or_default(),
        request.seed
    );
    let reply = Reply::new(&shared, &request, number, fault, text);
    let pieces = if request.stream {
        reply.streamed(&shared.settings, fault, request.include_usage)
    } else {
        reply.whole(&shared.settings, fault)
    };
    let finishes = !matches!(
        fault,
        Some(Fault::CutStream | Fault::Reset | Fault::MalformedChunk)
    );
    let content_type = if request.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .body(timed_body(shared, pieces, finishes, completed_key))
        .expect("a valid response")
}

/// What a chat request asks for, once its key, JSON, model and messages
/// have passed; a refusal is the response to send (and is recorded).
struct ChatRequest {
    model: SimModel,
    /// The last user message.
    prompt: String,
    prompt_tokens: u64,
    seed: u64,
    stream: bool,
    include_usage: bool,
}

impl ChatRequest {
    fn parse(
        shared: &Shared,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<ChatRequest, Box<Response>> {
        if let Some(refusal) = refuse_key(shared, headers) {
            shared.record(StatusCode::UNAUTHORIZED, None);
            return Err(Box::new(refusal));
        }
        let request: Value = match serde_json::from_slice(body) {
            Ok(request) => request,
            Err(problem) => {
                shared.record(StatusCode::BAD_REQUEST, None);
                return Err(Box::new(error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("body is not JSON: {problem}"),
                )));
            }
        };
        let Some(model) = request["model"]
            .as_str()
            .and_then(|name| {
                shared
                    .settings
                    .models
                    .iter()
                    .find(|model| model.name == name || model.version == name)
            })
            .cloned()
        else {
            shared.record(StatusCode::NOT_FOUND, None);
            return Err(Box::new(error(
                StatusCode::NOT_FOUND,
                "not_found_error",
                "the model does not exist",
            )));
        };
        let Some(messages) = request["messages"]
            .as_array()
            .filter(|messages| !messages.is_empty())
        else {
            shared.record(StatusCode::BAD_REQUEST, None);
            return Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "messages is required",
            )));
        };
        let prompt = messages
            .iter()
            .rev()
            .find(|message| message["role"] == "user")
            .and_then(|message| message["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        let prompt_tokens: u64 = messages
            .iter()
            .filter_map(|message| message["content"].as_str())
            .map(tokens)
            .sum();
        Ok(ChatRequest {
            model,
            prompt,
            prompt_tokens,
            seed: request["seed"].as_u64().unwrap_or(0),
            stream: request["stream"].as_bool().unwrap_or(false),
            include_usage: request["stream_options"]["include_usage"]
                .as_bool()
                .unwrap_or(false),
        })
    }
}

/// The error response of a fault that refuses the request outright (and
/// records it); `None` for the faults that answer, or none.
fn refused_by_fault(shared: &Shared, fault: Option<Fault>, body_hash: u64) -> Option<Response> {
    match fault {
        Some(Fault::RateLimit) => {
            shared.record(StatusCode::TOO_MANY_REQUESTS, fault);
            let mut response = error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "rate limit reached",
            );
            shared.refused(
                body_hash,
                Some(Duration::from_secs(shared.settings.faults.retry_after_s)),
            );
            let retry_after = shared.settings.faults.retry_after_s.to_string();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&retry_after).expect("digits"),
            );
            Some(response)
        }
        Some(Fault::ServerError) => {
            shared.record(StatusCode::INTERNAL_SERVER_ERROR, fault);
            Some(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the server had an error",
            ))
        }
        Some(Fault::Unavailable) => {
            shared.record(StatusCode::SERVICE_UNAVAILABLE, fault);
            Some(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the engine is overloaded",
            ))
        }
        Some(Fault::BadRequest) => {
            shared.record(StatusCode::BAD_REQUEST, fault);
            shared.refused(body_hash, None);
            Some(error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "the request was refused",
            ))
        }
        _ => None,
    }
}

/// A piece of a response: a delay before it, then its bytes, or an error
/// that drops the connection.
type Piece = (Duration, Result<String, ()>);

/// The answer to send and its timing.
struct Reply {
    id: String,
    model_version: String,
    text: String,
    usage: Value,
    completion_tokens: u64,
    first_delay: Duration,
    /// Seconds per token.
    per_token: f64,
}

impl Reply {
    fn new(
        shared: &Shared,
        request: &ChatRequest,
        number: u64,
        fault: Option<Fault>,
        text: String,
    ) -> Reply {
        let settings = &shared.settings;
        let completion_tokens = tokens(&text);
        let prompt_tokens = request.prompt_tokens;
        let sigma = settings.latency_sigma;
        let first_delay = (settings.ttft_ms as f64
            * lognormal_factor(settings.seed, number, 0, sigma))
        .round() as u64
            + if fault == Some(Fault::SlowFirstToken) {
                settings.faults.slow_first_token_ms
            } else {
                0
            };
        let per_token = if settings.tokens_per_second > 0.0 {
            1.0 / (settings.tokens_per_second * lognormal_factor(settings.seed, number, 1, sigma))
        } else {
            0.0
        };
        Reply {
            id: format!("chatcmpl-sim-{}-{number}", shared.instance),
            model_version: request.model.version.clone(),
            text,
            usage: json!({
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": 0}
            }),
            completion_tokens,
            first_delay: Duration::from_millis(first_delay),
            per_token,
        }
    }

    /// Server-sent events: the role, four characters a chunk, the finish,
    /// the usage when asked for, `[DONE]`; each fault where it strikes.
    fn streamed(
        &self,
        settings: &SimSettings,
        fault: Option<Fault>,
        include_usage: bool,
    ) -> Vec<Piece> {
        let (id, model) = (&self.id, &self.model_version);
        let chunk = |delta: Value, finish: Value| {
            let body = json!({
                "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            });
            format!("data: {body}\n\n")
        };
        let mut pieces: Vec<Piece> = vec![(
            self.first_delay,
            Ok(chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )),
        )];
        let characters: Vec<char> = self.text.chars().collect();
        let parts: Vec<String> = characters
            .chunks(4)
            .map(|part| part.iter().collect())
            .collect();
        // A stall strikes after the first token: halfway through the text,
        // or before the finish of a text of one chunk.
        let stall_at = (parts.len() / 2).max(1);
        let stall = Duration::from_millis(settings.faults.stall_ms);
        for (index, part) in parts.iter().enumerate() {
            let mut delay = Duration::from_secs_f64(self.per_token);
            if fault == Some(Fault::Stall) && index == stall_at {
                delay += stall;
            }
            if fault == Some(Fault::MalformedChunk) && index == parts.len() / 2 {
                pieces.push((
                    Duration::ZERO,
                    Ok("data: {\"choices\": [{\"delta\": {\"content\"\n\n".to_owned()),
                ));
            }
            pieces.push((delay, Ok(chunk(json!({"content": part}), Value::Null))));
            if fault == Some(Fault::Reset) && index == 0 {
                pieces.push((Duration::ZERO, Err(())));
            }
        }
        if fault != Some(Fault::CutStream) {
            let before_finish = if fault == Some(Fault::Stall) && stall_at >= parts.len() {
                stall
            } else {
                Duration::ZERO
            };
            pieces.push((before_finish, Ok(chunk(json!({}), json!("stop")))));
            if include_usage && fault != Some(Fault::MissingUsage) {
                let body = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": self.usage});
                pieces.push((Duration::ZERO, Ok(format!("data: {body}\n\n"))));
            }
            pieces.push((Duration::ZERO, Ok("data: [DONE]\n\n".to_owned())));
        }
        pieces
    }

    /// One JSON body after the whole generation; each fault where it strikes.
    fn whole(&self, settings: &SimSettings, fault: Option<Fault>) -> Vec<Piece> {
        let mut body = json!({
            "id": self.id, "object": "chat.completion", "created": 0, "model": self.model_version,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": "stop"}],
            "usage": self.usage
        });
        if fault == Some(Fault::MissingUsage) {
            body.as_object_mut().expect("an object").remove("usage");
        }
        let mut body = body.to_string();
        if fault == Some(Fault::MalformedChunk) || fault == Some(Fault::CutStream) {
            body.truncate(body.len() / 2);
        }
        let generation = Duration::from_secs_f64(self.per_token * self.completion_tokens as f64);
        let stall = if fault == Some(Fault::Stall) {
            Duration::from_millis(settings.faults.stall_ms)
        } else {
            Duration::ZERO
        };
        if fault == Some(Fault::Reset) {
            vec![
                (self.first_delay, Ok(body[..body.len() / 2].to_owned())),
                (Duration::ZERO, Err(())),
            ]
        } else {
            vec![(self.first_delay + generation + stall, Ok(body))]
        }
    }
}

/// The pieces sent as their delays come (held while the sim is paused); a
/// response that ends whole marks its prompt completed. Delays add up to
/// each piece's due time from the first poll, and every piece already due
/// goes out in one chunk: a timer per token would round each token's few
/// microseconds up to the timer's millisecond, so a fast simulated model
/// would answer slower than the code it is meant to measure.
fn timed_body(
    shared: Arc<Shared>,
    pieces: Vec<Piece>,
    finishes: bool,
    completed_key: String,
) -> Body {
    struct Paced {
        pieces: std::iter::Peekable<std::vec::IntoIter<Piece>>,
        started: Option<tokio::time::Instant>,
        due: Duration,
        failed: bool,
    }
    let paced = Paced {
        pieces: pieces.into_iter().peekable(),
        started: None,
        due: Duration::ZERO,
        failed: false,
    };
    let body = futures_util::stream::unfold(paced, move |mut paced| {
        let shared = shared.clone();
        let completed_key = completed_key.clone();
        async move {
            if paced.failed {
                return None;
            }
            let Some((delay, piece)) = paced.pieces.next() else {
                if finishes {
                    shared.completed(completed_key);
                }
                return None;
            };
            while shared.paused.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let started = *paced.started.get_or_insert_with(tokio::time::Instant::now);
            paced.due += delay;
            tokio::time::sleep_until(started + paced.due).await;
            let mut bytes = match piece {
                Ok(bytes) => bytes,
                Err(()) => {
                    paced.failed = true;
                    return Some((
                        Err(std::io::Error::other("connection reset by the simulator")),
                        paced,
                    ));
                }
            };
            // Every later piece already due joins this chunk.
            while let Some((delay, Ok(_))) = paced.pieces.peek() {
                if started + paced.due + *delay > tokio::time::Instant::now() {
                    break;
                }
                paced.due += *delay;
                if let Some((_, Ok(more))) = paced.pieces.next() {
                    bytes.push_str(&more);
                }
            }
            Some((Ok::<Bytes, std::io::Error>(Bytes::from(bytes)), paced))
        }
    });
    Body::from_stream(body)
}

#[cfg(test)]
mod tests {
    use super::lognormal_factor;

    #[test]
    fn latencies_spread_log_normally_around_their_median() {
        assert_eq!(lognormal_factor(1, 7, 0, 0.0), 1.0);
        let logs: Vec<f64> = (0..20_000)
            .map(|request| lognormal_factor(3, request, 0, 0.5).ln())
            .collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let spread =
            (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!(mean.abs() < 0.02, "median factor e^{mean}");
        assert!((spread - 0.5).abs() < 0.02, "σ {spread}");
        assert_ne!(
            lognormal_factor(3, 5, 0, 0.5),
            lognormal_factor(3, 5, 1, 0.5)
        );
    }
}
