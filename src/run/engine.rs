//! The run itself: every prompt of the dataset (or of its shard) to every
//! tier, each non-final tier's answers to the verifier, each call through the
//! cache, the tier's limits and the retry policy, each outcome to disk.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use tokio::sync::{Semaphore, mpsc};

use super::prepare::Prepared;
use super::progress::TierCounters;
use super::settings::{RunSettings, Shard, verified_pairs};
use super::store::{Done, compact, packed_key, packed_tier};
use super::summary::{ErrorKinds, RunSummary, TierSummary};
use super::writer::write_rows;
use crate::client::RunConfig;
use crate::client::{Cache, CachedCall, cache_key};
use crate::client::{CallOutcome, Caller, estimate_tokens, input_tokens_estimate};
use crate::client::{CallRequest, ChatEndpoint, Completion};
use crate::client::{EndpointConfig, GenerationConfig};
use crate::events::{Event, Reporter};
use crate::exit_codes::Interrupted;
use crate::rubric::PromptTemplate;
use crate::schema::CallTier;
use crate::schema::ResponseRow;
use crate::schema::{DatasetRow, Message, Role, for_each_row};
use crate::schema::{MANIFEST_FILE, TierCounts};

/// The endpoints of a run: the seam where tests put fakes.
#[derive(Debug)]
pub struct Endpoints<E> {
    /// One per tier of the config, cheapest first.
    pub tiers: Vec<E>,
    /// `[verifier]`, for every stage without one of its own.
    pub verifier: Option<(E, PromptTemplate)>,
    /// `[verifiers.NAME]`: the stage of tier NAME's own verifier.
    pub stage_verifiers: BTreeMap<String, (E, PromptTemplate)>,
}

struct TierState<E> {
    tier: CallTier,
    /// Shared by the verifier's stages: one endpoint, one set of limits.
    caller: Arc<Caller<E>>,
    counters: TierCounters,
}

struct Context<E> {
    /// Cheapest first.
    answering: Vec<TierState<E>>,
    /// The verifier of each non-final answering tier, in their order; empty
    /// without a verifier.
    verifiers: Vec<TierState<E>>,
    /// Each verifier's prompt, in the same order.
    templates: Vec<PromptTemplate>,
    generation: GenerationConfig,
    cache: Option<Cache>,
    rows: mpsc::Sender<ResponseRow>,
    done: Done,
    awaiting_verifier: Mutex<std::collections::HashMap<(u64, CallTier, u32), String>>,
    reporter: Arc<dyn Reporter>,
}

/// A prompt to run, with its position in the dataset.
struct Job {
    index: u64,
    row: DatasetRow,
}

fn caller<E: ChatEndpoint>(
    endpoint: E,
    config: &EndpointConfig,
    generation: &GenerationConfig,
) -> Arc<Caller<E>> {
    Arc::new(Caller::new(endpoint, config, generation.retry_budget))
}

fn state<E>(tier: CallTier, caller: Arc<Caller<E>>) -> TierState<E> {
    TierState {
        tier,
        caller,
        counters: TierCounters::default(),
    }
}

impl<E: ChatEndpoint> Context<E> {
    fn tier(&self, tier: CallTier) -> &TierState<E> {
        self.answering
            .iter()
            .chain(&self.verifiers)
            .find(|state| state.tier == tier)
            .expect("a tier of the run")
    }

    fn completed(&self, index: u64, tier: CallTier, sample: u32) -> bool {
        self.done
            .completed
            .contains(&packed_key(index, tier, sample))
    }

    async fn emit(&self, row: ResponseRow) {
        let counters = &self.tier(row.tier).counters;
        let failed = (!row.answered()).then(|| row.error_kind.as_deref().unwrap_or("unknown"));
        counters.finished(failed, row.cached, row.cost_usd);
        self.reporter.report(counters.progress(row.tier));
        // The writer only goes away when the run is stopped.
        let _ = self.rows.send(row).await;
    }

    fn row(&self, job: &Job, tier: CallTier, sample: u32) -> ResponseRow {
        ResponseRow {
            prompt_index: job.index,
            id: job.row.id.clone(),
            slice: job.row.slice.clone(),
            tier,
            sample,
            model: self.tier(tier).caller.config.model.clone(),
            model_version: None,
            text: None,
            finish_reason: None,
            input_tokens: None,
            cached_input_tokens: None,
            output_tokens: None,
            usage_estimated: false,
            cost_usd: None,
            ttft_ms: None,
            total_ms: None,
            attempts: 0,
            error_kind: None,
            error_message: None,
            cached: false,
            verdict_logprobs: None,
        }
    }

