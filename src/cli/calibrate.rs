//! `routeval calibrate`: flags to options, then the table or JSON out.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, ValueEnum};

use crate::atomic::{Named, Output, check_outputs};
use crate::calibrate::{CalibrateOptions, calibrate, render_table};
use crate::exit_codes::Outcome;
use crate::schema::CALIBRATION_OUTPUT;
use crate::schema::{AuditDraw, ColumnNames, Holdout, Policy, Scope, TierTest, Tiers};
use crate::units::{Confidence, Fraction, Target};

use super::columns::ColumnArgs;
use super::print::emit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// A router scores each prompt; escalated prompts go to the large tier only.
    Predictive,
    /// The small tier answers first; answers the verifier rejects are escalated.
    Cascade,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TierTestArg {
    /// Each assignment at the full level, along an order found on a third
    /// of the slice's rows, tested on the rest.
    FixedSequence,
    /// Every assignment at (1 − C) / candidates.
    Bonferroni,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Graded results: Parquet, CSV or JSON lines (see docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,

    /// Quality each slice must reach: the share of acceptable answers, in (0, 1].
    #[arg(long, value_name = "Q")]
    pub target: Target,

    /// How escalation works, which decides what each threshold costs.
    #[arg(long, value_enum, default_value_t = PolicyArg::Predictive)]
    pub policy: PolicyArg,

    /// Only choose thresholds whose quality is certified at this confidence,
    /// e.g. 0.95 (exact binomial tests, fixed-sequence).
    #[arg(long, value_name = "C")]
    pub confidence: Option<Confidence>,

    /// With --confidence, hold it for all slices jointly: each slice is
    /// certified at 1 − (1 − C) / slices (Bonferroni).
    #[arg(long)]
    pub familywise: bool,

    /// With --confidence over more than two tiers: `fixed-sequence` tests
    /// each assignment at the full level along an order found on every third
    /// row of the slice; `bonferroni` tests every one at (1 − C) / candidates.
    #[arg(
        long,
        value_enum,
        value_name = "TEST",
        default_value = "fixed-sequence"
    )]
    pub tier_test: TierTestArg,

    /// With --confidence over more than two tiers: an earlier calibration
    /// of the same tiers (on other rows) whose frontier orders each slice's
    /// candidates, so every row tests them instead of two thirds.
    #[arg(long, value_name = "FILE", requires = "confidence")]
    pub order_from: Option<PathBuf>,

    /// With audited rows (`audited_ok_small`/`audited_ok_large`): the
    /// half-width of the corrected bound to size the audit for.
    #[arg(long, value_name = "W", default_value = "0.02")]
    pub audit_width: Fraction,

    /// An audit set from `routeval sample --audit`, its verdicts filled in:
    /// the draw is made again from --results and must match; each row
    /// counts with 1 / its inclusion probability.
    #[arg(long, value_name = "FILE")]
    pub audits: Option<PathBuf>,

    /// Hold out this fraction of each slice and report the chosen threshold's
    /// quality on it.
    #[arg(long, value_name = "F")]
    pub holdout: Option<Fraction>,

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

    #[command(flatten)]
    pub columns: ColumnArgs,

    /// The tiers, cheapest first (`mini,mid,large`): each has NAME_ok and
    /// cost_NAME columns, and for --policy cascade each non-final stage a
    /// score_NAME verifier score. Default: the file's metadata, else
    /// small,large.
    #[arg(long, value_name = "A,B,...", value_parser = Tiers::parse)]
    pub tiers: Option<Tiers>,

    /// With more than two tiers: candidate thresholds per tier boundary;
    /// every distinct score when a slice has at most this many, else this
    /// many quantiles.
    #[arg(long, value_name = "N", default_value_t = crate::calibrate::DEFAULT_GRID)]
    pub grid: usize,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<Outcome> {
    let (names, options) = options(&args)?;
    if let Some(out) = &args.out {
        let mut inputs = vec![Named::new(&args.results, "--results")];
        if let Some(audits) = &args.audits {
            inputs.push(Named::new(audits, "--audits"));
        }
        check_outputs(&[Output::new(out, "--out", &CALIBRATION_OUTPUT)], &inputs)?;
    }
    let document = calibrate(&args.results, names, &options)?;
    let unrecorded = document
        .slices
        .iter()
        .filter(|slice| {
            slice
                .audit
                .as_ref()
                .is_some_and(|audit| audit.draw == AuditDraw::Unrecorded)
        })
        .count();
    if unrecorded > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {}: the audited rows of {unrecorded} slices have no recorded draw; the correction assumes they are a uniform random sample of each slice, which nothing checked (draw them with routeval sample --audit N and pass --audits)",
            args.results.display()
        );
    }
    emit(
        &document,
        "the calibration",
        args.out.as_deref(),
        args.json,
        || render_table(&document),
    )?;
    Ok(if document.feasible {
        Outcome::Passed
    } else {
        Outcome::CheckFailed
    })
}

