//! `routeval replay fallback` as a whole: the records of a route replayed
//! under each gateway policy, the breaker searched for, and the route table
//! with the chosen breaker written into it.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::{
    BreakerBounds, FallbackLatency, calibrate_breaker, load_fallback_inputs, replay_fallback,
    standard_policies,
};
use crate::routes::{RouteBreaker, RouteTable};
use crate::schema::{FALLBACK_SCHEMA_VERSION, FallbackDocument, InputFile, Learning};
use crate::units::{NonNegative, Positive, Proportion};

/// A fallback replay: each bounded value checked when it was made, and
/// `routes` given with `write_routes`.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackOptions {
    pub records: PathBuf,
    /// The primary route.
    pub route: String,
    /// The fallback route, whose records give its latency.
    pub fallback: Option<String>,
    /// A constant first token for every fallback, instead of its records.
    pub fallback_ttft_ms: Option<NonNegative>,
    /// The route table: the fallback's capacity, and where the chosen
    /// breaker is written.
    pub routes: Option<PathBuf>,
    pub deadline_ms: Positive,
    pub open_ms: Positive,
    pub open_after: NonZeroU32,
    pub learning: Learning,
    /// Search for the breaker's deadline and failure count.
    pub calibrate: bool,
    pub retry_budget: Proportion,
    pub max_fallback_share: Proportion,
    /// Where the route table with the chosen breaker is to go
    /// (`--write-routes`, a new file): the replay makes its text, and names
    /// the file in its errors.
    pub write_routes: Option<PathBuf>,
}

/// What a fallback replay found, and the route table text to write.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackReplay {
    pub document: FallbackDocument,
    /// With `write_routes`: the route table with the chosen breaker on the
    /// primary route, every other line as it was.
    pub routes_written: Option<String>,
}

impl FallbackReplay {
    /// Writes the document to `out` and the route table to `write_routes`
    /// (where given), both staged before either lands: a failure leaves
    /// neither.
    pub fn write(&self, out: Option<&Path>, write_routes: Option<&Path>) -> anyhow::Result<()> {
        let mut staged = Vec::new();
        if let Some(out) = out {
            let encoded = serde_json::to_string_pretty(&self.document)
                .context("cannot encode the document")?
                + "\n";
            staged.push(
                stage(out, encoded.as_bytes())
                    .with_context(|| format!("{}: cannot write (--out)", out.display()))?,
            );
        }
        if let (Some(written), Some(updated)) = (write_routes, &self.routes_written) {
            staged.push(stage(written, updated.as_bytes()).with_context(|| {
                format!("{}: cannot write (--write-routes)", written.display())
            })?);
        }
        crate::atomic::commit_all(staged)
    }
}

fn stage(path: &Path, bytes: &[u8]) -> anyhow::Result<crate::atomic::Staged> {
    use std::io::Write;
    crate::atomic::Staged::new(path, |file| Ok(file.write_all(bytes)?))
}

/// Replays the records of `options.route` under each standard policy (and
/// the breaker search with `calibrate`).
pub fn fallback(options: &FallbackOptions) -> anyhow::Result<FallbackReplay> {
    let table = options
        .routes
        .as_deref()
        .map(RouteTable::load)
        .transpose()?;
    let table_path = || options.routes.as_deref().expect("a table").display();
    let capacity = match (&table, &options.fallback) {
        (Some(table), Some(name)) => {
            let route = table
                .routes
                .iter()
                .find(|route| &route.name == name)
                .with_context(|| {
                    format!("{}: no route named {name:?} (--fallback)", table_path())
                })?;
            Some(route.rpm as f64 / 60.0)
        }
        _ => None,
    };
    if let Some(table) = &table
        && !table.routes.iter().any(|route| route.name == options.route)
    {
        bail!(
            "{}: no route named {:?} (--route)",
            table_path(),
            options.route
        );
    }
    let inputs = load_fallback_inputs(
        &options.records,
        &options.route,
        options.fallback.as_deref(),
    )?;
    let (requests, rows) = (&inputs.requests, inputs.rows);
    let latency = match options.fallback_ttft_ms {
        Some(ms) => FallbackLatency::Constant(ms.get()),
        None => FallbackLatency::Recorded(inputs.fallback_points.clone()),
    };
    let policies = standard_policies(
        options.open_after.get(),
        options.open_ms.get(),
        options.deadline_ms.get(),
    );
    let calibration = options.calibrate.then(|| {
        calibrate_breaker(
            requests,
            &latency,
            options.open_ms.get(),
            BreakerBounds {
                max_fallback_share: options.max_fallback_share.get(),
                retry_budget: options.retry_budget.get(),
                fallback_capacity_per_s: capacity,
            },
            options.learning,
        )
    });
    let document = FallbackDocument {
        schema_version: FALLBACK_SCHEMA_VERSION,
        kind: "fallback".to_owned(),
        records: InputFile::of_file(&options.records, rows)?,
        route: options.route.clone(),
        fallback_route: options.fallback.clone(),
        fallback_ttft_ms: options.fallback_ttft_ms.map(NonNegative::get),
        fallback_latency: options
            .fallback_ttft_ms
            .is_none()
            .then_some(inputs.latency_source),
        learning: options.learning,
        fallback_capacity_per_s: capacity,
        retry_budget: options.retry_budget.get(),
        policies: replay_fallback(requests, &latency, &policies, options.learning),
        calibration,
    };
    let routes_written = options
        .write_routes
        .as_deref()
        .map(|written| with_chosen_breaker(options, &document, written))
        .transpose()?;
    Ok(FallbackReplay {
        document,
        routes_written,
    })
}

/// The route table with the chosen breaker written into the primary route.
fn with_chosen_breaker(
    options: &FallbackOptions,
    document: &FallbackDocument,
    written: &Path,
) -> anyhow::Result<String> {
    let source = options
        .routes
        .as_deref()
        .expect("--write-routes requires --routes");
    let chosen = document
        .calibration
        .as_ref()
        .and_then(|calibration| calibration.chosen.as_ref())
        .with_context(|| {
            format!(
                "{}: no breaker keeps within --max-fallback-share {}, --retry-budget {} and the fallback's rpm; nothing written",
                written.display(),
                options.max_fallback_share,
                options.retry_budget
            )
        })?;
    let breaker = RouteBreaker {
        first_token_deadline_ms: chosen.first_token_deadline_ms,
        open_after: chosen.open_after,
        open_ms: options.open_ms.get(),
    };
    let text = std::fs::read_to_string(source)
        .with_context(|| format!("{}: cannot read (--routes)", source.display()))?;
    let updated = breaker
        .written_into(&text, &options.route)
        .map_err(|problem| anyhow::anyhow!("{}: {problem}", source.display()))?;
    // The table written must load as the one read did.
    let check: RouteTable = toml::from_str(&updated)
        .with_context(|| format!("{}: the written table does not parse", written.display()))?;
    if !check
        .routes
        .iter()
        .any(|route| route.breaker == Some(breaker))
    {
        bail!(
            "{}: the breaker did not land on route {:?}; nothing written",
            source.display(),
            options.route
        );
    }
    Ok(updated)
}
