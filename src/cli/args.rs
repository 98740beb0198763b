//! Every flag of every command, as clap derive structs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Calibrate, gate and monitor the thresholds of LLM tier routers and
/// cascades from labelled data.
#[derive(Debug, Parser)]
#[command(name = "routeval", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The whole pipeline on the embedded simulated endpoint, no key and no
    /// network: run, grade, train the router, calibrate, gate, sign, verify, report.
    Demo(DemoArgs),
    /// Send labelled prompts to the small tier, the large tier and the
    /// verifier, and record every answer (resumable, cached, rate-limited).
    Run(RunArgs),
    /// Combine the outputs of `run --shard K/N` into one run's output.
    Merge(MergeArgs),
    /// Grade a run's answers with each prompt's rubric into the graded-results table.
    Grade(GradeArgs),
    /// Pick, per slice, the cheapest threshold whose quality meets the target.
    Calibrate(CalibrateArgs),
    /// Score candidate route tables on the same graded results and emit the
    /// cheapest that passes every rule as a signed route config.
    Gate(GateArgs),
    /// Create a minisign key pair for signing route configs.
    Keygen(KeygenArgs),
    /// Check a signed route config before deploying it.
    Verify(VerifyArgs),
    /// Re-evaluate fresh graded traffic at a deployed config's thresholds.
    Drift(DriftArgs),
    /// Write the HTML report and Markdown summary a reviewer reads.
    Report(ReportArgs),
    /// Turn public benchmark outcomes into graded results.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Train the built-in router, or score prompts with it.
    #[command(subcommand)]
    Router(RouterCommand),
    /// How well the results' scores separate the prompts that need the large
    /// tier (APGR, CPT), against a random router and the oracle.
    Evaluate(EvaluateArgs),
    /// Serve an OpenAI-compatible simulated endpoint that answers a dataset's
    /// prompts, for demos and tests without keys or network.
    ServeSim(ServeSimArgs),
    /// Generate graded results from a documented generative model, and
    /// compare ways to serve them.
    Simulate(SimulateArgs),
    /// Replay recorded traffic through a simulated serving layer.
    #[command(subcommand)]
    Replay(ReplayCommand),
    /// The gateway's request records: import them from what is logged.
    #[command(subcommand)]
    Records(RecordsCommand),
    /// Draw the next labelling set from request records: per slice, across
    /// the score range, de-duplicated, secrets redacted.
    Sample(SampleArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or
    /// PowerShell (e.g. `routeval completions bash > ~/.local/share/bash-completion/completions/routeval`).
    Completions(CompletionsArgs),
    /// Print the manual page (roff) of routeval or of one command, e.g.
    /// `routeval man gate | man -l -`.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command, with its subcommand where it has them (`replay
    /// fallback`); without one, routeval's own page.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StratifyArg {
    /// Strata of equal shares of each slice's scores.
    Score,
    /// The slice as a whole.
    None,
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Request records (Parquet, CSV or JSON lines) with prompts or messages.
    #[arg(long, value_name = "FILE")]
    pub records: PathBuf,

    /// Prompts to take from each slice.
    #[arg(long, value_name = "N")]
    pub per_slice: usize,

    /// Only records from this time on: RFC 3339 or epoch milliseconds.
    #[arg(long, value_name = "T")]
    pub since: Option<String>,

    /// How to spread each slice's draw.
    #[arg(long, value_enum, default_value_t = StratifyArg::Score)]
    pub stratify: StratifyArg,

    /// With --stratify score: the number of strata.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub strata: usize,

    /// Seed of the draw.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The rubric of every sampled prompt; the default compares each tier's
    /// answer with the strongest tier's (the prompts have no reference).
    #[arg(long, value_name = "NAME", default_value = "pairwise")]
    pub rubric: String,

    /// The dataset to write (JSON lines), for `routeval run`.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum RecordsCommand {
    /// Convert LiteLLM spend logs, OpenAI-style log lines, any table by
    /// --map, or a routeval run into the request-record table (Parquet).
    Import(RecordsImportArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordsFormatArg {
    /// Rows of LiteLLM's LiteLLM_SpendLogs table (JSON lines or CSV).
    Litellm,
    /// One `{"request": ..., "response": ...}` object per line.
    OpenaiLog,
    /// The records' own fields, renamed by --map.
    Generic,
    /// A routeval run directory (`routeval run --out`).
    Run,
}

#[derive(Debug, Args)]
pub struct RecordsImportArgs {
    /// What the input is.
    #[arg(long, value_enum)]
    pub from: RecordsFormatArg,

    /// The file (or, for `run`, the run directory) to convert.
    #[arg(long, value_name = "PATH")]
    pub input: PathBuf,

    /// Generic: `field=column,...` for fields under other names.
    #[arg(long, value_name = "MAP")]
    pub map: Option<String>,

    /// The field naming each request's slice: a dotted path into the row
    /// (`team_id`, `metadata.user_api_key_team_alias`, `request.user`).
    #[arg(long, value_name = "PATH")]
    pub slice_field: Option<String>,

    /// Run: the time between consecutive prompts' records (a batch run
    /// records no arrivals).
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub interval: String,

    /// The request-record table to write (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

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
    pub fallback_ttft_ms: Option<f64>,

    /// The first-token deadline of the slow-first-token breaker.
    #[arg(long, value_name = "MS", default_value_t = 3000.0)]
    pub deadline_ms: f64,

    /// Consecutive failures that open a breaker.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub open_after: u32,

    /// How long an open breaker stays open before one half-open probe.
    #[arg(long, value_name = "MS", default_value_t = 5000.0)]
    pub open_ms: f64,

    /// When the breaker learns how a request went.
    #[arg(long, value_enum, default_value_t = LearningArg::Instantly)]
    pub learning: LearningArg,

    /// Retries and fallbacks allowed as a share of requests.
    #[arg(long, value_name = "SHARE", default_value_t = 0.1)]
    pub retry_budget: f64,

    /// A route table: the fallback route's `rpm` is the capacity its peak
    /// must fit in.
    #[arg(long, value_name = "FILE")]
    pub routes: Option<PathBuf>,

    /// Search the deadline and failure count for the lowest p95 wait.
    #[arg(long)]
    pub calibrate: bool,

    /// The most of the traffic the calibrated breaker may send to the fallback.
    #[arg(long, value_name = "SHARE", default_value_t = 0.2)]
    pub max_fallback_share: f64,

    /// With --calibrate and --routes: write the route table with the chosen
    /// breaker as the primary route's `[routes.breaker]` to this new file.
    #[arg(long, value_name = "FILE", requires_all = ["calibrate", "routes"])]
    pub write_routes: Option<PathBuf>,

    /// Print the document as JSON.
    #[arg(long)]
    pub json: bool,

    /// Also write the document here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
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

    /// Print the document as JSON.
    #[arg(long)]
    pub json: bool,

    /// Also write the document here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
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
    #[arg(long, value_name = "R", default_value_t = 4.0, requires = "from_run")]
    pub arrival_rate: f64,

    /// Replicas in the pool.
    #[arg(long, value_name = "N")]
    pub replicas: usize,

    /// Replay the arrivals this many times faster than recorded: the same
    /// traffic at a higher rate.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub speedup: f64,

    /// Prefix-cache capacity per replica, in blocks, or `inf`.
    #[arg(long, value_name = "B|inf", default_value = "inf")]
    pub cache_blocks: String,

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
    pub index_loss_at: Option<String>,

    /// KV-cache tokens per replica, for the scorer's KV-use signal
    /// (default: the cache's capacity, or 1,048,576 when unbounded).
    #[arg(long, value_name = "N")]
    pub kv_tokens: Option<u64>,

    /// Width of the windows of the timeline (`60s`, `5m`, ...).
    #[arg(long, value_name = "T", default_value = "60s")]
    pub window: String,

    /// A policy to replay, `NAME[:key=value,...]`, repeatable: round-robin,
    /// least-load, session, prefix-hash, cache-aware, sglang, scorer
    /// (default: all, with their default parameters).
    #[arg(long = "policy", value_name = "NAME[:k=v,...]")]
    pub policies: Vec<String>,

    /// Choose the cache-aware thresholds and the scorer's weights on the
    /// first half of the trace and check them on the second.
    #[arg(long)]
    pub calibrate: bool,

    /// What --calibrate optimises.
    #[arg(long, value_enum, default_value_t = ObjectiveArg::P95Ttft)]
    pub objective: ObjectiveArg,

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// A router scores each prompt; escalated prompts go to the large tier only.
    Predictive,
    /// The small tier answers first; answers the verifier rejects are escalated.
    Cascade,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Graded results: Parquet, CSV or JSON lines (see docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Quality each slice must reach: the share of acceptable answers, in (0, 1].
    #[arg(long, value_name = "Q")]
    pub target: f64,

    /// How escalation works, which decides what each threshold costs.
    #[arg(long, value_enum, default_value_t = PolicyArg::Predictive)]
    pub policy: PolicyArg,

    /// Only choose thresholds whose quality is certified at this confidence,
    /// e.g. 0.95 (exact binomial tests, fixed-sequence).
    #[arg(long, value_name = "C")]
    pub confidence: Option<f64>,

    /// With --confidence, hold it for all slices jointly: each slice is
    /// certified at 1 − (1 − C) / slices (Bonferroni).
    #[arg(long)]
    pub familywise: bool,

    /// With audited rows (`audited_ok_small`/`audited_ok_large`): the
    /// half-width of the corrected bound to size the audit for.
    #[arg(long, value_name = "W", default_value_t = 0.02)]
    pub audit_width: f64,

    /// Hold out this fraction of each slice and report the chosen threshold's
    /// quality on it.
    #[arg(long, value_name = "F")]
    pub holdout: Option<f64>,

    /// Seed of the holdout split; the split depends only on ids and the seed.
    #[arg(long, value_name = "S", default_value_t = 0, requires = "holdout")]
    pub seed: u64,

    /// One threshold over all rows instead of one per slice.
    #[arg(long)]
    pub global: bool,

    /// Print the calibration document as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Most Pareto-frontier points per slice in the document (evenly spaced,
    /// both ends kept); 0 keeps them all.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub frontier_points: usize,

    /// Also write the calibration document to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// The file's name for the score column.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "score",
        env = "ROUTEVAL_SCORE_COL"
    )]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "slice",
        env = "ROUTEVAL_SLICE_COL"
    )]
    pub slice_col: String,

    /// The tiers, cheapest first (`mini,mid,large`): each has NAME_ok and
    /// cost_NAME columns, and for --policy cascade each non-final stage a
    /// score_NAME verifier score. Default: the file's metadata, else
    /// small,large.
    #[arg(long, value_name = "A,B,...")]
    pub tiers: Option<String>,

    /// With more than two tiers: candidate thresholds per tier boundary;
    /// every distinct score when a slice has at most this many, else this
    /// many quantiles.
    #[arg(long, value_name = "N", default_value_t = crate::calibrate::DEFAULT_GRID)]
    pub grid: usize,
}

