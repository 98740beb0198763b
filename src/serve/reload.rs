//! Reloading while serving: on SIGHUP and when the config, its signature,
//! the keys file or `--provider-keys` change, the new one verified and put
//! in place whole, or refused with the running one serving on; and the line
//! an expired config gets.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::app::App;
use super::deployed::{self, Deployed, Sources, load};
use super::keys::Keys;
use super::log;

/// How often the config file is looked at for a change.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// The line an expired config gets: at a start with `--expired start`, and
/// once when a running serve's config passes its expiry.
pub(super) fn log_expired(log: &log::Log, deployed: &Deployed, what: &str) {
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

/// The keys file's identity for the reload watch: the sha256 of its
/// content. A rotation that keeps the file's length and time (a key of
/// the same length, a config-management tool restoring the time) is a
/// change all the same: a revoked key must stop working.
fn keys_fingerprint(path: &std::path::Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| crate::digest::sha256_hex(&bytes))
}

/// Loads the keys file again and puts it in place whole; a file that does
/// not load is logged and counted, and the running keys stay.
fn reload_keys(app: &App, path: &std::path::Path) {
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

/// Reads `--provider-keys` again for the running config: a changed key is
/// put in place whole (requests in flight finish with the key they
/// started with); a file that does not read, or no longer names a route's
/// variable, is logged and counted, and the running keys stay.
fn reload_provider_keys(app: &App, sources: &Sources) {
    let Some(file) = &sources.provider_keys else {
        return;
    };
    let running = app.current();
    match running.with_keys_from(sources) {
        Ok(next) => {
            let rotated: Vec<String> = next
                .upstreams
                .iter()
                .filter(|(name, upstream)| {
                    running
                        .upstreams
                        .get(*name)
                        .is_none_or(|before| before.api_key != upstream.api_key)
                })
                .map(|(name, _)| name.clone())
                .collect();
            if rotated.is_empty() {
                return;
            }
            app.log
                .event(
                    log::Level::Info,
                    "provider_keys_reloaded",
                    format!(
                        "reloaded --provider-keys {}: {} now called with a new key",
                        file.display(),
                        rotated.join(", ")
                    ),
                )
                .field("file", file.display().to_string())
                .field("routes", rotated.join(","))
                .emit();
            *app.deployed.write().expect("unpoisoned") = Arc::new(next);
            app.metrics.provider_keys_reload("applied");
        }
        Err(refusal) => {
            app.log
                .event(
                    log::Level::Error,
                    "provider_keys_reload_refused",
                    format!("provider keys reload refused, the running keys stay: {refusal}"),
                )
                .field("file", file.display().to_string())
                .emit();
            app.metrics.provider_keys_reload("refused");
        }
    }
}

/// Loads the changed config: applied when every check passes (and
/// remembered beside the records), else logged and counted, with the
/// running one serving on.
fn reload_config(
    app: &App,
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
            if next.config.parent_sha256.as_deref() != Some(running.sha256.as_str()) {
                app.log
                    .event(
                        log::Level::Warn,
                        "config_versions_skipped",
                        format!(
                            "version {} does not follow the running version {} directly: the versions between were not served here",
                            next.config.version, running.config.version
                        ),
                    )
                    .field("config_version", next.config.version)
                    .field("previous_version", running.config.version)
                    .emit();
            }
            app.resilience.follow(&next.config.table);
            app.notifier.status(&super::notify::serving_status(&next));
            *app.deployed.write().expect("unpoisoned") = Arc::new(next);
            *app.refused_reload.lock().expect("unpoisoned") = None;
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
            *app.refused_reload.lock().expect("unpoisoned") =
                Some(format!("{}: {refusal}", sources.config.display()));
            app.metrics.reload("refused");
        }
    }
}

/// Reloads on SIGHUP and when the config or its signature changes; a
/// refused config is logged and counted, and the running one keeps serving.
/// The keys file is reloaded on SIGHUP and when it changes, by the same
/// rule.
pub(super) async fn watch(
    app: Arc<App>,
    sources: Sources,
    public: minisign::PublicKey,
    mut seen: Option<deployed::Fingerprint>,
    records: PathBuf,
    keys: PathBuf,
    mut hangup: tokio::signal::unix::Signal,
) {
    let mut keys_seen = keys_fingerprint(&keys);
    let provider_keys_now = |sources: &Sources| {
        sources
            .provider_keys
            .as_deref()
            .and_then(super::provider_keys::fingerprint)
    };
    let mut provider_keys_seen = provider_keys_now(&sources);
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
            let what = if app.settings.strict_expiry {
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
        let provider_keys = provider_keys_now(&sources);
        if asked || provider_keys != provider_keys_seen {
            provider_keys_seen = provider_keys;
            reload_provider_keys(&app, &sources);
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
