//! `routeval gate`, `routeval keygen` and `routeval verify`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::Args;

use crate::clock::{Clock, FixedClock, SystemClock, Timestamp};
use crate::events::{Event, Level, Reporter};
use crate::exit_codes::Outcome;
use crate::gate::{
    GateOptions, MAX_TTL_DAYS, RollbackOptions, gate, presign_rollback, rollback, terminal,
};
use crate::routes::{generate_keys, load_public, verify_config};
use crate::schema::ColumnNames;
use crate::units::{Confidence, Margin, NonNegative, Target};

use super::print::println;

#[derive(Debug, Args)]
pub struct GateArgs {
    /// Candidate route tables (TOML).
    #[arg(long, value_name = "FILE", num_args = 1.., required_unless_present = "rollback_to")]
    pub candidates: Vec<PathBuf>,

    /// Graded results every candidate is scored on.
    #[arg(long, value_name = "FILE", required_unless_present = "rollback_to")]
    pub results: Option<PathBuf>,

    /// Roll back: sign this earlier config's table again, unevaluated, as
    /// the version after --baseline (the deployed config, its parent), so
    /// serve takes it as a forward step. Both must verify with --pubkey.
    #[arg(
        long,
        value_name = "FILE",
        requires = "baseline",
        conflicts_with_all = ["candidates", "results", "calibration", "constraints", "target", "confidence", "familywise", "router", "dataset_sha256", "production"]
    )]
    pub rollback_to: Option<PathBuf>,

    /// Calibration documents for the policies that take their thresholds
    /// from one, matched by policy and score column.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub calibration: Vec<PathBuf>,

    /// The deployed route config: the new one's parent, and the quality no
    /// slice may fall below by more than --max-regression. It must verify
    /// with --pubkey and be of the candidates' logical model.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// A candidate's estimates on the traffic the --baseline config served
    /// (`routeval replay candidate --out`), one per candidate (repeatable):
    /// each must meet the target there and not regress against the running
    /// config, beside the offline checks.
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub production: Vec<PathBuf>,

    /// The public key --baseline was signed with (a `.pub` file or
    /// minisign's base64) [default: the `.pub` beside --key].
    #[arg(long, value_name = "KEY", requires = "baseline")]
    pub pubkey: Option<String>,

    /// Organisation-wide constraints per slice (TOML), applied to every candidate.
    #[arg(long, value_name = "FILE")]
    pub constraints: Option<PathBuf>,

    /// Quality every slice must reach, in (0, 1].
    #[arg(long, value_name = "Q", required_unless_present = "rollback_to")]
    pub target: Option<Target>,

    /// Hold each slice's quality lower bound at this confidence to the target.
    #[arg(long, value_name = "C")]
    pub confidence: Option<Confidence>,

    /// With --confidence, certify the target for all slices jointly (Holm's
    /// step-down over the slices' exact binomial tests).
    #[arg(long)]
    pub familywise: bool,

    /// The margin of the paired regression test against --baseline: a slice
    /// fails when the data show its quality more than D below the deployed
    /// config's (at --confidence, 0.95 without it).
    #[arg(long, value_name = "D", default_value = "0.01")]
    pub max_regression: Margin,

    /// The built-in router (`router train --out`) whose scores a predictive
    /// candidate's thresholds apply to; the signed config pins its sha256 so
    /// `serve` scores with exactly this model.
    #[arg(long, value_name = "FILE")]
    pub router: Option<PathBuf>,

    /// The results' column with the prompt text: --router's scores of the
    /// prompts are checked against the candidate's score column.
    #[arg(long, value_name = "NAME", default_value = "prompt")]
    pub prompt_col: String,

    /// `routeval serve`'s `/v1` URL: the LiteLLM export sends the logical
    /// model there. Without it, only a single-route policy is exported.
    #[arg(long, value_name = "URL", value_parser = crate::client::parse_http_url)]
    pub serve_url: Option<String>,

    /// The variable holding the key LiteLLM calls `routeval serve` with.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "ROUTEVAL_SERVE_KEY",
        requires = "serve_url"
    )]
    pub serve_key_env: String,

    /// Where a cascade candidate's `[serving.verifier] template` is found
    /// (its `prompts/NAME.toml`).
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// Secret key that signs the emitted config (from `routeval keygen`).
    /// Without it the gate evaluates, chooses and reports, and signs
    /// nothing: the pull-request half of a gate whose signing runs in a
    /// trusted job.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,

    /// The largest increase of mean cost per request over --baseline a
    /// candidate may have on the same rows (0.1: 10% more); a table that
    /// accepts more says so in its `[gate] accept_cost_increase`.
    #[arg(long, value_name = "SHARE", default_value = "0.1")]
    pub max_cost_increase: NonNegative,

    /// Score the --baseline config's own table, as it was signed, beside
    /// the candidates: a renewal keeps the deployed thresholds while they
    /// still pass on the new rows.
    #[arg(long, requires = "baseline", conflicts_with = "rollback_to")]
    pub include_baseline: bool,

    /// Directory for the config, its signature, the LiteLLM export and the reports.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Days until the emitted config expires, from 1 to 3650.
    #[arg(long, value_name = "DAYS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=MAX_TTL_DAYS))]
    pub ttl_days: u64,

    /// sha256 of the labelled dataset behind the results, for provenance
    /// (64 hexadecimal digits).
    #[arg(long, value_name = "HEX", value_parser = crate::digest::parse_sha256)]
    pub dataset_sha256: Option<String>,

    /// Accept constraints that name slices the results do not have (they
    /// cannot apply to any row).
    #[arg(long)]
    pub allow_unknown_slices: bool,

    /// Sign as of this instant (YYYY-MM-DDTHH:MM:SSZ) instead of now; the
    /// gate says so on stderr. For reproducible tests.
    #[arg(long, value_name = "TIME")]
    pub at: Option<Timestamp>,

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
    pub at: Option<Timestamp>,
}