#[derive(Debug, Args)]
pub struct GateArgs {
    /// Candidate route tables (TOML).
    #[arg(long, value_name = "FILE", num_args = 1.., required = true)]
    pub candidates: Vec<PathBuf>,

    /// Graded results every candidate is scored on.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Calibration documents for the policies that take their thresholds
    /// from one, matched by policy and score column.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub calibration: Vec<PathBuf>,

    /// The deployed route config: the new one's parent, and the quality no
    /// slice may fall below by more than --max-regression. It must verify
    /// with --pubkey and be of the candidates' logical model.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// The public key --baseline was signed with (a `.pub` file or
    /// minisign's base64) [default: the `.pub` beside --key].
    #[arg(long, value_name = "KEY", requires = "baseline")]
    pub pubkey: Option<String>,

    /// Organisation-wide constraints per slice (TOML), applied to every candidate.
    #[arg(long, value_name = "FILE")]
    pub constraints: Option<PathBuf>,

    /// Quality every slice must reach, in (0, 1].
    #[arg(long, value_name = "Q")]
    pub target: f64,

    /// Hold each slice's quality lower bound at this confidence to the target.
    #[arg(long, value_name = "C")]
    pub confidence: Option<f64>,

    /// With --confidence, certify the target for all slices jointly (Holm's
    /// step-down over the slices' exact binomial tests).
    #[arg(long)]
    pub familywise: bool,

