//! `routeval serve`: an OpenAI-compatible endpoint that serves a signed
//! route config exactly as it was gated. Before it listens it verifies the
//! config and every artifact it pins ([`deployed`]); each request passes
//! through [`layers`] (its id, then its key from the headers alone, on
//! every path but the probes and `/metrics`), is planned by the policy kernel
//! (constraints first, then the slice's thresholds on the pinned router's
//! score, or a cascade's stages and verifier), passed through to the
//! chosen route byte for byte ([`http`]), and written as one request record
//! ([`journal`]). SIGHUP or a change to the file reloads the config, which
//! must verify and follow the running one, or the running one keeps
//! serving. docs/serve.md says each behaviour exactly.

mod admission;
mod answer;
mod app;
mod assemble;
mod cascade;
mod connections;
mod decision;
mod deployed;
mod draws;
mod failure;
mod forward;
mod hedging;
mod http;
mod journal;
mod keys;
mod layers;
mod leaving;
mod log;
mod metrics;
mod reply;
mod resilience;
mod served;
mod sse;
mod trace;
mod turn;
mod upstream_error;
mod whole;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::routing::{get, post};

use crate::clock::{Clock, SystemClock};

pub use crate::policy::BudgetSettings;
pub use admission::Limits;
pub use app::Timeouts;
pub use connections::{ConnectionLimits, default_max_connections};
pub use decision::ROUTE_DECISION_SCHEMA_VERSION;
pub use deployed::{Deployed, LoadError, Sources, load};
pub use journal::{LOCK as RECORDS_LOCK, MAX_UNCOMMITTED};
pub use keys::{Identity, Keys};
pub use log::{LOG_SCHEMA_VERSION, Level as LogLevel, LogFormat, LogSettings};
pub use metrics::MAX_SLICE_LABELS;
pub use served::ServedRecord;

/// The largest request body serve reads, unless `--max-body-bytes` says.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

/// Refusals for want of a valid key journaled per second at most; the rest
/// are counted in `/metrics` only, so a client with no key cannot fill the
/// records disk.
const UNAUTHORIZED_RECORDS_PER_SECOND: u32 = 20;

/// How often the config file is looked at for a change.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// What a request's record keeps of its conversation (`--records-prompts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordsPrompts {
    /// The last user message and every message, as sent.
    Full,
    /// The same, with keys, tokens and assigned passwords replaced by
    /// `[redacted]` (the rules `sample` applies).
    Redacted,
    /// Neither: `prompt` and `messages` are null.
    None,
}

impl RecordsPrompts {
    /// Applies the choice to a record about to be journaled.
    fn apply(self, record: &mut ServedRecord) {
        match self {
            RecordsPrompts::Full => {}
            RecordsPrompts::None => {
                record.prompt = None;
                record.messages = None;
            }
            RecordsPrompts::Redacted => {
                if let Some(prompt) = &mut record.prompt {
                    *prompt = crate::records::redact(prompt).0.into();
                }
                if let Some(messages) = &mut record.messages {
                    *messages = redacted_json(messages).into();
                }
            }
        }
    }
}

/// `json` with the secrets in each of its strings redacted; text that is
/// not JSON is redacted as text.
fn redacted_json(json: &str) -> String {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => *text = crate::records::redact(text).0,
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(walk),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(mut value) => {
            walk(&mut value);
            value.to_string()
        }
        Err(_) => crate::records::redact(json).0,
    }
}

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub sources: Sources,
    pub public_key: String,
    pub keys: PathBuf,
    pub listen: SocketAddr,
    pub records: PathBuf,
    pub trust_slice_header: bool,
    pub strict_expiry: bool,
    pub max_body_bytes: usize,
    /// Records per Parquet part.
    pub roll_records: u64,
    /// Refuse requests (503) while the records cannot be written.
    pub records_fail_closed: bool,
    /// Start on a config that has expired (`--expired start`), as a running
    /// serve keeps serving one: not ready, and answering unless
    /// `strict_expiry`.
    pub start_expired: bool,
    /// Requests in flight at once, in total and per route.
    pub limits: admission::Limits,
    /// Client connections open at once, and how long one may say nothing.
    pub connections: ConnectionLimits,
    pub timeouts: Timeouts,
    /// The share of extra calls falling back may make.
    pub budget: BudgetSettings,
    /// A candidate config decided for every request, never served.
    pub shadow: Option<PathBuf>,
    /// What a record keeps of the conversation.
    pub records_prompts: RecordsPrompts,
    /// How serve logs, and whether each request gets a line.
    pub log: LogSettings,
    /// Where traces are exported (OTLP/HTTP), if anywhere.
    pub otlp_endpoint: Option<String>,
}