/// Checks the flags and converts them to the stage's options.
pub fn options(args: GateArgs) -> anyhow::Result<GateOptions> {
    let (Some(target), Some(results)) = (args.target, args.results.clone()) else {
        bail!("--target and --results are needed unless --rollback-to is given");
    };
    if args.familywise && args.confidence.is_none() {
        bail!("--familywise needs --confidence: a point estimate guarantees nothing to share");
    }
    let serve = serve_endpoint(&args);
    Ok(GateOptions {
        serve,
        candidates: args.candidates,
        results,
        names: ColumnNames::new(args.score_col, args.slice_col),
        calibrations: args.calibration,
        baseline: args.baseline,
        baseline_pubkey: args.pubkey,
        constraints: args.constraints,
        target,
        confidence: args.confidence,
        max_regression: args.max_regression,
        max_cost_increase: args.max_cost_increase,
        include_baseline: args.include_baseline,
        key: args.key,
        out: args.out,
        ttl_days: args.ttl_days,
        dataset_sha256: args.dataset_sha256,
        allow_unknown_slices: args.allow_unknown_slices,
        familywise: args.familywise,
        router: args.router,
        prompt_col: args.prompt_col,
        rubrics: args.rubrics,
        production: args.production,
    })
}

/// `--rollback-to` and the flags it takes, as the stage's options.
fn rollback_options(args: GateArgs, to: PathBuf) -> anyhow::Result<RollbackOptions> {
    let serve = serve_endpoint(&args);
    Ok(RollbackOptions {
        to,
        deployed: args
            .baseline
            .expect("clap requires --baseline with --rollback-to"),
        pubkey: args.pubkey,
        key: args
            .key
            .ok_or_else(|| anyhow::anyhow!("--rollback-to signs a config: give --key"))?,
        out: args.out,
        ttl_days: args.ttl_days,
        serve,
    })
}

pub fn run(args: GateArgs, reporter: &dyn Reporter) -> anyhow::Result<Outcome> {
    let (json, at) = (args.json, args.at);
    let clock = clock_at(at);
    let report = match args.rollback_to.clone() {
        Some(to) => rollback(&rollback_options(args, to)?, clock.as_ref())?,
        None => {
            let options = options(args)?;
            let report = gate(&options, clock.as_ref())?;
            say_rollback(
                presign_rollback(&options, &report, clock.as_ref()),
                reporter,
            );
            report
        }
    };
    if let Some(at) = &at {
        reporter.report(Event::Message {
            stage: "gate",
            level: Level::Note,
            text: format!("the gate's clock was set to {at} by --at, not the current time"),
        });
    }
    super::print::emit(&report, "the gate report", None, json, || terminal(&report))?;
    Ok(if report.chosen.is_some() {
        Outcome::Passed
    } else {
        Outcome::CheckFailed
    })
}

/// Where the way back was signed, or why it was not: the new config
/// stands either way.
fn say_rollback(presigned: anyhow::Result<Option<PathBuf>>, reporter: &dyn Reporter) {
    let (level, text) = match presigned {
        Ok(None) => return,
        Ok(Some(path)) => (
            Level::Note,
            format!(
                "the way back is signed: deploy {} as the next version to return to the deployed table, no key needed",
                path.display()
            ),
        ),
        Err(error) => (
            Level::Warning,
            format!("no rollback was signed in advance: {error:#}"),
        ),
    };
    reporter.report(Event::Message {
        stage: "gate",
        level,
        text,
    });
}

/// `--serve-url` and `--serve-key-env`, for the LiteLLM export.
fn serve_endpoint(args: &GateArgs) -> Option<crate::gate::ServeEndpoint> {
    args.serve_url
        .as_ref()
        .map(|url| crate::gate::ServeEndpoint {
            url: url.clone(),
            key_env: args.serve_key_env.clone(),
        })
}

