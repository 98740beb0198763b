//! What every request of one serve shares ([`App`]): the settings it was
//! started with, apart from the live state (the deployed config, the keys,
//! the journal, the metrics, admission and resilience); and a request's id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::extract::Request;

use crate::clock::Clock;

use super::admission::Admission;
use super::deployed::Deployed;
use super::journal::Journal;
use super::keys::Keys;
use super::log::Log;
use super::metrics::Metrics;
use super::resilience::Resilience;
use super::settings::Settings;

/// What every request shares: the settings, and the live state.
pub struct App {
    pub settings: Settings,
    /// The served config, replaced whole when a reload is applied.
    pub deployed: RwLock<Arc<Deployed>>,
    /// Why the last reload was refused, while no later one was applied:
    /// `/readyz` and `routeval_config_reload_refused` say so.
    pub refused_reload: std::sync::Mutex<Option<String>>,
    /// The client connections open now.
    pub open_connections: super::connections::OpenConnections,
    /// The `--shadow` candidate, decided for every request and never served.
    pub shadow: Option<Arc<Deployed>>,
    /// The clients' keys, replaced whole when the file reloads.
    pub keys: RwLock<Arc<Keys>>,
    pub clock: Arc<dyn Clock + Send + Sync>,
    pub http: reqwest::Client,
    pub journal: Journal,
    /// How many refusals for want of a valid key are journaled.
    pub unauthorized: RecordRate,
    pub metrics: Metrics,
    pub admission: Admission,
    pub resilience: Resilience,
    /// Requests named by serve so far.
    pub requests: AtomicU64,
    /// The random numbers of exploration draws.
    pub draws: super::draws::Draws,
    pub log: Arc<Log>,
    /// `--otlp-endpoint`: where traces go, if anywhere.
    pub tracing: Option<super::trace::Tracing>,
    /// systemd's notification socket, if serve runs under it.
    pub notifier: super::notify::Notifier,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("settings", &self.settings)
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

impl App {
    pub fn current(&self) -> Arc<Deployed> {
        self.deployed.read().expect("unpoisoned").clone()
    }

    pub fn keys(&self) -> Arc<Keys> {
        self.keys.read().expect("unpoisoned").clone()
    }

    pub(super) fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// At most so many records a second; the rest counted as dropped.
#[derive(Debug)]
pub struct RecordRate {
    per_second: u32,
    /// The second being counted, and how many it has journaled.
    window: std::sync::Mutex<(i64, u32)>,
    pub dropped: AtomicU64,
}

impl RecordRate {
    pub fn new(per_second: u32) -> RecordRate {
        RecordRate {
            per_second,
            window: std::sync::Mutex::new((i64::MIN, 0)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether a record made at `now_ms` may be journaled.
    pub(super) fn take(&self, now_ms: i64) -> bool {
        let mut window = self.window.lock().expect("unpoisoned");
        let second = now_ms.div_euclid(1000);
        if window.0 != second {
            *window = (second, 0);
        }
        if window.1 < self.per_second {
            window.1 = window.1.saturating_add(1);
            true
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// The header that names a request, in both directions and upstream.
pub const REQUEST_ID: &str = "x-request-id";

/// A request's id: the one its client sent in `x-request-id` where it is
/// a plain token, else serve's own, unique in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The id the request-id layer gave a request.
pub(super) fn id_of(request: &Request) -> String {
    request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.0.clone())
        .expect("every request passes the request-id layer")
}
