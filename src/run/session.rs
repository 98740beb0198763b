//! A whole run, as `routeval run` and a library caller start it: the
//! runtime, the handlers that turn SIGTERM and Ctrl-C into a clean stop,
//! the config and the run directory read (resuming what an interrupted run
//! saved), the endpoints checked, and every call made.

use std::path::Path;

use crate::client::{RunConfig, http_client};
use crate::clock::{Clock, SystemClock, format_rfc3339};
use crate::events::{Event, Level};

use super::connect::Connection;
use super::engine::execute;
use super::prepare::prepare;
use super::settings::RunSettings;
use super::summary::RunSummary;

/// Runs the config at `config_path` with `settings` to its end, or to a
/// signal's clean stop (an error, with every answered call saved).
pub fn run_to_end(config_path: &Path, settings: &RunSettings) -> anyhow::Result<RunSummary> {
    // The handlers first: a SIGTERM or Ctrl-C while the dataset is read or
    // the endpoints are checked stops the run as one during the calls does
    // (exit 2, nothing lost), not with the signal's default death.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut terminated, mut interrupted) = {
        use tokio::signal::unix::{SignalKind, signal};
        let _entered = runtime.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    let config = RunConfig::load(config_path)?;
    let connection = Connection::new(&config, &settings.rubrics)?;
    let clock = SystemClock;
    let prepared = prepare(&config, settings, &format_rfc3339(clock.now()))?;
    let reporter = settings.reporter.as_ref();
    if prepared.recovered.rows > 0 || prepared.recovered.torn > 0 {
        reporter.report(message(
            Level::Note,
            format!(
                "resuming: {} calls recovered from the journal of an interrupted run ({} cut short by the interruption will be sent again)",
                prepared.recovered.rows, prepared.recovered.torn
            ),
        ));
    }
    for (path, why) in prepared.quarantined() {
        reporter.report(message(
            Level::Warning,
            format!(
                "{}: unreadable ({why}); moved aside, its calls will be sent again",
                path.display()
            ),
        ));
    }
    let summary = runtime.block_on(async {
        let http = http_client(config.widest_concurrency())?;
        tokio::select! {
            checked = connection.check(&http) => checked?,
            _ = terminated.recv() => return Err(nothing_sent()),
            _ = interrupted.recv() => return Err(nothing_sent()),
        }
        let endpoints = connection.endpoints(&http);
        execute(&config, endpoints, settings, prepared, || {
            format_rfc3339(clock.now())
        })
        .await
    });
    // Dropping the runtime would wait for requests abandoned by an interrupt.
    runtime.shutdown_background();
    summary
}

/// A line the run says while it works.
pub fn message(level: Level, text: String) -> Event {
    Event::Message {
        stage: "run",
        level,
        text,
    }
}

/// A run stopped before its first call: nothing to keep, the same command
/// starts it again.
fn nothing_sent() -> anyhow::Error {
    crate::exit_codes::Interrupted("interrupted before the first call; nothing was sent".to_owned())
        .into()
}