    /// One call, from the cache or the endpoint, with retries.
    async fn call(
        &self,
        job: &Job,
        tier: CallTier,
        sample: u32,
        messages: Vec<Message>,
    ) -> ResponseRow {
        let state = self.tier(tier);
        let request = CallRequest {
            messages,
            temperature: self.generation.temperature,
            max_tokens: self.generation.max_tokens,
            seed: self.generation.seed + i64::from(sample),
            logprobs: tier.is_verifier() && state.caller.config.logprobs,
        };
        let key = cache_key(
            &state.caller.config.base_url,
            &state.caller.config.model,
            &request,
            sample,
        );
        let mut row = self.row(job, tier, sample);
        if let Some(hit) = self.cache.as_ref().and_then(|cache| cache.get(&key)) {
            row.model_version = hit.model_version;
            row.text = Some(hit.text);
            row.finish_reason = Some(hit.finish_reason);
            row.input_tokens = Some(hit.input_tokens);
            row.cached_input_tokens = Some(hit.cached_input_tokens);
            row.output_tokens = Some(hit.output_tokens);
            row.usage_estimated = hit.usage_estimated;
            row.cost_usd = Some(state.caller.config.cost(
                hit.input_tokens,
                hit.cached_input_tokens,
                hit.output_tokens,
            ));
            row.ttft_ms = Some(hit.ttft_ms);
            row.total_ms = Some(hit.total_ms);
            row.verdict_logprobs = hit.verdict_logprobs;
            row.cached = true;
            return row;
        }
        let CallOutcome { result, attempts } = state.caller.send(&request, &key).await;
        state
            .counters
            .retries
            .fetch_add(u64::from(attempts.saturating_sub(1)), Ordering::Relaxed);
        row.attempts = attempts;
        match result {
            Ok(completion) => {
                self.fill(&mut row, state, &request, completion);
                if let Some(cache) = &self.cache {
                    cache.put(&key, &cached_call(&row));
                }
            }
            Err((error, why)) => {
                row.error_kind = Some(error.kind().to_owned());
                row.error_message = Some(format!("{} ({why})", error.message()));
            }
        }
        row
    }

    fn fill(
        &self,
        row: &mut ResponseRow,
        state: &TierState<E>,
        request: &CallRequest,
        completion: Completion,
    ) {
        let usage = completion.usage.unwrap_or_else(|| crate::client::Usage {
            input: input_tokens_estimate(request),
            cached_input: 0,
            output: estimate_tokens(&completion.text),
        });
        row.usage_estimated = completion.usage.is_none();
        row.model_version = completion.model_version;
        row.finish_reason = Some(completion.finish_reason);
        row.input_tokens = Some(usage.input);
        row.cached_input_tokens = Some(usage.cached_input);
        row.output_tokens = Some(usage.output);
        row.cost_usd = Some(state.caller.config.cost(
            usage.input,
            usage.cached_input,
            usage.output,
        ));
        row.ttft_ms = Some(completion.ttft.as_secs_f64() * 1e3);
        row.total_ms = Some(completion.total.as_secs_f64() * 1e3);
        row.verdict_logprobs = completion
            .verdict_logprobs
            .map(|choices| serde_json::to_string(&choices).expect("serialisable"));
        row.text = Some(completion.text);
    }

    /// Tier `stage`'s answer, then the verifier's judgement of it.
    async fn answer_then_verify(&self, job: &Job, stage: usize, sample: u32) {
        let tier = self.answering[stage].tier;
        let verifier = self.verifiers[stage].tier;
        let answer = if self.completed(job.index, tier, sample) {
            self.awaiting_verifier
                .lock()
                .expect("unpoisoned")
                .remove(&(job.index, verifier, sample))
        } else {
            let row = self.call(job, tier, sample, job.row.messages.clone()).await;
            let answer = row.text.clone().filter(|_| row.answered());
            self.emit(row).await;
            answer
        };
        let Some(template) = self.templates.get(stage) else {
            return;
        };
        if self.completed(job.index, verifier, sample) {
            return;
        }
        let row = match answer {
            Some(answer) => {
                let question = job
                    .row
                    .messages
                    .iter()
                    .rev()
                    .find(|message| message.role == Role::User)
                    .map(|message| message.content.as_str())
                    .unwrap_or_default();
                self.call(
                    job,
                    verifier,
                    sample,
                    template.render(&[("{question}", question), ("{answer}", &answer)]),
                )
                .await
            }
            None => {
                let mut row = self.row(job, verifier, sample);
                row.error_kind = Some("no_answer".to_owned());
                row.error_message = Some(format!("the {tier} tier has no answer to verify"));
                row
            }
        };
        self.emit(row).await;
    }