    /// The margin of the paired regression test against --baseline: a slice
    /// fails when the data show its quality more than D below the deployed
    /// config's (at --confidence, 0.95 without it).
    #[arg(long, value_name = "D", default_value_t = 0.01)]
    pub max_regression: f64,

    /// Secret key that signs the emitted config (from `routeval keygen`).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,

    /// Directory for the config, its signature, the LiteLLM export and the reports.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Days until the emitted config expires, from 1 to 3650.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    pub ttl_days: u64,

    /// sha256 of the labelled dataset behind the results, for provenance
    /// (64 hexadecimal digits).
    #[arg(long, value_name = "HEX")]
    pub dataset_sha256: Option<String>,

    /// Accept constraints that name slices the results do not have (they
    /// cannot apply to any row).
    #[arg(long)]
    pub allow_unknown_slices: bool,

    /// Sign as of this instant (YYYY-MM-DDTHH:MM:SSZ) instead of now; the
    /// gate says so on stderr. For reproducible tests.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,

    /// The file's name for the score column.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,

    /// Print the gate report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Secret key file to create (mode 0600); the public key goes beside it
    /// with `.pub`.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The route config; its signature is read from CONFIG.minisig.
    #[arg(value_name = "CONFIG")]
    pub config: PathBuf,

    /// Public key: a `.pub` file or minisign's base64 key.
    #[arg(long, value_name = "KEY")]
    pub pubkey: String,