/// The system clock, or the instant `--at` names.
fn clock_at(at: Option<Timestamp>) -> Box<dyn Clock> {
    match at {
        None => Box::new(SystemClock),
        Some(Timestamp(now)) => Box::new(FixedClock(now)),
    }
}

pub fn keygen(args: KeygenArgs) -> anyhow::Result<Outcome> {
    let public = generate_keys(&args.out)?;
    println(&format!(
        "secret key: {} (keep it secret)\npublic key: {}",
        args.out.display(),
        public.display()
    ))?;
    Ok(Outcome::Passed)
}

pub fn verify(args: VerifyArgs) -> anyhow::Result<Outcome> {
    let public = load_public(&args.pubkey)?;
    let clock = clock_at(args.at);
    let as_of = args
        .at
        .as_ref()
        .map(|at| format!(" (as of {at}, --at)"))
        .unwrap_or_default();
    match verify_config(
        &args.config,
        &public,
        args.previous.as_deref(),
        clock.as_ref(),
    )? {
        Ok(verified) => {
            println(&format!(
                "verified {}: {} version {}, sha256 {}, expires {}{as_of}",
                args.config.display(),
                verified.config.config_id,
                verified.config.version,
                verified.sha256,
                verified.config.expires_at
            ))?;
            Ok(Outcome::Passed)
        }
        Err(failure) => {
            let _ = writeln!(
                std::io::stderr(),
                "verification failed: {}: {failure}{as_of}",
                args.config.display()
            );
            Ok(Outcome::CheckFailed)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<GateOptions> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Gate(args) = cli.command else {
            panic!("{argv} is a gate command");
        };
        options(args)
    }

    #[test]
    fn flags_become_options() {
        let options = parse(
            "routeval gate --candidates a.toml b.toml --results r.parquet --calibration c.json p.json --baseline v3.json --pubkey old.pub --constraints org.toml --target 0.9 --confidence 0.95 --familywise --max-regression 0.01 --key k.key --out dist --ttl-days 7 --router router.bin --serve-url http://serve:8090/v1 --score-col p --slice-col tenant --allow-unknown-slices",
        )
        .unwrap();
        assert_eq!(
            options.candidates,
            [PathBuf::from("a.toml"), PathBuf::from("b.toml")]
        );
        assert_eq!(
            options.calibrations,
            [PathBuf::from("c.json"), PathBuf::from("p.json")]
        );
        assert_eq!(options.baseline, Some(PathBuf::from("v3.json")));
        assert_eq!(options.baseline_pubkey.as_deref(), Some("old.pub"));
        assert_eq!(options.constraints, Some(PathBuf::from("org.toml")));
        assert_eq!(
            (options.target, options.confidence, options.max_regression),
            (
                Target::new(0.9).unwrap(),
                Some(Confidence::new(0.95).unwrap()),
                Margin::new(0.01).unwrap()
            )
        );
        assert!(options.familywise && options.allow_unknown_slices);
        assert_eq!(
            (options.key, options.out, options.ttl_days),
            (Some(PathBuf::from("k.key")), PathBuf::from("dist"), 7)
        );
        assert_eq!(options.router, Some(PathBuf::from("router.bin")));
        assert_eq!(
            options.serve,
            Some(crate::gate::ServeEndpoint {
                url: "http://serve:8090/v1".to_owned(),
                key_env: "ROUTEVAL_SERVE_KEY".to_owned(),
            })
        );
        assert_eq!(
            (options.names.score.as_str(), options.names.slice.as_str()),
            ("p", "tenant")
        );
    }

    #[test]
    fn out_of_range_flags_are_named() {
        let base = "routeval gate --candidates a.toml --results r.csv --key k --out d";
        for (flags, message) in [
            (
                "--target 0",
                "error: invalid value '0' for '--target <Q>': 0: a target is above 0 and at most 1",
            ),
            (
                "--target 0.9 --ttl-days 0",
                "error: invalid value '0' for '--ttl-days <DAYS>': 0 is not in 1..=3650",
            ),
            (
                "--target 0.9 --confidence 1",
                "error: invalid value '1' for '--confidence <C>': 1: a confidence is between 0 and 1",
            ),
            (
                "--target 0.9 --familywise",
                "--familywise needs --confidence",
            ),
            (
                "--target 0.9 --max-regression 2",
                "error: invalid value '2' for '--max-regression <D>': 2: a margin is at least 0 and at most 1",
            ),
            (
                "--target 0.9 --serve-url serve:8090",
                "error: invalid value 'serve:8090' for '--serve-url <URL>': serve:8090: an http:// or https:// URL with a host",
            ),
            (
                "--target 0.9 --dataset-sha256 abc",
                "error: invalid value 'abc' for '--dataset-sha256 <HEX>': \"abc\": a sha256 is 64 hexadecimal digits",
            ),
        ] {
            let argv = format!("{base} {flags}");
            let message_seen = parse(&argv).unwrap_err().to_string();
            assert!(message_seen.starts_with(message), "{argv}: {message_seen}");
        }
    }
}
