//! `routeval drift`.

use std::path::PathBuf;

use clap::Args;

use crate::atomic::{Named, Output, check_outputs};
use crate::drift::{
    Arl, DRIFT_STATE_OUTPUT, DriftOptions, RecordsDriftOptions, RecordsInput, drift, drift_records,
    markdown, render_records, terminal,
};
use crate::exit_codes::Outcome;
use crate::schema::{DRIFT_OUTPUT, RECORDS_DRIFT_OUTPUT, Verdict};
use crate::units::{Confidence, Span, Target};

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
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = Span::at_least_a_millisecond)]
    pub window: Span,

    /// The graded results the config was calibrated on, to compare score
    /// distributions and escalation rates; without it, the gate's recorded
    /// metrics are the reference.
    #[arg(long, value_name = "FILE")]
    pub baseline_results: Option<PathBuf>,

    /// Quality target; defaults to the one the gate recorded in the config.
    #[arg(long, value_name = "Q")]
    pub target: Option<Target>,

    /// Confidence of the tests; defaults to the gate's, else 0.95.
    #[arg(long, value_name = "C")]
    pub confidence: Option<Confidence>,

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

    /// The anytime-valid monitor's state, carried between scheduled runs
    /// (made on the first, updated after each): quality and escalation are
    /// judged over every run so far, with the false-alarm bound held for
    /// all time.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["records", "aggregates"])]
    pub state: Option<PathBuf>,

    /// With --state: how many runs, on average, before the "changed since
    /// calibration" detector false-alarms on unchanged traffic (set when the
    /// state is made; a state keeps its own).
    #[arg(long, value_name = "RUNS", default_value_t = Arl::DEFAULT, requires = "state")]
    pub arl: Arl,
}

/// What `drift` was asked to check: fresh graded results, or the
/// gateway's records.
#[derive(Debug, Clone, PartialEq)]
pub enum DriftRequest {
    Graded(DriftOptions),
    Records(RecordsDriftOptions),
}

/// Checks the flags and converts them to the stage's options.
pub fn request(args: &DriftArgs) -> anyhow::Result<DriftRequest> {
    let input = match (&args.records, &args.aggregates) {
        (Some(path), _) => Some(RecordsInput::Records(path.clone())),
        (None, Some(path)) => Some(RecordsInput::Aggregates(path.clone())),
        (None, None) => None,
    };
    if let Some(input) = input {
        let window_ms = args.window.whole_milliseconds() as i64;
        return Ok(DriftRequest::Records(RecordsDriftOptions {
            config: args.config.clone(),
            input,
            baseline_results: args.baseline_results.clone(),
            window_ms,
        }));
    }
    let results = args.results.clone().expect("clap requires --results");
    Ok(DriftRequest::Graded(DriftOptions {
        config: args.config.clone(),
        results,
        baseline_results: args.baseline_results.clone(),
        slice_col: args.slice_col.clone(),
        score_col: args.score_col.clone(),
        target: args.target,
        confidence: args.confidence,
        state: args.state.clone(),
        arl: args.arl,
    }))
}

pub fn run(args: DriftArgs) -> anyhow::Result<Outcome> {
    match request(&args)? {
        DriftRequest::Graded(options) => graded(&options, &args),
        DriftRequest::Records(options) => from_records(&options, &args),
    }
}

fn graded(options: &DriftOptions, args: &DriftArgs) -> anyhow::Result<Outcome> {
    let mut inputs = vec![
        Named::new(&options.config, "--config"),
        Named::new(&options.results, "--results"),
    ];
    if let Some(baseline) = &options.baseline_results {
        inputs.push(Named::new(baseline, "--baseline-results"));
    }
    let mut outputs = Vec::new();
    if let Some(out) = &args.out {
        outputs.push(Output::new(out, "--out", &DRIFT_OUTPUT));
    }
    if let Some(state) = &args.state {
        outputs.push(Output::new(state, "--state", &DRIFT_STATE_OUTPUT));
    }
    check_outputs(&outputs, &inputs)?;
    let (document, state) = drift(options)?;
    let outcome = emit(&document, document.verdict, args, || {
        if args.markdown {
            markdown(&document)
        } else {
            terminal(&document)
        }
    })?;
    if let (Some(path), Some(state)) = (&args.state, state) {
        state.write(path)?;
    }
    Ok(outcome)
}

