//! What `replay replicas` is asked, and the one call that answers it: the
//! requests' source, the pool, the policies (the documented defaults when
//! none is named) and, when asked, the search for their settings.

use std::path::PathBuf;

use super::render::{render_calibration, render_policies};
use super::search::{Objective, search_settings};
use super::strategy::{PolicySpec, RouterRelease};
use super::{Pool, Source, replay};
use crate::replay::RunArrivals;
use crate::schema::ReplayDocument;

/// Where the requests come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Requests {
    /// A trace file: JSON lines, CSV or Parquet.
    Trace(PathBuf),
    /// A routeval run directory, its prompts cut into blocks;
    /// `dataset` overrides the one its manifest names.
    Run {
        run: PathBuf,
        dataset: Option<PathBuf>,
        arrivals: RunArrivals,
    },
}

impl Requests {
    pub fn source(&self) -> Source<'_> {
        match self {
            Requests::Trace(path) => Source::Trace(path),
            Requests::Run {
                run,
                dataset,
                arrivals,
            } => Source::Run {
                run,
                dataset: dataset.as_deref(),
                arrivals: *arrivals,
            },
        }
    }
}

/// A search for the policies' settings: on the first half of the
/// requests, checked on the second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    pub objective: Objective,
    /// Search this router release's rule against its own defaults,
    /// instead of routeval's cache-aware rule.
    pub release: Option<RouterRelease>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplicasOptions {
    pub requests: Requests,
    pub pool: Pool,
    /// The policies to replay; none: the defaults docs/replay.md lists.
    pub policies: Vec<PolicySpec>,
    pub search: Option<Search>,
}

/// Replays the requests through the pool under each policy, and searches
/// their settings when asked.
pub fn replay_replicas(options: &ReplicasOptions) -> anyhow::Result<ReplayDocument> {
    let source = options.requests.source();
    let policies = if options.policies.is_empty() {
        PolicySpec::defaults(options.pool.scrape_ms > 0.0)
    } else {
        options.policies.clone()
    };
    let mut document = replay(&source, &options.pool, &policies)?;
    if let Some(search) = options.search {
        document.calibration = Some(search_settings(
            &source,
            &options.pool,
            &policies,
            search.objective,
            search.release,
        )?);
    }
    Ok(document)
}

/// The replay as the terminal shows it: each policy's line, then the
/// search's, if there was one.
pub fn render_replicas(document: &ReplayDocument) -> String {
    let mut text = render_policies(document);
    if let Some(calibration) = &document.calibration {
        text.push_str(&render_calibration(calibration));
    }
    text
}