    /// The config this one replaces: it must verify with the same key
    /// (its signature beside it), its version must be lower and its sha256
    /// must be the new one's parent.
    #[arg(long, value_name = "FILE")]
    pub previous: Option<PathBuf>,

    /// Check expiry as of this instant (YYYY-MM-DDTHH:MM:SSZ) instead of
    /// now; verify says so in its output.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
}

/// The generative model's parameters; the defaults are the documented pair.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Requests to simulate.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub requests: usize,

    /// Seed; a seed gives the same table on every machine.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// Write the graded results to this Parquet file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Print always-large, always-small, the cascade and the predictive router side by side.
    #[arg(long)]
    pub compare: bool,

    /// Difficulty ~ Beta(alpha, beta).
    #[arg(long, value_name = "A", default_value_t = 2.0)]
    pub difficulty_alpha: f64,
    #[arg(long, value_name = "B", default_value_t = 3.0)]
    pub difficulty_beta: f64,

    /// A model solves a request with probability 1 / (1 + e^(-(skill - difficulty) / steepness)).
    #[arg(long, value_name = "W", default_value_t = 0.05)]
    pub steepness: f64,
    #[arg(long, value_name = "SKILL", default_value_t = 0.55)]
    pub small_skill: f64,
    #[arg(long, value_name = "SKILL", default_value_t = 0.92)]
    pub large_skill: f64,
    /// The mid-price model of the three-tier policies in --compare.
    #[arg(long, value_name = "SKILL", default_value_t = 0.75)]
    pub mid_skill: f64,

    /// Prices, USD per million tokens.
    #[arg(long, value_name = "USD", default_value_t = 0.15)]
    pub small_input_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.60)]
    pub small_output_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 3.0)]
    pub large_input_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 15.0)]
    pub large_output_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.6)]
    pub mid_input_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 2.4)]
    pub mid_output_price: f64,

    /// Tokens per request.
    #[arg(long, value_name = "N", default_value_t = 1500.0)]
    pub input_tokens: f64,
    #[arg(long, value_name = "N", default_value_t = 300.0)]
    pub output_tokens: f64,

    /// Latencies, seconds: time to first token and to the whole answer.
    #[arg(long, value_name = "S", default_value_t = 0.25)]
    pub small_ttft: f64,
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub small_total: f64,
    #[arg(long, value_name = "S", default_value_t = 0.9)]
    pub large_ttft: f64,
    #[arg(long, value_name = "S", default_value_t = 6.0)]
    pub large_total: f64,
    #[arg(long, value_name = "S", default_value_t = 0.5)]
    pub mid_ttft: f64,
    #[arg(long, value_name = "S", default_value_t = 4.0)]
    pub mid_total: f64,

    /// Share of wrong small answers the verifier accepts.
    #[arg(long, value_name = "P", default_value_t = 0.10)]
    pub verifier_false_accept: f64,
    /// Share of right small answers the verifier rejects.
    #[arg(long, value_name = "P", default_value_t = 0.08)]
    pub verifier_false_reject: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.0002)]
    pub verifier_cost: f64,
    #[arg(long, value_name = "S", default_value_t = 0.4)]
    pub verifier_latency: f64,

    /// The router sees difficulty plus Gaussian noise of this sigma.
    #[arg(long, value_name = "SIGMA", default_value_t = 0.10)]
    pub router_noise: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.00002)]
    pub router_cost: f64,
    #[arg(long, value_name = "S", default_value_t = 0.02)]
    pub router_latency: f64,
    /// In --compare, the router escalates when its score reaches this (score >= T).
    #[arg(long, value_name = "T", default_value_t = 0.5)]
    pub router_threshold: f64,

    /// In --compare, also the cheapest thresholds of each two- and
    /// three-tier policy that reach this quality on the simulated requests.
    #[arg(long, value_name = "Q", default_value_t = 0.95)]
    pub target: f64,
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    /// The deployed route config (from `routeval gate`).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,

    /// Fresh graded results: recent traffic, graded.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present_any = ["records", "aggregates"],
        conflicts_with_all = ["records", "aggregates"]
    )]
    pub results: Option<PathBuf>,

    /// The gateway's request records instead, no labels: escalation rates,
    /// score distribution, fallbacks, first tokens, cost and model versions.
    #[arg(long, value_name = "FILE", conflicts_with = "aggregates")]
    pub records: Option<PathBuf>,

    /// Records pre-aggregated where they live (docs/records-sql.md): counts
    /// per window, slice, route, reason, model, score bin and TTFT bin.
    #[arg(long, value_name = "FILE")]
    pub aggregates: Option<PathBuf>,

    /// With --records or --aggregates: the width of the time windows.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub window: String,

    /// The graded results the config was calibrated on, to compare score
    /// distributions and escalation rates; without it, the gate's recorded
    /// metrics are the reference.
    #[arg(long, value_name = "FILE")]
    pub baseline_results: Option<PathBuf>,

    /// Quality target; defaults to the one the gate recorded in the config.
    #[arg(long, value_name = "Q")]
    pub target: Option<f64>,

    /// Confidence of the tests; defaults to the gate's, else 0.95.
    #[arg(long, value_name = "C")]
    pub confidence: Option<f64>,

    /// Print the drift document as JSON.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// Print Markdown (for an issue or $GITHUB_STEP_SUMMARY).
    #[arg(long)]
    pub markdown: bool,

    /// Also write the drift document (JSON) to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// The score column; defaults to the one the config's policy names.
    #[arg(long, value_name = "NAME")]
    pub score_col: Option<String>,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Graded results to chart (optional with --replay or --records).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["replay", "records"])]
    pub results: Option<PathBuf>,

    /// A replica-routing replay (from `routeval replay replicas --out`).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// What request records said: the documents of `drift --records`,
    /// `replay fallback` and `replay hedge` (`--out`), at most one of each.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub records: Vec<PathBuf>,

    /// Calibration documents, at most one per policy: mark the chosen
    /// thresholds and name each curve's score column.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub calibration: Vec<PathBuf>,

    /// A gate report (gate-report.json).
    #[arg(long, value_name = "FILE")]
    pub gate: Option<PathBuf>,

    /// The deployed route config: the report leads with the change from it
    /// to the proposal (the gate's emitted config with --gate, else the
    /// deployed table with the thresholds of the matching --calibration).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// The margin of the paired comparison with --baseline.
    #[arg(long, value_name = "D", default_value_t = 0.01)]
    pub max_regression: f64,

    /// The confidence of the paired comparison with --baseline.
    #[arg(long, value_name = "C", default_value_t = 0.95)]
    pub confidence: f64,

    /// A drift document (from `routeval drift --out`).
    #[arg(long, value_name = "FILE")]
    pub drift: Option<PathBuf>,

    /// Directory for report.html and summary.md.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// The report's title.
    #[arg(long, value_name = "TEXT", default_value = "routeval report")]
    pub title: String,

    /// The score column of both curves, unless named by their own flags or
    /// the calibration; `score` by default.
    #[arg(long, value_name = "NAME")]
    pub score_col: Option<String>,

    /// The router's score column, for the predictive curve.
    #[arg(long, value_name = "NAME")]
    pub predictive_score_col: Option<String>,

    /// The verifier's score column, for the cascade curve.
    #[arg(long, value_name = "NAME")]
    pub cascade_score_col: Option<String>,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Subcommand)]