/// Writes the document to `--out`, prints it (JSON with `--json`, else
/// `render`), and fails the check when something needs recalibration.
fn emit<T: serde::Serialize>(
    document: &T,
    verdict: Verdict,
    args: &DriftArgs,
    render: impl FnOnce() -> String,
) -> anyhow::Result<Outcome> {
    super::print::emit(
        document,
        "the drift document",
        args.out.as_deref(),
        args.json,
        render,
    )?;
    Ok(if verdict == Verdict::Recalibrate {
        Outcome::CheckFailed
    } else {
        Outcome::Passed
    })
}

/// `drift --records` and `drift --aggregates`.
fn from_records(options: &RecordsDriftOptions, args: &DriftArgs) -> anyhow::Result<Outcome> {
    if let Some(out) = &args.out {
        let (path, flag) = match &options.input {
            RecordsInput::Records(path) => (path, "--records"),
            RecordsInput::Aggregates(path) => (path, "--aggregates"),
        };
        let mut inputs = vec![
            Named::new(&options.config, "--config"),
            Named::new(path, flag),
        ];
        if let Some(baseline) = &options.baseline_results {
            inputs.push(Named::new(baseline, "--baseline-results"));
        }
        check_outputs(&[Output::new(out, "--out", &RECORDS_DRIFT_OUTPUT)], &inputs)?;
    }
    let document = drift_records(options)?;
    emit(&document, document.verdict, args, || {
        render_records(&document, args.markdown)
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<DriftRequest> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Drift(args) = cli.command else {
            panic!("{argv} is a drift command");
        };
        request(&args)
    }

    #[test]
    fn flags_become_a_request() {
        assert_eq!(
            parse("routeval drift --config c.json --records r.parquet --window 10m --baseline-results g.parquet").unwrap(),
            DriftRequest::Records(RecordsDriftOptions {
                config: PathBuf::from("c.json"),
                input: RecordsInput::Records(PathBuf::from("r.parquet")),
                baseline_results: Some(PathBuf::from("g.parquet")),
                window_ms: 600_000,
            })
        );
        let DriftRequest::Graded(options) = parse(
            "routeval drift --config c.json --results fresh.csv --target 0.85 --confidence 0.9 --score-col router_score --slice-col tenant --state s.json",
        )
        .unwrap() else {
            panic!("a graded request");
        };
        assert_eq!(options.results, PathBuf::from("fresh.csv"));
        assert_eq!(
            (options.target, options.confidence),
            (
                Some(Target::new(0.85).unwrap()),
                Some(Confidence::new(0.9).unwrap())
            )
        );
        assert_eq!(options.score_col.as_deref(), Some("router_score"));
        assert_eq!(options.slice_col, "tenant");
        assert_eq!(options.state, Some(PathBuf::from("s.json")));
    }

    #[test]
    fn out_of_range_flags_are_named() {
        for (argv, message) in [
            (
                "routeval drift --config c --results r --target 1.5",
                "error: invalid value '1.5' for '--target <Q>': 1.5: a target is above 0 and at most 1 (0.9)",
            ),
            (
                "routeval drift --config c --results r --confidence 0",
                "error: invalid value '0' for '--confidence <C>': 0: a confidence is between 0 and 1 (0.95)",
            ),
            (
                "routeval drift --config c --records r --window 0s",
                "error: invalid value '0s' for '--window <DURATION>': 0s: expected a span of at least 1ms",
            ),
        ] {
            let error = parse(argv).unwrap_err().to_string();
            assert_eq!(error.lines().next(), Some(message), "{argv}");
        }
    }
}
