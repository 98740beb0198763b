//! `routeval sample`.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, ValueEnum};

use crate::exit_codes::Outcome;
use crate::sample::{AuditOptions, SampleOptions, SampleRequest, draw_into};
use crate::units::Share;

use super::columns::ColumnArgs;
use super::print::println;

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
    #[arg(long, value_name = "FILE", required_unless_present = "audit")]
    pub records: Option<PathBuf>,

    /// Prompts to take from each slice.
    #[arg(long, value_name = "N", required_unless_present_any = ["audit", "label_share", "config"])]
    pub per_slice: Option<NonZeroUsize>,

    /// Draw the label set of logged answers instead: each decision serve
    /// recorded, on its own with probability Q, for `replay candidate
    /// --labels`.
    #[arg(long, value_name = "Q", conflicts_with_all = ["per_slice", "audit", "rubric", "since"], requires = "records", )]
    pub label_share: Option<Share>,

    /// With --label-share, when a judge labels: mark each drawn row, on its
    /// own with probability A, for a person to audit; their verdicts
    /// correct the judge's in `replay candidate`.
    #[arg(long, value_name = "A")]
    pub audit_share: Option<Share>,

    /// Draw the label set the signed config committed
    /// (`[serving.explore.labels]`: its share and seed, fixed before the
    /// records existed), of that config's decisions only.
    #[arg(long, value_name = "CONFIG.json", conflicts_with_all = ["per_slice", "audit", "rubric", "since"], requires = "records")]
    pub config: Option<PathBuf>,

    /// Draw N graded rows per slice for a human to audit instead: from
    /// --results, stratified by score, each with its inclusion probability,
    /// for `calibrate --audits`.
    #[arg(long, value_name = "N", conflicts_with_all = ["records", "per_slice", "since", "rubric"], requires = "results")]
    pub audit: Option<NonZeroUsize>,

    /// With --audit: the graded results to draw from.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["records", "per_slice"])]
    pub results: Option<PathBuf>,

    /// With --audit: the results' score column (which the strata cut) and
    /// slice column.
    #[command(flatten)]
    pub columns: ColumnArgs,

    /// Only records from this time on: RFC 3339 or epoch milliseconds.
    #[arg(long, value_name = "T", value_parser = crate::records::parse_timestamp)]
    pub since: Option<i64>,

    /// How to spread each slice's draw.
    #[arg(long, value_enum, default_value_t = StratifyArg::Score)]
    pub stratify: StratifyArg,

    /// With --stratify score: the number of strata.
    #[arg(long, value_name = "K", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub strata: u32,

    /// Seed of the draw (0 when not given).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// The rubric of every sampled prompt; the default compares each tier's
    /// answer with the strongest tier's (the prompts have no reference).
    #[arg(long, value_name = "NAME")]
    pub rubric: Option<String>,

    /// The dataset to write (JSON lines), for `routeval run`; with --audit,
    /// the audit set (JSON lines, or CSV when the name ends in .csv).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Checks the flags and converts them to the stage's options.
pub fn request(args: &SampleArgs) -> anyhow::Result<SampleRequest> {
    let strata = match args.stratify {
        StratifyArg::Score => args.strata as usize,
        StratifyArg::None => 1,
    };
    if let (Some(size), Some(results)) = (args.audit, &args.results) {
        return Ok(SampleRequest::Audits {
            results: results.clone(),
            names: args.columns.names(),
            options: AuditOptions {
                size: size.get(),
                strata,
                seed: args.seed.unwrap_or(0),
            },
        });
    }
    if args.audit_share.is_some() && args.label_share.is_none() && args.config.is_none() {
        bail!("--audit-share marks rows of a label set: give --label-share or --config");
    }
    if let Some(records) = &args.records
        && (args.label_share.is_some() || args.config.is_some())
    {
        return Ok(SampleRequest::Labels {
            records: records.clone(),
            share: args.label_share,
            seed: args.seed,
            config: args.config.clone(),
            audit: args.audit_share,
        });
    }
    let (Some(records), Some(per_slice)) = (&args.records, args.per_slice) else {
        bail!("--records and --per-slice are needed, or --audit and --results");
    };
    let rubric = args.rubric.clone().unwrap_or_else(|| "pairwise".to_owned());
    if rubric.trim().is_empty() {
        bail!("--rubric is empty");
    }
    Ok(SampleRequest::Prompts(SampleOptions {
        records: records.clone(),
        per_slice: per_slice.get(),
        since_ms: args.since,
        strata,
        seed: args.seed.unwrap_or(0),
        rubric,
    }))
}

pub fn run(args: &SampleArgs) -> anyhow::Result<Outcome> {
    println(&draw_into(&request(args)?, &args.out)?)?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<SampleRequest> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Sample(args) = cli.command else {
            panic!("{argv} is a sample command");
        };
        request(&args)
    }

    #[test]
    fn flags_become_a_request() {
        assert_eq!(
            parse(
                "routeval sample --records r.jsonl --per-slice 20 --strata 4 --seed 3 --out s.jsonl"
            )
            .unwrap(),
            SampleRequest::Prompts(SampleOptions {
                records: PathBuf::from("r.jsonl"),
                per_slice: 20,
                since_ms: None,
                strata: 4,
                seed: 3,
                rubric: "pairwise".to_owned(),
            })
        );
        let SampleRequest::Audits {
            results,
            names,
            options,
        } = parse(
            "routeval sample --audit 30 --results g.parquet --score-col p --stratify none --seed 8 --out a.csv",
        )
        .unwrap() else {
            panic!("an audit request");
        };
        assert_eq!(results, PathBuf::from("g.parquet"));
        assert_eq!(names.score, "p");
        assert_eq!(
            options,
            AuditOptions {
                size: 30,
                strata: 1,
                seed: 8
            }
        );
    }

    #[test]
    fn the_two_draws_do_not_mix() {
        for (argv, message) in [
            ("routeval sample --audit 30 --out a.csv", "--results <FILE>"),
            (
                "routeval sample --audit 30 --results g.csv --records r.jsonl --out a.csv",
                "cannot be used with",
            ),
            (
                "routeval sample --results g.csv --records r.jsonl --per-slice 3 --out a.csv",
                "cannot be used with",
            ),
            (
                "routeval sample --results g.csv --out a.csv",
                "--records <FILE>",
            ),
            (
                "routeval sample --records r.jsonl --out s.jsonl",
                "--per-slice <N>",
            ),
            (
                "routeval sample --audit 0 --results g.csv --out a.csv",
                "invalid value '0' for '--audit <N>': number would be zero for non-zero type",
            ),
            (
                "routeval sample --records r.jsonl --per-slice 5 --strata 101 --out s.jsonl",
                "invalid value '101' for '--strata <K>': 101 is not in 1..=100",
            ),
            (
                "routeval sample --records r.jsonl --per-slice 5 --since yesterday --out s.jsonl",
                "invalid value 'yesterday' for '--since <T>'",
            ),
        ] {
            let error = parse(argv).unwrap_err().to_string();
            assert!(error.contains(message), "{argv}: {error}");
        }
    }
}
