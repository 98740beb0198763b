//! Starting serve: the config and every artifact it pins verified, the
//! records opened, the listener bound and the signal handlers installed
//! before anyone is told where it listens; then serving until a stop.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use anyhow::Context;

use crate::clock::{Clock, SystemClock};

use super::app::App;
use super::deployed::{self, Deployed, Sources, StartExpired, load};
use super::keys::Keys;
use super::log::{self, Log};
use super::options::ServeOptions;
use super::settings::Settings;
use super::{
    admission, connections, draws, journal, metrics, reload, resilience, stack, stop, trace,
};

/// Refusals for want of a valid key journaled per second at most; the rest
/// are counted in `/metrics` only, so a client with no key cannot fill the
/// records disk.
const UNAUTHORIZED_RECORDS_PER_SECOND: u32 = 20;

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

/// What `serve --check` found: everything serve would load at start,
/// loaded and checked, with nothing bound, locked or written.
#[derive(Debug)]
pub struct Checked {
    pub deployed: Deployed,
    /// The `--shadow` candidate's version, where one was given.
    pub shadow_version: Option<u64>,
    pub keys: usize,
}

/// Loads what a start would load, in the order it would (the public key,
/// the config with its signature, expiry, router pin and routes' key
/// variables, the shadow, the keys file, the records directory and the
/// version it last served), and refuses as a start would; listens on
/// nothing, locks and writes nothing. A deploy runs it before it points
/// serve at a new config.
pub fn check(options: &ServeOptions) -> anyhow::Result<Checked> {
    let public = crate::routes::load_public(&options.public_key)?;
    let clock = SystemClock;
    let deployed = deployed::load_at_start(
        &options.sources,
        &public,
        &clock,
        None,
        Some(options.start_expired),
    )?;
    let shadow = options
        .shadow
        .as_ref()
        .map(|path| load_shadow(options, path, &public, &clock, &deployed))
        .transpose()?;
    let keys = Keys::load(&options.keys)?;
    journal::check_directory(&options.records)?;
    deployed::check_not_rolled_back(&options.records, &options.sources.config, &deployed)?;
    Ok(Checked {
        shadow_version: shadow.map(|shadow| shadow.config.version),
        keys: keys.len(),
        deployed,
    })
}

/// A start on an expired config says which rule let it start.
fn log_started_expired(log: &Log, deployed: &Deployed, rule: StartExpired) {
    let serving = match rule {
        StartExpired::Always => "--expired start serves it".to_owned(),
        StartExpired::Within { grace_s } => {
            format!("within --expired-grace-s {grace_s} of its expiry, this start serves it")
        }
    };
    reload::log_expired(log, deployed, &serving);
}

/// Serves until SIGINT or SIGTERM; `ready` is told the bound address.
pub fn serve(
    options: &ServeOptions,
    ready: impl FnOnce(SocketAddr, &Deployed),
) -> anyhow::Result<()> {
    let log = Arc::new(Log::to_stderr(options.log));
    // An error is the command's one line on stderr, after every log line.
    let served = serve_logged(options, ready, &log);
    log.flush();
    served
}

fn serve_logged(
    options: &ServeOptions,
    ready: impl FnOnce(SocketAddr, &Deployed),
    log: &Arc<Log>,
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
        Some(options.start_expired),
    )?;
    if deployed.expired(clock.as_ref()) {
        log_started_expired(log, &deployed, options.start_expired);
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
        .tracing
        .as_ref()
        .map(|settings| trace::Tracing::start(settings, runtime.handle().clone()))
        .transpose()?;
    let listener = listen(options.listen, "--listen")?;
    let address = listener.local_addr()?;
    let admin = options
        .admin_listen
        .map(|admin| listen(admin, "--admin-listen"))
        .transpose()?;
    let (journal, writer) = open_records(options, &deployed, log)?;
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let deployed_table = deployed.config.table.clone();
    let app = Arc::new(App {
        settings: settings_of(options, started_ms),
        deployed: RwLock::new(Arc::new(deployed)),
        refused_reload: std::sync::Mutex::new(None),
        open_connections: connections::OpenConnections::default(),
        shadow,
        keys: RwLock::new(Arc::new(keys)),
        clock,
        http,
        journal,
        unauthorized: super::app::RecordRate::new(UNAUTHORIZED_RECORDS_PER_SECOND),
        metrics: metrics::Metrics::default(),
        admission: admission::Admission::new(options.limits),
        resilience: resilience::Resilience::new(options.budget, &deployed_table, log.clone()),
        log: log.clone(),
        tracing,
        requests: AtomicU64::new(0),
        draws: draws::Draws::from_entropy(started_ms),
        notifier: super::notify::Notifier::from_environment(),
    });
    let Signals {
        stop,
        hangup: reload,
    } = Signals::install(&runtime)?;
    announce(&app, ready, address, &options.records, log);
    if let Some(admin) = &admin {
        log_admin_listening(log, admin.local_addr()?);
    }
    let stop = stop_told(stop, app.notifier.clone());
    let router = stack::request_path(&app);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let watcher = tokio::spawn(reload::watch(
            app.clone(),
            options.sources.clone(),
            public,
            loaded_fingerprint,
            options.records.clone(),
            options.keys.clone(),
            reload,
        ));
        let admin = admin.map(|admin| serve_admin(admin, &app)).transpose()?;
        let limits = (options.connections, app.open_connections.clone());
        connections::serve(listener, router, limits, stop, log).await;
        watcher.abort();
        if let Some(admin) = admin {
            admin.abort();
        }
        anyhow::Ok(())
    })?;
    stop::stop_serving(app, runtime, writer, log)
}