pub enum RouterCommand {
    /// Fit on graded results; write the model and cross-fitted scores.
    Train(RouterTrainArgs),
    /// Score prompts with a trained model.
    Score(RouterScoreArgs),
    /// Join an external router's scores into the results by id.
    Join(RouterJoinArgs),
}

#[derive(Debug, Args)]
pub struct RouterTrainArgs {
    /// Graded results with a prompt column.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// The model trained on every row, for scoring new prompts.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Also write the results with out-of-fold scores in --into (Parquet).
    #[arg(long, value_name = "FILE")]
    pub scored_out: Option<PathBuf>,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score (a cascade's verifier score) beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: String,

    /// Folds for cross-fitting: each row is scored by a model that never saw it.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub folds: usize,

    /// Seed of the training order.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The column with the prompt text.
    #[arg(long, value_name = "NAME", default_value = "prompt")]
    pub prompt_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Args)]
pub struct RouterScoreArgs {
    /// A model from `routeval router train`.
    #[arg(long, value_name = "FILE")]
    pub router: PathBuf,

    /// Graded results with a prompt column.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// The results with the router's scores in --into (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: String,

    /// The column with the prompt text.
    #[arg(long, value_name = "NAME", default_value = "prompt")]
    pub prompt_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Args)]
pub struct RouterJoinArgs {
    /// Graded results.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// A table (CSV, JSONL or Parquet) with an `id` column and the scores.
    #[arg(long, value_name = "FILE")]
    pub scores: PathBuf,

