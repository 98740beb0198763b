//! `routeval replay replicas`.

use std::num::NonZeroU32;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};

use crate::atomic::{Named, Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::replay::fallback::{FallbackOptions, ROUTE_TABLE_OUTPUT, render_fallback};
use crate::replay::hedge::{HedgeOptions, render_hedge};
use crate::replay::replicas::{PolicySpec, Pool, RouterRelease};
use crate::replay::{
    Objective, ReplicasOptions, Requests, RunArrivals, Search, render_replicas, replay_replicas,
};
use crate::schema::CallTier;
use crate::schema::HEDGE_OUTPUT;
use crate::schema::REPLAY_OUTPUT;
use crate::schema::{FALLBACK_OUTPUT, Learning};
use crate::units::{NonNegative, Positive, Proportion, Span};

use super::print::{DocumentOutput, emit, encode, print};

#[derive(Debug, Subcommand)]
pub enum ReplayCommand {
    /// Replay a request trace through a pool of replicas under each
    /// replica-routing policy, side by side; with --calibrate, choose the
    /// cache-aware router's thresholds and the scorer's weights on the trace.
    Replicas(ReplicasArgs),
    /// Replay a route's request records through no breaker, a breaker on
    /// errors, and a breaker that also counts slow first tokens, with the
    /// fallback route's latency; with --calibrate, choose the deadline and
    /// the failure count.
    Fallback(FallbackArgs),
    /// Replay request records with a hedged second copy after each delay
    /// quantile: first-token percentiles and the extra input tokens, by
    /// prompt length.
    Hedge(HedgeArgs),
    /// Estimate a candidate route table on the traffic a signed config
    /// served: its quality (inverse-propensity, self-normalised and doubly
    /// robust, each with a confidence sequence valid at every look, or an
    /// empirical-Bernstein interval for one look), cost and
    /// escalation per slice, from serve's records, their propensities and
    /// a label set of the logged answers.
    Candidate(super::candidate::CandidateArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LearningArg {
    /// Before the next request (DOMAIN.md's reference replay).
    Instantly,
    /// When the outcome is known: the first token, the error, or the deadline.
    AtOutcome,
}

#[derive(Debug, Args)]
pub struct FallbackArgs {
    /// Request records (Parquet, CSV or JSON lines).
    #[arg(long, value_name = "FILE")]
    pub records: PathBuf,

    /// The primary route whose requests are replayed.
    #[arg(long, value_name = "ROUTE")]
    pub route: String,

    /// The fallback route, whose own records give its first-token times.
    #[arg(
        long,
        value_name = "ROUTE",
        required_unless_present = "fallback_ttft_ms"
    )]
    pub fallback: Option<String>,

    /// A constant first-token time for the fallback, where it has no records.
    #[arg(long, value_name = "MS", conflicts_with = "fallback")]
    pub fallback_ttft_ms: Option<NonNegative>,

    /// The first-token deadline of the slow-first-token breaker.
    #[arg(long, value_name = "MS", default_value = "3000")]
    pub deadline_ms: Positive,

    /// Consecutive failures that open a breaker.
    #[arg(long, value_name = "N", default_value = "3")]
    pub open_after: NonZeroU32,

    /// How long an open breaker stays open before one half-open probe.
    #[arg(long, value_name = "MS", default_value = "5000")]
    pub open_ms: Positive,

    /// When the breaker learns how a request went.
    #[arg(long, value_enum, default_value_t = LearningArg::Instantly)]
    pub learning: LearningArg,

    /// Retries and fallbacks allowed as a share of requests.
    #[arg(long, value_name = "SHARE", default_value = "0.1")]
    pub retry_budget: Proportion,

    /// A route table: the fallback route's `rpm` is the capacity its peak
    /// must fit in.
    #[arg(long, value_name = "FILE")]
    pub routes: Option<PathBuf>,

    /// Search the deadline and failure count for the lowest p95 wait.
    #[arg(long)]
    pub calibrate: bool,

    /// The most of the traffic the calibrated breaker may send to the fallback.
    #[arg(long, value_name = "SHARE", default_value = "0.2")]
    pub max_fallback_share: Proportion,

    /// With --calibrate and --routes: write the route table with the chosen
    /// breaker as the primary route's `[routes.breaker]` to this new file.
    #[arg(long, value_name = "FILE", requires_all = ["calibrate", "routes"])]
    pub write_routes: Option<PathBuf>,

    #[command(flatten)]
    pub document: DocumentOutput,
}

#[derive(Debug, Args)]
pub struct HedgeArgs {
    /// Request records (Parquet, CSV or JSON lines).
    #[arg(long, value_name = "FILE")]
    pub records: PathBuf,

    /// Replay only this route's records (default: every route's).
    #[arg(long, value_name = "ROUTE")]
    pub route: Option<String>,

    /// Seed of the draw of each copy's first token.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    #[command(flatten)]
    pub document: DocumentOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ObjectiveArg {
    /// The 95th percentile of time to first token (lower is better).
    P95Ttft,
    /// The share of prompt tokens served from cache (higher is better).
    HitRate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayTierArg {
    Small,
    Large,
}

#[derive(Debug, Args)]
pub struct ReplicasArgs {
    /// The trace: Mooncake's JSON lines (timestamp ms, input_length,
    /// output_length, hash_ids), or the same columns in CSV or Parquet.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "from_run",
        conflicts_with = "from_run"
    )]
    pub trace: Option<PathBuf>,

    /// Replay a routeval run's prompts instead: each prompt's text cut into
    /// 512-token-equivalent blocks (2,048 characters).
    #[arg(long, value_name = "DIR")]
    pub from_run: Option<PathBuf>,

    /// With --from-run: the dataset, when it moved since the run.
    #[arg(long, value_name = "FILE", requires = "from_run")]
    pub dataset: Option<PathBuf>,

    /// With --from-run: the tier whose answers give the output lengths.
    #[arg(long, value_enum, default_value_t = ReplayTierArg::Small, requires = "from_run")]
    pub tier: ReplayTierArg,

    /// With --from-run: requests per second, arriving as a Poisson process.
    #[arg(long, value_name = "R", default_value = "4", requires = "from_run")]
    pub arrival_rate: Positive,

    /// Replicas in the pool.
    #[arg(long, value_name = "N")]
    pub replicas: usize,

    /// Replay the arrivals this many times faster than recorded: the same
    /// traffic at a higher rate.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub speedup: f64,

    /// Prefix-cache capacity per replica, in blocks, or `inf`.
    #[arg(long, value_name = "B|inf", default_value = "inf", value_parser = cache_blocks)]
    pub cache_blocks: CacheBlocks,

    /// Tokens per cache block (Mooncake's traces use 512).
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub block_tokens: u32,

    /// Prefill speed of one replica, uncached prompt tokens per second.
    #[arg(long, value_name = "N", default_value_t = 10_000.0)]
    pub prefill_tokens_per_s: f64,

    /// Decode time per output token, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20.0)]
    pub decode_ms_per_token: f64,

    /// Requests a replica runs at once; more wait in its queue.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_batch: u32,

    /// How often the router's view of load is refreshed, milliseconds; 0
    /// means it always sees the true load.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub scrape_ms: f64,

    /// Prompts per replica the router's approximate prefix index remembers.
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub index_history: usize,

    /// Wipe the router's prefix index at this trace time (`90s`, `30m`,
    /// `1h`, `500ms`; a bare number is seconds).
    #[arg(long, value_name = "T")]
    pub index_loss_at: Option<Span>,

    /// KV-cache tokens per replica, for the scorer's KV-use signal
    /// (default: the cache's capacity, or 1,048,576 when unbounded).
    #[arg(long, value_name = "N")]
    pub kv_tokens: Option<u64>,

    /// Width of the windows of the timeline (`60s`, `5m`, ...).
    #[arg(long, value_name = "T", default_value = "60s")]
    pub window: Span,

    /// A policy to replay, `NAME[:key=value,...]`, repeatable: round-robin,
    /// least-load, session, prefix-hash, cache-aware, sglang, scorer;
    /// sglang@0.3 or sglang@0.1 for a release of SGLang's router as it
    /// decides; smg@1.13[:policy=...] for the Shepherd Model Gateway 1.13
    /// (default: all but the releases, as docs/replay.md lists).
    #[arg(long = "policy", value_name = "NAME[:k=v,...]", value_parser = PolicySpec::parse)]
    pub policies: Vec<PolicySpec>,

    /// Choose the cache-aware thresholds and the scorer's weights on the
    /// first half of the trace and check them on the second.
    #[arg(long)]
    pub calibrate: bool,

    /// What --calibrate optimises.
    #[arg(long, value_enum, default_value_t = ObjectiveArg::P95Ttft)]
    pub objective: ObjectiveArg,

    /// With --calibrate: search the thresholds of this router release, as
    /// it decides (`smg@1.13`, `sglang@0.3` or `sglang@0.1`), against its
    /// own defaults, and print every flag its launcher takes; without it,
    /// routeval's cache-aware rule.
    #[arg(long = "for", value_name = "RELEASE", requires = "calibrate", value_parser = parse_release)]
    pub for_release: Option<RouterRelease>,

    /// Print the versioned JSON document instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Write the versioned JSON document here (for `routeval report --replay`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Seed for hashing and drawn arrivals; a seed gives the same replay on
    /// every machine.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
}

pub fn run(command: ReplayCommand) -> anyhow::Result<Outcome> {
    match command {
        ReplayCommand::Replicas(args) => replicas(&args),
        ReplayCommand::Fallback(args) => fallback(&args),
        ReplayCommand::Hedge(args) => hedge(&args),
        ReplayCommand::Candidate(args) => super::candidate::run(&args),
    }
}

/// A prefix cache's capacity in blocks; `None`: unbounded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheBlocks(Option<usize>);

fn cache_blocks(text: &str) -> Result<CacheBlocks, String> {
    match text {
        "inf" => Ok(CacheBlocks(None)),
        text => text
            .parse::<usize>()
            .map(|blocks| CacheBlocks(Some(blocks)))
            .map_err(|_| format!("{text}: expected a number of blocks or inf")),
    }
}

/// The pool the flags describe.
pub fn pool(args: &ReplicasArgs) -> anyhow::Result<Pool> {
    let CacheBlocks(cache_blocks) = args.cache_blocks;
    let pool = Pool {
        replicas: args.replicas,
        speedup: args.speedup,
        cache_blocks,
        block_tokens: args.block_tokens,
        prefill_tokens_per_s: args.prefill_tokens_per_s,
        decode_ms_per_token: args.decode_ms_per_token,
        max_batch: args.max_batch,
        scrape_ms: args.scrape_ms,
        index_history: args.index_history,
        index_loss_at_ms: args.index_loss_at.map(Span::milliseconds),
        kv_tokens: args.kv_tokens.unwrap_or_else(|| {
            cache_blocks.map_or(1 << 20, |blocks| {
                (blocks as u64 * u64::from(args.block_tokens)).max(1)
            })
        }),
        window_ms: args.window.milliseconds(),
        seed: args.seed,
    };
    pool.check()?;
    Ok(pool)
}

impl ReplicasArgs {
    /// The stage's options: the pool the flags describe, checked.
    pub fn options(&self) -> anyhow::Result<ReplicasOptions> {
        let requests = match (&self.trace, &self.from_run) {
            (Some(trace), _) => Requests::Trace(trace.clone()),
            (None, Some(run)) => Requests::Run {
                run: run.clone(),
                dataset: self.dataset.clone(),
                arrivals: RunArrivals {
                    tier: match self.tier {
                        ReplayTierArg::Small => CallTier::SMALL,
                        ReplayTierArg::Large => CallTier::LARGE,
                    },
                    rate: self.arrival_rate,
                    seed: self.seed,
                },
            },
            (None, None) => bail!("give --trace FILE or --from-run DIR"),
        };
        Ok(ReplicasOptions {
            requests,
            pool: pool(self)?,
            policies: self.policies.clone(),
            search: self.calibrate.then_some(Search {
                objective: match self.objective {
                    ObjectiveArg::P95Ttft => Objective::P95Ttft,
                    ObjectiveArg::HitRate => Objective::HitRate,
                },
                release: self.for_release,
            }),
        })
    }
}

fn replicas(args: &ReplicasArgs) -> anyhow::Result<Outcome> {
    let options = args.options()?;
    let mut inputs = Vec::new();
    inputs.extend(args.trace.iter().map(|path| Named::new(path, "--trace")));
    inputs.extend(
        args.from_run
            .iter()
            .map(|path| Named::new(path, "--from-run")),
    );
    inputs.extend(
        args.dataset
            .iter()
            .map(|path| Named::new(path, "--dataset")),
    );
    if let Some(out) = &args.out {
        check_outputs(&[Output::new(out, "--out", &REPLAY_OUTPUT)], &inputs)?;
    }
    let document = replay_replicas(&options)?;
    emit(
        &document,
        "the replay",
        args.out.as_deref(),
        args.json,
        || render_replicas(&document),
    )?;
    Ok(Outcome::Passed)
}

impl FallbackArgs {
    /// The stage's options, each flag checked where it was parsed.
    pub fn options(&self) -> FallbackOptions {
        FallbackOptions {
            records: self.records.clone(),
            route: self.route.clone(),
            fallback: self.fallback.clone(),
            fallback_ttft_ms: self.fallback_ttft_ms,
            routes: self.routes.clone(),
            deadline_ms: self.deadline_ms,
            open_ms: self.open_ms,
            open_after: self.open_after,
            learning: match self.learning {
                LearningArg::Instantly => Learning::Instantly,
                LearningArg::AtOutcome => Learning::AtOutcome,
            },
            calibrate: self.calibrate,
            retry_budget: self.retry_budget,
            max_fallback_share: self.max_fallback_share,
            write_routes: self.write_routes.clone(),
        }
    }
}

fn fallback(args: &FallbackArgs) -> anyhow::Result<Outcome> {
    let mut inputs = vec![Named::new(&args.records, "--records")];
    if let Some(routes) = &args.routes {
        inputs.push(Named::new(routes, "--routes"));
    }
    let mut outputs = args.document.outputs(&FALLBACK_OUTPUT);
    if let Some(written) = &args.write_routes {
        outputs.push(Output::new(written, "--write-routes", &ROUTE_TABLE_OUTPUT));
    }
    check_outputs(&outputs, &inputs)?;
    let replay = crate::replay::fallback::fallback(&args.options())?;
    replay.write(args.document.out.as_deref(), args.write_routes.as_deref())?;
    print(&if args.document.json {
        encode(&replay.document, "the document")?
    } else {
        render_fallback(&replay.document)
    })?;
    Ok(Outcome::Passed)
}

fn hedge(args: &HedgeArgs) -> anyhow::Result<Outcome> {
    check_outputs(
        &args.document.outputs(&HEDGE_OUTPUT),
        &[Named::new(&args.records, "--records")],
    )?;
    let document = crate::replay::hedge::hedge(&HedgeOptions {
        records: args.records.clone(),
        route: args.route.clone(),
        seed: args.seed,
    })?;
    args.document
        .emit(&document, "the document", || render_hedge(&document))?;
    Ok(Outcome::Passed)
}

fn parse_release(given: &str) -> Result<RouterRelease, String> {
    RouterRelease::from_name(given).ok_or_else(|| {
        let known: Vec<&str> = RouterRelease::ALL
            .iter()
            .map(|release| release.name())
            .collect();
        format!("unknown release {given:?}; known: {}", known.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(argv: &[&str]) -> ReplicasArgs {
        let mut full = vec!["routeval", "replay", "replicas"];
        full.extend_from_slice(argv);
        let Command::Replay(ReplayCommand::Replicas(args)) =
            Cli::try_parse_from(full).unwrap().command
        else {
            panic!("a replay replicas command");
        };
        args
    }

    #[test]
    fn flags_become_the_documented_pool() {
        let defaults = pool(&args(&["--trace", "t.jsonl", "--replicas", "8"])).unwrap();
        assert_eq!(defaults, Pool::default());
        let bounded = pool(&args(&[
            "--trace",
            "t.jsonl",
            "--replicas",
            "4",
            "--cache-blocks",
            "1000",
            "--index-loss-at",
            "30m",
            "--window",
            "500ms",
        ]))
        .unwrap();
        assert_eq!(bounded.cache_blocks, Some(1000));
        assert_eq!(bounded.kv_tokens, 512_000);
        assert_eq!(bounded.index_loss_at_ms, Some(1_800_000.0));
        assert_eq!(bounded.window_ms, 500.0);
    }

    #[test]
    fn durations_name_the_flag_when_wrong() {
        let error = Cli::try_parse_from([
            "routeval",
            "replay",
            "replicas",
            "--trace",
            "t.jsonl",
            "--replicas",
            "2",
            "--window",
            "5 days",
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            error.lines().next(),
            Some(
                "error: invalid value '5 days' for '--window <T>': 5 days: unknown unit \"days\"; use ms, s, m or h"
            )
        );
        let error = pool(&args(&["--trace", "t.jsonl", "--replicas", "0"]))
            .unwrap_err()
            .to_string();
        assert_eq!(error, "--replicas: must be at least 1");
        let error = Cli::try_parse_from(
            "routeval replay replicas --from-run runs/nowhere --replicas 2 --arrival-rate 0"
                .split_whitespace(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            error.lines().next(),
            Some("error: invalid value '0' for '--arrival-rate <R>': 0: expected a number above 0")
        );
        let error = Cli::try_parse_from(
            "routeval replay replicas --trace t.jsonl --replicas 2 --policy session:min-blocks=0"
                .split_whitespace(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with(
                "error: invalid value 'session:min-blocks=0' for '--policy <NAME[:k=v,...]>': min-blocks=0"
            ),
            "{error}"
        );
    }

    fn fallback_args(argv: &str) -> FallbackArgs {
        let full = format!("routeval replay fallback {argv}");
        let Command::Replay(ReplayCommand::Fallback(args)) =
            Cli::try_parse_from(full.split_whitespace())
                .unwrap()
                .command
        else {
            panic!("a replay fallback command");
        };
        args
    }

    #[test]
    fn fallback_flags_become_options() {
        let options = fallback_args(
            "--records r.parquet --route primary --fallback backup --routes t.toml --calibrate --write-routes t2.toml --learning at-outcome --open-after 3",
        )
        .options();
        assert_eq!(options.records, std::path::PathBuf::from("r.parquet"));
        assert_eq!(options.route, "primary");
        assert_eq!(options.fallback.as_deref(), Some("backup"));
        assert_eq!(options.learning, Learning::AtOutcome);
        assert_eq!(options.open_after.get(), 3);
        assert_eq!(options.deadline_ms.get(), 3000.0);
        assert!(options.calibrate);
        assert_eq!(
            options.write_routes,
            Some(std::path::PathBuf::from("t2.toml"))
        );
        for (flags, message) in [
            (
                "--open-after 0",
                "error: invalid value '0' for '--open-after <N>': number would be zero for non-zero type",
            ),
            (
                "--deadline-ms 0",
                "error: invalid value '0' for '--deadline-ms <MS>': 0: expected a number above 0",
            ),
            (
                "--fallback-ttft-ms=-1",
                "error: invalid value '-1' for '--fallback-ttft-ms <MS>': -1: expected a number of at least 0",
            ),
            (
                "--retry-budget 1.5",
                "error: invalid value '1.5' for '--retry-budget <SHARE>': 1.5: a proportion is at least 0 and at most 1 (0.1)",
            ),
        ] {
            let argv = format!("routeval replay fallback --records r.parquet --route p {flags}");
            let error = Cli::try_parse_from(argv.split_whitespace())
                .unwrap_err()
                .to_string();
            assert_eq!(error.lines().next(), Some(message), "{flags}");
        }
    }
}