/// Serve is up: its line on stdout, the `started` log line, and `READY=1`
/// to systemd.
fn announce(
    app: &App,
    ready: impl FnOnce(SocketAddr, &Deployed),
    address: SocketAddr,
    records: &Path,
    log: &Log,
) {
    let deployed = app.current();
    ready(address, &deployed);
    log_started(log, &deployed, address, records);
    app.notifier
        .ready(&super::notify::serving_status(&deployed));
}

/// The stop signal, told to systemd (`STOPPING=1`) when it comes.
async fn stop_told(stop: impl std::future::Future<Output = ()>, notifier: super::notify::Notifier) {
    stop.await;
    notifier.stopping();
}

/// The `started` line: what is served, where, and where its records go.
fn log_started(log: &Log, deployed: &Deployed, address: SocketAddr, records: &Path) {
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

/// The records' journal, on a directory that never served a later version
/// than `deployed` (a rollback replayed by mistake), which it then
/// remembers.
fn open_records(
    options: &ServeOptions,
    deployed: &Deployed,
    log: &Arc<Log>,
) -> anyhow::Result<(journal::Journal, journal::JournalThread)> {
    journal::check_directory(&options.records)?;
    deployed::check_not_rolled_back(&options.records, &options.sources.config, deployed)?;
    let opened = journal::open(
        &options.records,
        options.roll,
        options.records_durability,
        log.clone(),
    )?;
    deployed::remember_served(&options.records, deployed)?;
    Ok(opened)
}

/// A listener on `address`, for the flag `flag` that named it.
fn listen(address: SocketAddr, flag: &str) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("{flag} {address}: cannot listen"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// `/metrics` and the probes on the admin listener, until aborted.
fn serve_admin(
    listener: std::net::TcpListener,
    app: &Arc<App>,
) -> anyhow::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let path = stack::admin_path(app);
    Ok(tokio::spawn(
        async move { axum::serve(listener, path).await },
    ))
}

/// Where `/metrics` and the probes are served apart from the traffic.
fn log_admin_listening(log: &Log, address: SocketAddr) {
    log.event(
        log::Level::Info,
        "admin_listening",
        format!("serving /metrics, /healthz and /readyz on http://{address}; the traffic port does not serve /metrics"),
    )
    .field("admin_listen", address.to_string())
    .emit();
}

/// The signals serve answers, their handlers installed before it says
/// where it listens: a stop or a reload sent the moment the address is
/// read is handled, not met by the default action (killed, its records
/// not rolled).
pub(super) struct Signals {
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

/// What serve keeps of its options for its life.
fn settings_of(options: &ServeOptions, started_ms: i64) -> Settings {
    Settings {
        trust_slice_header: options.trust_slice_header,
        strict_expiry: options.strict_expiry,
        max_body_bytes: options.max_body_bytes,
        body_timeout: options.body_timeout,
        records_fail_closed: options.records_fail_closed,
        timeouts: options.timeouts,
        records_prompts: options.records_prompts,
        started_ms,
        cors_origins: options.cors_origins.clone(),
        metrics_apart: options.admin_listen.is_some(),
    }
}
