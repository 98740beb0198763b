//! `routeval calibrate`: flags to options, then the table or JSON out.

use anyhow::{Context, bail};

use crate::atomic::{Named, Output, check_outputs, write_bytes_atomically};
use crate::calibrate::{CalibrateOptions, calibrate, calibrate_tiered, render_table};
use crate::exit_codes::Outcome;
use crate::schema::CALIBRATION_OUTPUT;
use crate::schema::{ColumnNames, ReadOptions, Tiers, tiers_in_metadata};
use crate::schema::{Holdout, Policy, Scope};

use super::args::{CalibrateArgs, PolicyArg};
use super::print::print;

pub fn run(args: CalibrateArgs) -> anyhow::Result<Outcome> {
    let (read, options) = options(&args)?;
    if let Some(out) = &args.out {
        check_outputs(
            &[Output::new(out, "--out", &CALIBRATION_OUTPUT)],
            &[Named::new(&args.results, "--results")],
        )?;
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
        Some(tiers) if tiers.len() > 2 => {
            calibrate_tiered(&args.results, &read, &tiers, args.grid, &options)?
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
    let json =
        serde_json::to_string_pretty(&document).context("cannot encode the calibration")? + "\n";
    if let Some(out) = &args.out {
        write_bytes_atomically(out, json.as_bytes())
            .with_context(|| format!("{}: cannot write the calibration (--out)", out.display()))?;
    }
    if args.json {
        print(&json)?;
    } else {
        print(&render_table(&document))?;
    }
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
        names: ColumnNames::new(args.score_col.clone(), args.slice_col.clone()),
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
                },
            ),
            (
                "routeval calibrate --results r.csv --target 1 --policy cascade --confidence 0.95 --holdout 0.25 --seed 9 --global --frontier-points 0 --familywise",
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