    async fn answer(&self, job: &Job, stage: usize, sample: u32) {
        let tier = self.answering[stage].tier;
        if !self.completed(job.index, tier, sample) {
            let row = self.call(job, tier, sample, job.row.messages.clone()).await;
            self.emit(row).await;
        }
    }

    async fn prompt(&self, job: Job) {
        let samples = self.generation.samples;
        let mut calls = Vec::with_capacity(self.answering.len() * samples as usize);
        for sample in 0..samples {
            for stage in 0..self.answering.len() {
                calls.push(if stage < self.verifiers.len() {
                    futures_util::future::Either::Left(self.answer_then_verify(&job, stage, sample))
                } else {
                    futures_util::future::Either::Right(self.answer(&job, stage, sample))
                });
            }
        }
        futures_util::future::join_all(calls).await;
    }

    /// Sets each tier's planned calls (`per_tier` less those `already`
    /// made) and reports them.
    fn plan(&self, per_tier: u64, already: &BTreeMap<CallTier, u64>) {
        for tier in self.tiers() {
            let already = already.get(&tier.tier).copied().unwrap_or_default();
            let planned = per_tier.saturating_sub(already);
            tier.counters.planned.store(planned, Ordering::Relaxed);
            self.reporter.report(Event::Planned {
                stage: "run",
                lane: tier.tier.name().to_owned(),
                total: planned,
            });
        }
    }

    fn tiers(&self) -> Vec<&TierState<E>> {
        self.answering.iter().chain(&self.verifiers).collect()
    }
}

fn cached_call(row: &ResponseRow) -> CachedCall {
    CachedCall {
        model_version: row.model_version.clone(),
        text: row.text.clone().unwrap_or_default(),
        finish_reason: row.finish_reason.clone().unwrap_or_default(),
        input_tokens: row.input_tokens.unwrap_or_default(),
        cached_input_tokens: row.cached_input_tokens.unwrap_or_default(),
        output_tokens: row.output_tokens.unwrap_or_default(),
        usage_estimated: row.usage_estimated,
        ttft_ms: row.ttft_ms.unwrap_or_default(),
        total_ms: row.total_ms.unwrap_or_default(),
        verdict_logprobs: row.verdict_logprobs.clone(),
    }
}

