//! `routeval report`.

use std::path::PathBuf;

use clap::Args;

use crate::exit_codes::Outcome;
use crate::report::{ReportOptions, report};
use crate::units::{Confidence, Margin};

use super::print::println;

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
    #[arg(long, value_name = "D", default_value = "0.01")]
    pub max_regression: Margin,

    /// The confidence of the paired comparison with --baseline, and of what
    /// the first screen says a slice without a bound would certify.
    #[arg(long, value_name = "C", default_value = "0.95")]
    pub confidence: Confidence,

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

impl ReportArgs {
    /// The stage's options, each flag checked where it is parsed.
    pub fn options(self) -> anyhow::Result<ReportOptions> {
        Ok(ReportOptions {
            results: self.results,
            replay: self.replay,
            records: self.records,
            calibration: self.calibration,
            gate: self.gate,
            baseline: self.baseline,
            max_regression: self.max_regression,
            confidence: self.confidence,
            drift: self.drift,
            out: self.out,
            title: self.title,
            score_col: self.score_col,
            predictive_score_col: self.predictive_score_col,
            cascade_score_col: self.cascade_score_col,
            slice_col: self.slice_col,
        })
    }
}

pub fn run(args: ReportArgs) -> anyhow::Result<Outcome> {
    let written = report(&args.options()?)?;
    println(&format!(
        "report: {}\nsummary: {}",
        written.html.display(),
        written.markdown.display()
    ))?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use crate::cli::{Cli, Command};
    use crate::report::ReportOptions;
    use crate::units::{Confidence, Margin};

    fn parse(argv: &str) -> anyhow::Result<ReportOptions> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Report(args) = cli.command else {
            panic!("{argv} is a report command");
        };
        args.options()
    }

    #[test]
    fn flags_become_options() {
        let options = parse(
            "routeval report --results r.parquet --calibration a.json b.json --gate g.json \
             --baseline deployed.json --confidence 0.9 --max-regression 0.02 --out pages \
             --cascade-score-col verifier",
        )
        .unwrap();
        assert_eq!(
            options,
            ReportOptions {
                results: Some(PathBuf::from("r.parquet")),
                replay: None,
                records: Vec::new(),
                calibration: vec![PathBuf::from("a.json"), PathBuf::from("b.json")],
                gate: Some(PathBuf::from("g.json")),
                baseline: Some(PathBuf::from("deployed.json")),
                max_regression: Margin::new(0.02).unwrap(),
                confidence: Confidence::new(0.9).unwrap(),
                drift: None,
                out: PathBuf::from("pages"),
                title: "routeval report".to_owned(),
                score_col: None,
                predictive_score_col: None,
                cascade_score_col: Some("verifier".to_owned()),
                slice_col: "slice".to_owned(),
            }
        );
    }

    #[test]
    fn out_of_range_flags_are_refused_where_they_are_parsed() {
        for (flags, message) in [
            (
                "--confidence 1",
                "error: invalid value '1' for '--confidence <C>': 1: a confidence is between 0 and 1 (0.95)",
            ),
            (
                "--confidence 0",
                "error: invalid value '0' for '--confidence <C>': 0: a confidence is between 0 and 1 (0.95)",
            ),
            (
                "--max-regression 1.5",
                "error: invalid value '1.5' for '--max-regression <D>': 1.5: a margin is at least 0 and at most 1 (0.01)",
            ),
        ] {
            let error = parse(&format!(
                "routeval report --results r.parquet --out pages {flags}"
            ))
            .unwrap_err();
            assert_eq!(error.to_string().lines().next(), Some(message), "{flags}");
        }
    }
}