/// The `--shadow` candidate, checked as the served config is (its
/// signature, expiry and pins, with the same `--router`), for the same
/// logical model.
fn load_shadow(
    options: &ServeOptions,
    path: &std::path::Path,
    public: &minisign::PublicKey,
    clock: &dyn Clock,
    served: &Deployed,
) -> anyhow::Result<Arc<Deployed>> {
    let sources = Sources {
        config: path.to_owned(),
        ..options.sources.clone()
    };
    let shadow = load(&sources, public, clock, None).context("--shadow")?;
    let (theirs, ours) = (
        &shadow.config.table.logical_model,
        &served.config.table.logical_model,
    );
    if theirs != ours {
        anyhow::bail!(
            "--shadow {}: the candidate serves {theirs:?}, not {ours:?}",
            path.display()
        );
    }
    Ok(Arc::new(shadow))
}

/// Serves until SIGINT or SIGTERM; `ready` is told the bound address.
pub fn serve(
    options: &ServeOptions,
    ready: impl FnOnce(SocketAddr, &Deployed),
) -> anyhow::Result<()> {
    let log = Arc::new(log::Log::to_stderr(options.log));
    // An error is the command's one line on stderr, after every log line.
    let served = serve_logged(options, ready, &log);
    log.flush();
    served
}

fn serve_logged(
    options: &ServeOptions,
    ready: impl FnOnce(SocketAddr, &Deployed),
    log: &Arc<log::Log>,
) -> anyhow::Result<()> {
    let public = crate::routes::load_public(&options.public_key)?;
    let clock: Arc<dyn Clock + Send + Sync> = Arc::new(SystemClock);
    // Taken before the config is read: a change from here on is reloaded.
    let loaded_fingerprint = deployed::fingerprint(&options.sources.config);
    let deployed = deployed::load_at_start(
        &options.sources,
        &public,
        clock.as_ref(),
        None,
        options.start_expired,
    )?;
    if deployed.expired(clock.as_ref()) {
        log_expired(log, &deployed, "--expired start serves it");
    }
    let shadow = options
        .shadow
        .as_ref()
        .map(|path| load_shadow(options, path, &public, clock.as_ref(), &deployed))
        .transpose()?;
    let keys = Keys::load(&options.keys)?;
    let http = crate::client::proxy_client(256)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let tracing = options
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| trace::Tracing::start(endpoint, runtime.handle().clone()))
        .transpose()?;
    let listener = std::net::TcpListener::bind(options.listen)
        .with_context(|| format!("--listen {}: cannot listen", options.listen))?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    journal::check_directory(&options.records)?;
    deployed::check_not_rolled_back(&options.records, &options.sources.config, &deployed)?;
    let (journal, writer) = journal::open(&options.records, options.roll_records, log.clone())?;
    deployed::remember_served(&options.records, &deployed)?;
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let deployed_table = deployed.config.table.clone();
    let app = Arc::new(app::App {
        deployed: RwLock::new(Arc::new(deployed)),
        shadow,
        keys: RwLock::new(Arc::new(keys)),
        trust_slice_header: options.trust_slice_header,
        strict_expiry: options.strict_expiry,
        clock,
        http,
        journal,
        max_body_bytes: options.max_body_bytes,
        records_fail_closed: options.records_fail_closed,
        unauthorized: app::RecordRate::new(UNAUTHORIZED_RECORDS_PER_SECOND),
        metrics: metrics::Metrics::default(),
        admission: admission::Admission::new(options.limits),
        timeouts: options.timeouts,
        resilience: resilience::Resilience::new(options.budget, &deployed_table, log.clone()),
        records_prompts: options.records_prompts,
        log: log.clone(),
        tracing,
        requests: AtomicU64::new(0),
        draws: draws::Draws::from_entropy(started_ms),
        started_ms,
    });
    let Signals {
        stop,
        hangup: reload,
    } = Signals::install(&runtime)?;
    ready(address, &app.current());
    log_started(log, &app.current(), address, &options.records);
    let router = request_path(&app);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let watcher = tokio::spawn(watch(
            app.clone(),
            options.sources.clone(),
            public,
            loaded_fingerprint,
            options.records.clone(),
            options.keys.clone(),
            reload,
        ));
        connections::serve(listener, router, options.connections, stop, log).await;
        watcher.abort();
        anyhow::Ok(())
    })?;
    stop_serving(app, runtime, writer, log)
}

