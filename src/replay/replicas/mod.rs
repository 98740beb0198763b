//! `routeval replay replicas`: a recorded request trace replayed through a
//! simulated pool of replicas under each replica-routing policy, side by
//! side, and the cache-aware router's load guard and the endpoint picker's
//! weights calibrated on the trace. The pool model and every policy are
//! documented in docs/replay.md.

mod cache;
mod choice;
mod metrics;
mod options;
mod pool;
mod render;
mod search;
mod smg;
mod smg_choice;
mod strategy;

use std::ops::Range;
use std::path::Path;

use super::from_run::{RunArrivals, for_each_run_request};
use super::trace::{Request, for_each_request};
use crate::schema::PolicyResult;
use crate::schema::PoolSummary;
use crate::schema::QueueQuantiles;
use crate::schema::REPLAY_SCHEMA_VERSION;
use crate::schema::ReplayDocument;
use crate::schema::TraceSummary;
use crate::schema::TtftQuantiles;
use crate::schema::Window;

pub use cache::{BlockCache, PrefixIndex};
pub use metrics::Histogram;
use metrics::WindowSums;
use metrics::ratio;
pub use options::{ReplicasOptions, Requests, Search, render_replicas, replay_replicas};
pub use pool::{Pool, PoolError, Simulation};
pub use render::{render_calibration, render_policies};
pub use search::{Objective, search_settings};
pub use smg::{SMG_1_13, SMG_SOURCE_COMMIT, SmgPolicy};
pub use strategy::{PolicyError, PolicySpec, RouterRelease, SglangRelease, Strategy};

/// Where the requests come from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A trace file: JSON lines, CSV or Parquet.
    Trace(&'a Path),
    /// A routeval run directory, its prompts cut into blocks.
    Run {
        run: &'a Path,
        dataset: Option<&'a Path>,
        arrivals: RunArrivals,
    },
}

impl Source<'_> {
    pub fn describe(&self) -> String {
        match self {
            Source::Trace(path) => path.display().to_string(),
            Source::Run { run, .. } => format!("run {}", run.display()),
        }
    }

    /// Streams the requests in arrival order; returns how many there were.
    pub fn for_each(&self, visit: impl FnMut(Request)) -> anyhow::Result<u64> {
        match *self {
            Source::Trace(path) => Ok(for_each_request(path, visit)?),
            Source::Run {
                run,
                dataset,
                arrivals,
            } => for_each_run_request(run, dataset, arrivals, visit),
        }
    }
}

/// One simulation and the requests (by position in the trace) it is fed.
#[derive(Debug)]
struct Lane {
    simulation: Simulation,
    range: Range<u64>,
}

/// Requests are fed to the simulations in chunks, each chunk to every
/// simulation across the cores: all simulations see the same requests in the
/// same order, and memory holds one chunk of the trace.
const CHUNK: usize = 4096;

/// Runs every lane over the source in one pass, showing each request to
/// `observe` too.
fn run_lanes(
    source: &Source<'_>,
    mut lanes: Vec<Lane>,
    observe: &mut dyn FnMut(&Request),
) -> anyhow::Result<(Vec<Lane>, u64)> {
    let mut chunk: Vec<(u64, Request)> = Vec::with_capacity(CHUNK);
    let mut position = 0u64;
    let mut beyond_the_clock: Option<f64> = None;
    let count = source.for_each(|request| {
        if beyond_the_clock.is_some() {
            return;
        }
        if lanes
            .iter()
            .any(|lane| !lane.simulation.clock_holds(request.arrival_ms))
        {
            beyond_the_clock = Some(request.arrival_ms);
            return;
        }
        observe(&request);
        chunk.push((position, request));
        position += 1;
        if chunk.len() == CHUNK {
            feed(&mut lanes, &chunk);
            chunk.clear();
        }
    })?;
    if let Some(arrival_ms) = beyond_the_clock {
        anyhow::bail!(
            "a request recorded at {:.0} s would arrive, at this --speedup (or --arrival-rate), more than 146,000 years into the replay; replay it faster",
            arrival_ms / 1000.0
        );
    }
    feed(&mut lanes, &chunk);
    for lane in &mut lanes {
        lane.simulation.finish();
    }
    Ok((lanes, count))
}

fn feed(lanes: &mut [Lane], chunk: &[(u64, Request)]) {
    if chunk.is_empty() || lanes.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let per_thread = lanes.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for group in lanes.chunks_mut(per_thread) {
            scope.spawn(move || {
                for lane in group {
                    for (position, request) in chunk {
                        if lane.range.contains(position) {
                            lane.simulation.offer(request);
                        }
                    }
                }
            });
        }
    });
}