    /// The column of --scores that holds them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub scores_col: String,

    /// The column the scores go into; another than `score` keeps the
    /// results' own score beside them.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub into: String,

    /// The results with the joined scores (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Args)]
pub struct EvaluateArgs {
    /// Graded results with router scores.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Print the metrics as JSON.
    #[arg(long)]
    pub json: bool,

    /// Seed of the random router.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The file's name for the score column.
    #[arg(long, value_name = "NAME", default_value = "score")]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(long, value_name = "NAME", default_value = "slice")]
    pub slice_col: String,
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// RouteLLM's MMLU responses: one mmlu_<subject>.csv per subject, the subject as slice.
    RoutellmMmlu {
        /// The directory of mmlu_<subject>.csv files.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        #[command(flatten)]
        common: ImportArgs,
    },
    /// RouteLLM's GSM8K responses, regraded with a rubric against GSM8K's reference answers.
    RoutellmGsm8k {
        /// gsm8k_responses.csv.
        #[arg(long, value_name = "FILE")]
        responses: PathBuf,
        /// GSM8K's test.jsonl, in the same order.
        #[arg(long, value_name = "FILE")]
        questions: PathBuf,
        /// The rubric file that grades the answers.
        #[arg(long, value_name = "FILE", default_value = "rubrics/gsm8k.toml")]
        rubric: PathBuf,
        #[command(flatten)]
        common: ImportArgs,
    },
    /// MT-Bench single-answer judgments; the question's category is the slice.
    MtBench {
        /// judgements.jsonl.
        #[arg(long, value_name = "FILE")]
        judgments: PathBuf,
        /// question.jsonl.
        #[arg(long, value_name = "FILE")]
        questions: PathBuf,
        /// A judge score at or above this is an acceptable answer.
        #[arg(long, value_name = "SCORE", default_value_t = 8.0)]
        pass_score: f64,
        #[command(flatten)]
        common: ImportArgs,
    },
    /// Any CSV, JSON-lines or Parquet table, its columns mapped to the graded-results columns.
    Generic {
        /// The table to convert.
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
        /// Column mapping, e.g. score=p_hard,small_ok=mixtral_correct (graded column = file column).
        #[arg(long, value_name = "MAP", default_value = "")]
        map: String,
        /// The graded results (Parquet).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// What every benchmark import needs: where to write, the models, prices
/// and scores.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The graded results (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// The weak model's name in the source files.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "mistralai/Mixtral-8x7B-Instruct-v0.1"
    )]
    pub small_model: String,

    /// The strong model's name in the source files.
    #[arg(long, value_name = "NAME", default_value = "gpt-4-1106-preview")]
    pub large_model: String,