/// Runs every call that has no row yet, then merges the run's rows into
/// `OUT/responses.parquet` and completes the manifest.
pub async fn execute<E: ChatEndpoint>(
    config: &RunConfig,
    endpoints: Endpoints<E>,
    settings: &RunSettings,
    prepared: Prepared,
    finished_at: impl Fn() -> String,
) -> anyhow::Result<RunSummary> {
    let started = std::time::Instant::now();
    let Prepared {
        prompts,
        mut manifest,
        mut done,
        rubrics,
        lock,
        recovered: _,
    } = prepared;
    manifest.save(&settings.out.join(MANIFEST_FILE))?;
    let generation = config.run.clone();
    let (row_sender, row_receiver) = mpsc::channel::<ResponseRow>(8192);
    let awaiting = std::mem::take(&mut done.awaiting_verifier);
    let mut already: BTreeMap<CallTier, u64> = BTreeMap::new();
    for key in &done.completed {
        *already.entry(packed_tier(*key)).or_default() += 1;
    }
    let context = Arc::new(context(
        config,
        endpoints,
        settings,
        &generation,
        done,
        awaiting,
        row_sender,
    )?);
    context.plan(prompts * u64::from(generation.samples), &already);

    let (stop_writer, writer_stopped) = tokio::sync::oneshot::channel::<()>();
    let (write_failed, mut writing_failed) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(write_rows(
        settings.out.clone(),
        row_receiver,
        settings.flush_every,
        writer_stopped,
        write_failed,
    ));

    let (job_sender, jobs) = mpsc::channel::<Job>(256);
    let reader = spawn_reader(
        settings.dataset.clone(),
        rubrics,
        settings.shard,
        job_sender,
    );

    let dispatched = dispatch(jobs, context.clone(), config.widest_concurrency());
    // A row that cannot be written stops the run as an interrupt does:
    // every request sent after it would be paid for and lost.
    let stopped = tokio::select! {
        () = dispatched => None,
        () = interrupted() => Some(Stop::Interrupted),
        Ok(()) = &mut writing_failed => Some(Stop::WriteFailed),
    };
    for tier in context.tiers() {
        settings.reporter.report(Event::Finished {
            stage: "run",
            lane: tier.tier.name().to_owned(),
        });
    }
    let summaries = summaries(context.tiers());
    // Every sender must go for the writer to finish: the context holds one.
    drop(context);
    if let Some(stop) = stopped {
        reader.abort();
        let _ = stop_writer.send(());
        return Err(stopped_early(stop, writer.await, &settings.out));
    }
    reader.await.context("the dataset reader failed")??;
    writer.await.context("the writer failed")??;

    let rows = compact(&settings.out)?;
    let (tiers_counts, error_kinds) = tier_counts(&settings.out)?;
    let calls_per_sample = config.tiers.len() + verified_pairs(config).len();
    let expected = prompts * u64::from(generation.samples) * calls_per_sample as u64;
    manifest.complete = rows == expected;
    manifest.finished_at = Some(finished_at());
    manifest.tiers = tiers_counts;
    manifest.save(&settings.out.join(MANIFEST_FILE))?;
    drop(lock);
    Ok(RunSummary {
        tiers: summaries,
        rows,
        elapsed: started.elapsed(),
        manifest,
        error_kinds,
    })
}

/// Reads the dataset on a thread of its own, sending the shard's prompts
/// as jobs until the run stops taking them.
fn spawn_reader(
    dataset: PathBuf,
    rubrics: std::collections::BTreeSet<String>,
    shard: Option<Shard>,
    job_sender: mpsc::Sender<Job>,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut index = 0u64;
        for_each_row(&dataset, &rubrics, |row| {
            let position = index;
            index += 1;
            if shard.is_none_or(|shard| shard.takes(&row.id)) {
                // A closed channel means the run stopped; stop reading.
                if job_sender
                    .blocking_send(Job {
                        index: position,
                        row,
                    })
                    .is_err()
                {
                    return Err(crate::schema::InputError::Empty {
                        path: PathBuf::new(),
                        nothing: "the dataset has no rows",
                    });
                }
            }
            Ok(())
        })?;
        Ok(())
    })
}

/// Runs each job as a task of its own, with enough prompts in flight to
/// keep every tier busy, and no more, so that memory does not grow with the
/// dataset; returns once every job has finished.
async fn dispatch<E: ChatEndpoint>(
    mut jobs: mpsc::Receiver<Job>,
    context: Arc<Context<E>>,
    widest: usize,
) {
    let prompt_slots = Arc::new(Semaphore::new(2 * widest + 16));
    while let Some(job) = jobs.recv().await {
        let slot = prompt_slots
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let context = context.clone();
        tokio::spawn(async move {
            context.prompt(job).await;
            drop(slot);
        });
    }
    drop(context);
    let all = u32::try_from(2 * widest + 16).expect("a small number");
    let _ = prompt_slots.acquire_many(all).await;
}

/// Ctrl-C, or SIGTERM, which is what CI runners and Kubernetes send.
async fn interrupted() {
    let terminated = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
    }
}

/// The error of a run that stopped before every call was made, once the
/// writer has saved what finished.
fn stopped_early(
    stop: Stop,
    written: Result<anyhow::Result<()>, tokio::task::JoinError>,
    out: &std::path::Path,
) -> anyhow::Error {
    let written = match written.context("the writer failed") {
        Ok(written) => written,
        Err(error) => return error,
    };
    if let (Stop::WriteFailed, Err(error)) = (stop, &written) {
        return Interrupted(format!(
            "{error:#}; stopped sending requests; run the same command to resume once {} can be written",
            out.display()
        ))
        .into();
    }
    if let Err(error) = written {
        return error;
    }
    Interrupted(format!(
        "interrupted; the calls that finished are saved in {}; run the same command to resume",
        out.display()
    ))
    .into()
}

