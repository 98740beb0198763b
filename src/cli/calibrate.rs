//! `routeval calibrate`: flags to options, then the table or JSON out.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, ValueEnum};

use crate::atomic::{Named, Output, check_outputs};
use crate::calibrate::{CalibrateOptions, calibrate, calibrate_tiered, render_table};
use crate::exit_codes::Outcome;
use crate::schema::CALIBRATION_OUTPUT;
use crate::schema::{AuditDraw, Holdout, Policy, Scope, TierTest};
use crate::schema::{ReadOptions, Tiers, tiers_in_metadata};

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
    #[arg(long, value_name = "W", default_value_t = 0.02)]
    pub audit_width: f64,

    /// An audit set from `routeval sample --audit`, its verdicts filled in:
    /// the draw is made again from --results and must match; each row
    /// counts with 1 / its inclusion probability.
    #[arg(long, value_name = "FILE")]
    pub audits: Option<PathBuf>,

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

    #[command(flatten)]
    pub columns: ColumnArgs,

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

pub fn run(args: CalibrateArgs) -> anyhow::Result<Outcome> {
    let (read, options) = options(&args)?;
    if let Some(out) = &args.out {
        let mut inputs = vec![Named::new(&args.results, "--results")];
        if let Some(audits) = &args.audits {
            inputs.push(Named::new(audits, "--audits"));
        }
        check_outputs(&[Output::new(out, "--out", &CALIBRATION_OUTPUT)], &inputs)?;
    }
    let tiers = match &args.tiers {
        Some(text) => {
            Some(Tiers::parse(text).map_err(|problem| anyhow::anyhow!("--tiers {problem}"))?)
        }
        None => tiers_in_metadata(&args.results)?,
    };
    if args.grid < 2 {
        bail!("--grid must be at least 2, got {}", args.grid);
    }
    let document = match tiers {
        Some(tiers) if tiers.len() > 2 && args.audits.is_some() => {
            bail!(
                "--audits correct two-tier calibrations only; calibrate {} tiers without it",
                tiers.len()
            )
        }
        Some(tiers) if tiers.len() > 2 => {
            calibrate_tiered(&args.results, &read, &tiers, args.grid, &options)?
        }
        _ if args.order_from.is_some() => {
            bail!(
                "--order-from orders the candidates of more than two tiers; two tiers are tested in their own order, from escalate-all towards escalate-none"
            )
        }
        // Two tiers by other names are today's table with its columns renamed.
        Some(tiers) => {
            let read = ReadOptions {
                names: tiers.column_names(read.names.clone()),
                ..read
            };
            calibrate(&args.results, &read, &options)?
        }
        None => calibrate(&args.results, &read, &options)?,
    };
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

/// Checks the flags and converts them to the stage's options.
pub fn options(args: &CalibrateArgs) -> anyhow::Result<(ReadOptions, CalibrateOptions)> {
    let target = args.target;
    if !(target > 0.0 && target <= 1.0) {
        bail!("--target must be in (0, 1], got {target}");
    }
    if let Some(confidence) = args.confidence
        && !(confidence > 0.0 && confidence < 1.0)
    {
        bail!("--confidence must be in (0, 1), got {confidence}");
    }
    if args.familywise && args.confidence.is_none() {
        bail!("--familywise needs --confidence: a plain fit guarantees nothing to share");
    }
    if !(args.audit_width > 0.0 && args.audit_width < 1.0) {
        bail!("--audit-width must be in (0, 1), got {}", args.audit_width);
    }
    if let Some(fraction) = args.holdout
        && !(fraction > 0.0 && fraction < 1.0)
    {
        bail!("--holdout must be in (0, 1), got {fraction}");
    }
    let read = ReadOptions {
        names: args.columns.names(),
        carry_extra: false,
        details: false,
        score_optional: false,
        carry_read_only: false,
    };
    let options = CalibrateOptions {
        policy: match args.policy {
            PolicyArg::Predictive => Policy::Predictive,
            PolicyArg::Cascade => Policy::Cascade,
        },
        target,
        confidence: args.confidence,
        holdout: args.holdout.map(|fraction| Holdout {
            fraction,
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
    };
    Ok((read, options))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<(ReadOptions, CalibrateOptions)> {
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
                    target: 0.9,
                    confidence: None,
                    holdout: None,
                    scope: Scope::PerSlice,
                    frontier_points: 256,
                    familywise: false,
                    audit_width: 0.02,
                    audits: None,
                    tier_test: TierTest::FixedSequence,
                    order_from: None,
                },
            ),
            (
                "routeval calibrate --results r.csv --target 1 --policy cascade --confidence 0.95 --holdout 0.25 --seed 9 --global --frontier-points 0 --familywise --audits a.csv --tier-test bonferroni",
                CalibrateOptions {
                    policy: Policy::Cascade,
                    target: 1.0,
                    confidence: Some(0.95),
                    holdout: Some(Holdout {
                        fraction: 0.25,
                        seed: 9,
                    }),
                    scope: Scope::Global,
                    frontier_points: 0,
                    familywise: true,
                    audit_width: 0.02,
                    audits: Some(PathBuf::from("a.csv")),
                    tier_test: TierTest::Bonferroni,
                    order_from: None,
                },
            ),
        ];
        for (argv, expected) in table {
            assert_eq!(parse(argv).unwrap().1, expected, "{argv}");
        }
    }

    #[test]
    fn renamed_columns_reach_the_reader() {
        let (read, _) = parse(
            "routeval calibrate --results r.csv --target 0.9 --score-col p --slice-col tenant",
        )
        .unwrap();
        assert_eq!(read.names.score, "p");
        assert_eq!(read.names.slice, "tenant");
    }

    #[test]
    fn out_of_range_flags_are_named() {
        let table = [
            ("--target 0", "--target must be in (0, 1], got 0"),
            ("--target 1.5", "--target must be in (0, 1], got 1.5"),
            ("--target nan", "--target must be in (0, 1], got NaN"),
            (
                "--target 0.9 --confidence 1",
                "--confidence must be in (0, 1), got 1",
            ),
            (
                "--target 0.9 --holdout 0",
                "--holdout must be in (0, 1), got 0",
            ),
        ];
        for (flags, message) in table {
            let argv = format!("routeval calibrate --results r.csv {flags}");
            assert_eq!(parse(&argv).unwrap_err().to_string(), message, "{argv}");
        }
    }
}