/// After the last connection: the last traces sent, the runtime stopped,
/// every record written, and the `stopped` line.
fn stop_serving(
    app: Arc<app::App>,
    runtime: tokio::runtime::Runtime,
    writer: journal::JournalThread,
    log: &Arc<log::Log>,
) -> anyhow::Result<()> {
    // The last traces go out on the runtime, before it stops.
    if let Some(tracing) = &app.tracing
        && let Err(error) = tracing.shutdown()
    {
        log.event(log::Level::Warn, "traces_lost", format!("{error:#}"))
            .emit();
    }
    drop(runtime);
    let health = app.journal.health.clone();
    drop(app);
    writer.finish()?;
    log.event(
        log::Level::Info,
        "stopped",
        "every request answered and its record written",
    )
    .field(
        "records_dropped",
        health.dropped.load(std::sync::atomic::Ordering::Relaxed),
    )
    .emit();
    Ok(())
}

/// The `started` line: what is served, where, and where its records go.
fn log_started(log: &log::Log, deployed: &Deployed, address: SocketAddr, records: &Path) {
    log.event(
        log::Level::Info,
        "started",
        format!(
            "serving {} ({} version {}) on http://{address}/v1",
            deployed.config.table.logical_model, deployed.config.config_id, deployed.config.version
        ),
    )
    .field("config_id", deployed.config.config_id.clone())
    .field("config_version", deployed.config.version)
    .field("config_sha256", deployed.sha256.clone())
    .field("expires_at", deployed.config.expires_at.clone())
    .field("listen", address.to_string())
    .field("records", records.display().to_string())
    .emit();
}

/// The request path: the routes that need a key, behind the record's
/// ledger and authentication, then the ones that do not (the probes, the
/// metrics and the 404 that says what is served), every one behind the
/// request id.
fn request_path(app: &Arc<app::App>) -> axum::Router {
    let keyed = axum::Router::new()
        .route("/v1/chat/completions", post(http::chat))
        .route("/v1/route", post(decision::route))
        .route("/v1/models", get(http::models))
        .route("/v1/models/{id}", get(http::model))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            layers::authenticate,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            layers::record_once,
        ));
    keyed
        .route("/metrics", get(http::metrics))
        .route("/healthz", get(http::healthz))
        .route("/readyz", get(http::readyz))
        .fallback(http::not_served)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            layers::request_id,
        ))
        .with_state(app.clone())
}

/// The line an expired config gets: at a start with `--expired start`, and
/// once when a running serve's config passes its expiry.
fn log_expired(log: &log::Log, deployed: &Deployed, what: &str) {
    log.event(
        log::Level::Warn,
        "config_expired",
        format!(
            "the signed config {} version {} expired at {}; {what}, and /readyz answers not ready until a newer version is loaded",
            deployed.config.config_id, deployed.config.version, deployed.config.expires_at
        ),
    )
    .field("config_id", deployed.config.config_id.clone())
    .field("config_version", deployed.config.version)
    .field("expires_at", deployed.config.expires_at.clone())
    .emit();
}

/// The signals serve answers, their handlers installed before it says
/// where it listens: a stop or a reload sent the moment the address is
/// read is handled, not met by the default action (killed, its records
/// not rolled).
struct Signals {
    /// SIGTERM or SIGINT: stop taking requests, answer the ones in flight.
    stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// SIGHUP: reload the config and the keys.
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install(runtime: &tokio::runtime::Runtime) -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        let _entered = runtime.enter();
        let mut terminate = signal(SignalKind::terminate()).context("a SIGTERM handler")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("a SIGINT handler")?;
        let hangup = signal(SignalKind::hangup()).context("a SIGHUP handler")?;
        Ok(Signals {
            stop: Box::pin(async move {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }),
            hangup,
        })
    }
}

/// The keys file's identity for the reload watch: its length and
/// modification time.
fn keys_fingerprint(path: &std::path::Path) -> Option<(u64, std::time::SystemTime)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.len(), metadata.modified().ok()?))
}