    /// USD per call of the small tier.
    #[arg(
        long,
        value_name = "USD",
        requires = "cost_large",
        conflicts_with = "prices"
    )]
    pub cost_small: Option<f64>,

    /// USD per call of the large tier.
    #[arg(long, value_name = "USD", requires = "cost_small")]
    pub cost_large: Option<f64>,

    /// A price file: [models."NAME"] per_call = USD.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,

    /// Take scores from this file's column (joined by id) instead of the built-in router.
    #[arg(long, value_name = "FILE")]
    pub scores: Option<PathBuf>,

    /// The column of --scores.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "score",
        requires = "scores"
    )]
    pub scores_col: String,

    /// Folds for the built-in router's cross-fitted scores.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub folds: usize,
}

#[derive(Debug, Args)]
pub struct ServeSimArgs {
    /// The labelled prompts it knows the answers to.
    #[arg(long, value_name = "FILE")]
    pub dataset: PathBuf,

    /// The rubrics the dataset names.
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8089")]
    pub listen: std::net::SocketAddr,

    /// Seed of right and wrong answers and of faults.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// Time to first token, ms.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub ttft_ms: u64,

    /// Generation speed after the first token; 0 answers at once.
    #[arg(long, value_name = "RATE", default_value_t = 0.0)]
    pub tokens_per_second: f64,

    /// Spread of time to first token and generation speed: the σ of a
    /// log-normal factor each request draws around the values above.
    #[arg(long, value_name = "SIGMA", default_value_t = 0.0)]
    pub latency_sigma: f64,

    /// A fault profile (TOML): rates of 429s, 5xx, resets, slow or stalled or cut streams.
    #[arg(long, value_name = "FILE")]
    pub faults: Option<PathBuf>,

    /// A model's skill, `NAME=SKILL`, repeatable: changes sim-small (0.55),
    /// sim-mid (0.75), sim-large (0.92) or sim-verifier (0.8), or adds a
    /// model of that name. A model of skill s answers a prompt of difficulty
    /// d right with probability 1 / (1 + e^(−(s − d)/0.05)).
    #[arg(long = "skill", value_name = "NAME=SKILL")]
    pub skills: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The endpoints, prices, limits and generation parameters.
    #[arg(long, value_name = "FILE", default_value = "routeval.toml")]
    pub config: PathBuf,

    /// Labelled prompts: JSON lines, CSV or Parquet.
    #[arg(long, value_name = "FILE")]
    pub dataset: PathBuf,

    /// Rubrics the dataset names, and the verifier's prompt templates (prompts/).
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// The run's directory; running again on it resumes.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Take a deterministic 1/N of the prompts: shard K of N.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,

    #[command(flatten)]
    pub cache: CacheArgs,

    /// On resume, send again the calls that ended in an error.
    #[arg(long)]
    pub retry_errors: bool,

    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The run directories of every shard.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// Where the merged run goes.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct GradeArgs {
    /// A run directory from `routeval run`.
    #[arg(long, value_name = "DIR")]
    pub run: PathBuf,

    /// The rubrics the dataset names.
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// The run's dataset, if it moved since the run (its digest must match).
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,

    /// The run's config, if it moved since the run (its digest must match);
    /// its `[judge]` answers `llm_judge` checks.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The judge's answers are cached like a run's.
    #[command(flatten)]
    pub cache: CacheArgs,

    /// Grade without the prompts whose small or large call failed (counted
    /// in the output) instead of refusing the run.
    #[arg(long)]
    pub allow_missing: bool,

    /// The graded-results table (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The demo data set: prompts.jsonl, routeval.toml, faults.toml, routes/.
    #[arg(long, value_name = "DIR", default_value = "datasets/demo")]
    pub data: PathBuf,

    /// The rubrics and prompt templates.
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// Where the demo's run, tables, keys and configs go: a new or empty
    /// directory, or one an earlier demo made (which it clears).
    #[arg(long, value_name = "DIR", default_value = "runs/demo")]
    pub out: PathBuf,

    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/demo")]
    pub report: PathBuf,

    /// The quality target of every slice.
    #[arg(long, value_name = "Q", default_value_t = 0.8)]
    pub target: f64,
}

/// The response cache of `run` and of the judge in `grade`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Where answers are cached across runs.
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".routeval/cache",
        env = "ROUTEVAL_CACHE_DIR"
    )]
    pub cache_dir: PathBuf,

    /// Send every request, reading and writing no cache.
    #[arg(long)]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The cache directory, or none with `--no-cache`.
    pub fn directory(&self) -> Option<PathBuf> {
        (!self.no_cache).then(|| self.cache_dir.clone())
    }
}