/// The run's callers, one per tier and verifier (stages checked by
/// `[verifier]` share its caller), and what every prompt's task needs.
fn context<E: ChatEndpoint>(
    config: &RunConfig,
    endpoints: Endpoints<E>,
    settings: &RunSettings,
    generation: &GenerationConfig,
    done: Done,
    awaiting: std::collections::HashMap<(u64, CallTier, u32), String>,
    row_sender: mpsc::Sender<ResponseRow>,
) -> anyhow::Result<Context<E>> {
    assert_eq!(
        endpoints.tiers.len(),
        config.tiers.len(),
        "an endpoint per tier"
    );
    let answering: Vec<TierState<E>> = endpoints
        .tiers
        .into_iter()
        .zip(&config.tiers)
        .map(|(endpoint, tier)| state(tier.tier, caller(endpoint, &tier.endpoint, generation)))
        .collect();
    // Stages checked by `[verifier]` share its caller: one endpoint, one
    // set of limits; a stage with a verifier of its own has its own.
    let shared = endpoints.verifier.map(|(endpoint, template)| {
        let verifier = config.verifier.as_ref().expect("a verifier section");
        (caller(endpoint, verifier, generation), template)
    });
    let mut own = endpoints.stage_verifiers;
    let mut verifiers = Vec::new();
    let mut templates = Vec::new();
    for (answering, tier) in verified_pairs(config) {
        let name = answering.name();
        let (checking, template) = match own.remove(name) {
            Some((endpoint, template)) => {
                let section = config.stage_verifiers.get(name).expect("checked on load");
                (caller(endpoint, section, generation), template)
            }
            None => {
                let (shared, template) = shared.as_ref().expect("checked on load");
                (shared.clone(), template.clone())
            }
        };
        verifiers.push(state(tier, checking));
        templates.push(template);
    }
    Ok(Context {
        answering,
        verifiers,
        templates,
        cache: settings.cache_dir.as_deref().map(Cache::open).transpose()?,
        generation: generation.clone(),
        rows: row_sender,
        awaiting_verifier: Mutex::new(awaiting),
        done,
        reporter: settings.reporter.clone(),
    })
}

/// Each tier's counts as the closing summary shows them.
fn summaries<E>(tiers: Vec<&TierState<E>>) -> Vec<TierSummary> {
    tiers
        .iter()
        .map(|tier| TierSummary {
            tier: tier.tier,
            model: tier.caller.config.model.clone(),
            calls: tier.counters.done.load(Ordering::Relaxed),
            errors: tier.counters.errors.load(Ordering::Relaxed),
            cached: tier.counters.cached.load(Ordering::Relaxed),
            retries: tier.counters.retries.load(Ordering::Relaxed),
            cost_usd: tier.counters.dollars(),
        })
        .collect()
}

/// The rows of each tier in the compacted responses table, for the
/// manifest, and why each tier's failed calls failed (`error_kind`, by
/// count), over every session of the run.
fn tier_counts(
    out: &std::path::Path,
) -> anyhow::Result<(BTreeMap<String, TierCounts>, ErrorKinds)> {
    let mut tiers_counts: BTreeMap<String, TierCounts> = BTreeMap::new();
    let mut error_kinds = ErrorKinds::new();
    let responses = out.join(crate::schema::RESPONSES_FILE);
    for batch in crate::schema::read_responses(&responses, 8192)? {
        for row in batch? {
            let counts = tiers_counts.entry(row.tier.name().to_owned()).or_default();
            counts.model.clone_from(&row.model);
            counts.rows += 1;
            if row.answered() {
                counts.answered += 1;
            } else {
                counts.errors += 1;
                let kind = row
                    .error_kind
                    .clone()
                    .unwrap_or_else(|| "unknown".to_owned());
                *error_kinds
                    .entry(row.tier.name().to_owned())
                    .or_default()
                    .entry(kind)
                    .or_default() += 1;
            }
            counts.cached += u64::from(row.cached);
            counts.cost_usd += row.cost_usd.unwrap_or_default();
        }
    }
    Ok((tiers_counts, error_kinds))
}

/// Why a run stopped before every call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupted,
    /// A row could not be written (a full disk): `failed` was signalled.
    WriteFailed,
}