/// Loads the keys file again and puts it in place whole; a file that does
/// not load is logged and counted, and the running keys stay.
fn reload_keys(app: &app::App, path: &std::path::Path) {
    match Keys::load(path) {
        Ok(keys) => {
            app.log
                .event(
                    log::Level::Info,
                    "keys_reloaded",
                    format!("reloaded {}: {} keys", path.display(), keys.len()),
                )
                .field("file", path.display().to_string())
                .field("keys", keys.len())
                .emit();
            *app.keys.write().expect("unpoisoned") = Arc::new(keys);
            app.metrics.keys_reload("applied");
        }
        Err(refusal) => {
            app.log
                .event(
                    log::Level::Error,
                    "keys_reload_refused",
                    format!("keys reload refused, the running keys stay: {refusal:#}"),
                )
                .field("file", path.display().to_string())
                .emit();
            app.metrics.keys_reload("refused");
        }
    }
}

/// Loads the changed config: applied when every check passes (and
/// remembered beside the records), else logged and counted, with the
/// running one serving on.
fn reload_config(
    app: &app::App,
    sources: &Sources,
    public: &minisign::PublicKey,
    running: &Deployed,
    records: &Path,
) {
    match load(sources, public, app.clock.as_ref(), Some(running)) {
        Ok(next) => {
            app.log
                .event(
                    log::Level::Info,
                    "config_reloaded",
                    format!(
                        "reloaded {}: {} version {} (sha256 {})",
                        sources.config.display(),
                        next.config.config_id,
                        next.config.version,
                        next.sha256
                    ),
                )
                .field("file", sources.config.display().to_string())
                .field("config_id", next.config.config_id.clone())
                .field("config_version", next.config.version)
                .field("config_sha256", next.sha256.clone())
                .field("previous_version", running.config.version)
                .emit();
            if let Err(error) = deployed::remember_served(records, &next) {
                app.log
                    .event(
                        log::Level::Error,
                        "records_write_failed",
                        format!("{error:#}"),
                    )
                    .emit();
            }
            app.resilience.follow(&next.config.table);
            *app.deployed.write().expect("unpoisoned") = Arc::new(next);
            app.metrics.reload("applied");
        }
        Err(refusal) => {
            app.log
                .event(
                    log::Level::Error,
                    "config_reload_refused",
                    format!(
                        "reload refused, version {} keeps serving: {refusal}",
                        running.config.version
                    ),
                )
                .field("file", sources.config.display().to_string())
                .field("config_version", running.config.version)
                .emit();
            app.metrics.reload("refused");
        }
    }
}

/// Reloads on SIGHUP and when the config or its signature changes; a
/// refused config is logged and counted, and the running one keeps serving.
/// The keys file is reloaded on SIGHUP and when it changes, by the same
/// rule.
async fn watch(
    app: Arc<app::App>,
    sources: Sources,
    public: minisign::PublicKey,
    mut seen: Option<deployed::Fingerprint>,
    records: PathBuf,
    keys: PathBuf,
    mut hangup: tokio::signal::unix::Signal,
) {
    let mut keys_seen = keys_fingerprint(&keys);
    // The sha256 of the config whose expiry has been logged.
    let mut expiry_told = app
        .current()
        .expired(app.clock.as_ref())
        .then(|| app.current().sha256.clone());
    loop {
        let asked = tokio::select! {
            _ = hangup.recv() => true,
            () = tokio::time::sleep(WATCH_INTERVAL) => false,
        };
        let running = app.current();
        if running.expired(app.clock.as_ref()) && expiry_told.as_deref() != Some(&running.sha256) {
            expiry_told = Some(running.sha256.clone());
            let what = if app.strict_expiry {
                "--strict-expiry refuses every request (503)"
            } else {
                "serve goes on answering with it"
            };
            log_expired(&app.log, &running, what);
        }
        let keys_now = keys_fingerprint(&keys);
        if asked || keys_now != keys_seen {
            keys_seen = keys_now;
            reload_keys(&app, &keys);
        }
        let now = deployed::fingerprint(&sources.config);
        if !asked && now == seen {
            continue;
        }
        seen = now;
        let running = app.current();
        let unchanged = std::fs::read(&sources.config)
            .is_ok_and(|bytes| crate::digest::sha256_hex(&bytes) == running.sha256);
        if unchanged {
            if asked {
                app.log
                    .event(
                        log::Level::Info,
                        "config_unchanged",
                        format!(
                            "SIGHUP: {} is unchanged; version {} keeps serving",
                            sources.config.display(),
                            running.config.version
                        ),
                    )
                    .field("file", sources.config.display().to_string())
                    .field("config_version", running.config.version)
                    .emit();
            }
            continue;
        }
        reload_config(&app, &sources, &public, &running, &records);
    }
}