/// Replays the source through the pool under each policy.
pub fn replay(
    source: &Source<'_>,
    pool: &Pool,
    policies: &[PolicySpec],
) -> anyhow::Result<ReplayDocument> {
    pool.check()?;
    let lanes = policies
        .iter()
        .map(|policy| Lane {
            simulation: Simulation::new(pool, policy.clone()),
            range: 0..u64::MAX,
        })
        .collect();
    // The ceiling: one replica holding the whole pool's cache.
    let mut ceiling = BlockCache::new(pool.cache_blocks.map(|blocks| blocks * pool.replicas));
    let (mut prompt_tokens, mut ceiling_tokens) = (0u64, 0u64);
    let (mut first_ms, mut last_ms) = (None, 0.0f64);
    let (lanes, requests) = run_lanes(source, lanes, &mut |request| {
        let input = u64::from(request.input_tokens);
        let hits = ceiling.leading_hits(&request.blocks) as u64;
        ceiling.insert(&request.blocks);
        prompt_tokens += input;
        ceiling_tokens += (hits * u64::from(pool.block_tokens)).min(input);
        first_ms.get_or_insert(request.arrival_ms);
        last_ms = request.arrival_ms;
    })?;
    Ok(ReplayDocument {
        schema_version: REPLAY_SCHEMA_VERSION,
        trace: TraceSummary {
            path: source.describe(),
            requests,
            duration_s: (last_ms - first_ms.unwrap_or(0.0)) / 1000.0,
            prompt_tokens,
            ceiling_hit_rate: ratio(ceiling_tokens, prompt_tokens),
        },
        pool: summarize_pool(pool),
        policies: lanes
            .iter()
            .map(|lane| summarize(&lane.simulation, pool))
            .collect(),
        calibration: None,
    })
}

fn summarize_pool(pool: &Pool) -> PoolSummary {
    PoolSummary {
        replicas: pool.replicas,
        speedup: pool.speedup,
        cache_blocks: pool.cache_blocks,
        block_tokens: pool.block_tokens,
        prefill_tokens_per_s: pool.prefill_tokens_per_s,
        decode_ms_per_token: pool.decode_ms_per_token,
        max_batch: pool.max_batch,
        scrape_ms: pool.scrape_ms,
        index_history: pool.index_history,
        index_loss_at_s: pool.index_loss_at_ms.map(|ms| ms / 1000.0),
        kv_tokens: pool.kv_tokens,
        window_s: pool.window_ms / 1000.0,
        seed: pool.seed,
    }
}

fn summarize(simulation: &Simulation, pool: &Pool) -> PolicyResult {
    let totals = &simulation.totals;
    PolicyResult {
        name: simulation.policy.name.clone(),
        params: simulation.policy.params(),
        requests: totals.requests,
        prompt_tokens: totals.prompt_tokens,
        cached_tokens: totals.cached_tokens,
        hit_rate: ratio(totals.cached_tokens, totals.prompt_tokens),
        prefill_tokens: totals.prefill_tokens,
        ttft_ms: TtftQuantiles {
            p50: totals.ttft.quantile(0.50),
            p95: totals.ttft.quantile(0.95),
            p99: totals.ttft.quantile(0.99),
        },
        queue_ms: QueueQuantiles {
            p50: totals.queue.quantile(0.50),
            p95: totals.queue.quantile(0.95),
        },
        imbalance: if totals.busy_us == 0 {
            1.0
        } else {
            totals.imbalance_weighted / totals.busy_us as f64
        },
        herding_s: totals.herding_us as f64 / 1e6,
        busiest_share: ratio(
            totals.replica_requests.iter().copied().max().unwrap_or(0),
            totals.requests,
        ),
        replica_requests: totals.replica_requests.clone(),
        index_drift_misses: totals.index_drift_misses,
        windows: timeline(&totals.windows, pool.window_ms),
    }
}

/// The windows of a timeline: every window from the first to the last, the
/// empty ones too, where there are at most [`DENSE_WINDOWS`] of them (a
/// chart's gaps are windows); beyond that only those with requests, so a
/// trace with a gap of years, or a `--window` of a microsecond, costs what
/// its requests do.
fn timeline(windows: &std::collections::BTreeMap<u64, WindowSums>, window_ms: f64) -> Vec<Window> {
    let start = |index: u64| index as f64 * window_ms / 1000.0;
    let last = windows.keys().next_back().copied().unwrap_or(0);
    if last < DENSE_WINDOWS {
        (0..=last)
            .filter(|_| !windows.is_empty())
            .map(|index| {
                windows
                    .get(&index)
                    .cloned()
                    .unwrap_or_default()
                    .render(start(index))
            })
            .collect()
    } else {
        windows
            .iter()
            .map(|(index, sums)| sums.render(start(*index)))
            .collect()
    }
}

/// The most windows a timeline lists with its empty ones.
const DENSE_WINDOWS: u64 = 100_000;
