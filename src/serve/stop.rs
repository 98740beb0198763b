//! Stopping serve: after the last connection, the last traces sent, the
//! runtime stopped, every record written, and the `stopped` line.

use std::sync::Arc;

use super::app::App;
use super::journal;
use super::log::{self, Log};

/// After the last connection: the last traces sent, the runtime stopped,
/// every record written, and the `stopped` line.
pub(super) fn stop_serving(
    app: Arc<App>,
    runtime: tokio::runtime::Runtime,
    writer: journal::JournalThread,
    log: &Arc<Log>,
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