/// Converts the flags to the stage's options.
pub fn options(args: &CalibrateArgs) -> anyhow::Result<(ColumnNames, CalibrateOptions)> {
    if args.familywise && args.confidence.is_none() {
        bail!("--familywise needs --confidence: a plain fit guarantees nothing to share");
    }
    let options = CalibrateOptions {
        policy: match args.policy {
            PolicyArg::Predictive => Policy::Predictive,
            PolicyArg::Cascade => Policy::Cascade,
        },
        target: args.target,
        confidence: args.confidence,
        holdout: args.holdout.map(|fraction| Holdout {
            fraction: fraction.get(),
            seed: args.seed,
        }),
        scope: if args.global {
            Scope::Global
        } else {
            Scope::PerSlice
        },
        frontier_points: args.frontier_points,
        familywise: args.familywise,
        audit_width: args.audit_width,
        audits: args.audits.clone(),
        tier_test: match args.tier_test {
            TierTestArg::FixedSequence => TierTest::FixedSequence,
            TierTestArg::Bonferroni => TierTest::Bonferroni,
        },
        order_from: args.order_from.clone(),
        tiers: args.tiers.clone(),
        grid: args.grid,
    };
    Ok((args.columns.names(), options))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<(ColumnNames, CalibrateOptions)> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Calibrate(args) = cli.command else {
            panic!("{argv} is a calibrate command");
        };
        options(&args)
    }

    #[test]
    fn flags_become_options() {
        let table = [
            (
                "routeval calibrate --results r.parquet --target 0.9",
                CalibrateOptions {
                    policy: Policy::Predictive,
                    target: Target::new(0.9).unwrap(),
                    confidence: None,
                    holdout: None,
                    scope: Scope::PerSlice,
                    frontier_points: 256,
                    familywise: false,
                    audit_width: Fraction::new(0.02).unwrap(),
                    audits: None,
                    tier_test: TierTest::FixedSequence,
                    order_from: None,
                    tiers: None,
                    grid: crate::calibrate::DEFAULT_GRID,
                },
            ),
            (
                "routeval calibrate --results r.csv --target 1 --policy cascade --confidence 0.95 --holdout 0.25 --seed 9 --global --frontier-points 0 --familywise --audits a.csv --tier-test bonferroni --tiers a,b,c --grid 9",
                CalibrateOptions {
                    policy: Policy::Cascade,
                    target: Target::new(1.0).unwrap(),
                    confidence: Some(Confidence::new(0.95).unwrap()),
                    holdout: Some(Holdout {
                        fraction: 0.25,
                        seed: 9,
                    }),
                    scope: Scope::Global,
                    frontier_points: 0,
                    familywise: true,
                    audit_width: Fraction::new(0.02).unwrap(),
                    audits: Some(PathBuf::from("a.csv")),
                    tier_test: TierTest::Bonferroni,
                    order_from: None,
                    tiers: Some(Tiers::parse("a,b,c").unwrap()),
                    grid: 9,
                },
            ),
        ];
        for (argv, expected) in table {
            assert_eq!(parse(argv).unwrap().1, expected, "{argv}");
        }
    }

    #[test]
    fn renamed_columns_reach_the_reader() {
        let (names, _) = parse(
            "routeval calibrate --results r.csv --target 0.9 --score-col p --slice-col tenant",
        )
        .unwrap();
        assert_eq!(names.score, "p");
        assert_eq!(names.slice, "tenant");
    }

    #[test]
    fn out_of_range_flags_are_named() {
        let table = [
            (
                "--target 0",
                "invalid value '0' for '--target <Q>': 0: a target is above 0 and at most 1 (0.9)",
            ),
            (
                "--target nan",
                "invalid value 'nan' for '--target <Q>': nan: a target is above 0 and at most 1 (0.9)",
            ),
            (
                "--target 0.9 --confidence 1",
                "invalid value '1' for '--confidence <C>': 1: a confidence is between 0 and 1 (0.95)",
            ),
            (
                "--target 0.9 --holdout 0",
                "invalid value '0' for '--holdout <F>': 0: a fraction is between 0 and 1 (0.2)",
            ),
            (
                "--target 0.9 --tiers a",
                "invalid value 'a' for '--tiers <A,B,...>': \"a\": name at least two tiers, cheapest first",
            ),
        ];
        for (flags, message) in table {
            let argv = format!("routeval calibrate --results r.csv {flags}");
            let error = parse(&argv).unwrap_err().to_string();
            assert_eq!(
                error.lines().next(),
                Some(format!("error: {message}").as_str()),
                "{argv}"
            );
        }
    }
}
