//! `routeval gate`, `routeval keygen` and `routeval verify`.

use std::io::Write;

use anyhow::{Context, bail};

use crate::clock::{Clock, FixedClock, SystemClock, parse_rfc3339};
use crate::exit_codes::Outcome;
use crate::gate::{GateOptions, gate, terminal};
use crate::routes::{generate_keys, load_public, verify_config};
use crate::schema::{ColumnNames, ReadOptions};

use super::args::{GateArgs, KeygenArgs, VerifyArgs};
use super::print::{print, println};

pub fn run(args: GateArgs) -> anyhow::Result<Outcome> {
    if !(args.target > 0.0 && args.target <= 1.0) {
        bail!("--target must be in (0, 1], got {}", args.target);
    }
    if let Some(confidence) = args.confidence
        && !(confidence > 0.0 && confidence < 1.0)
    {
        bail!("--confidence must be in (0, 1), got {confidence}");
    }
    if args.familywise && args.confidence.is_none() {
        bail!("--familywise needs --confidence: a point estimate guarantees nothing to share");
    }
    if !(args.max_regression >= 0.0 && args.max_regression <= 1.0) {
        bail!(
            "--max-regression must be in [0, 1], got {}",
            args.max_regression
        );
    }
    let options = GateOptions {
        candidates: args.candidates,
        results: args.results,
        read: ReadOptions {
            names: ColumnNames::new(args.score_col, args.slice_col),
            carry_extra: false,
            details: true,
            score_optional: false,
            carry_read_only: false,
        },
        calibrations: args.calibration,
        baseline: args.baseline,
        baseline_pubkey: args.pubkey,
        constraints: args.constraints,
        target: args.target,
        confidence: args.confidence,
        max_regression: args.max_regression,
        key: args.key,
        out: args.out,
        ttl_days: args.ttl_days,
        dataset_sha256: args.dataset_sha256,
        allow_unknown_slices: args.allow_unknown_slices,
        familywise: args.familywise,
    };
    let clock = clock_at(args.at.as_deref())?;
    let report = gate(&options, clock.as_ref())?;
    if let Some(at) = &args.at {
        eprintln!("note: the gate's clock was set to {at} by --at, not the current time");
    }
    let printed = if args.json {
        serde_json::to_string_pretty(&report).context("cannot encode the gate report")? + "\n"
    } else {
        terminal(&report)
    };
    print(&printed)?;
    Ok(if report.emitted.is_some() {
        Outcome::Passed
    } else {
        Outcome::CheckFailed
    })
}

/// The system clock, or the instant `--at` names.
fn clock_at(at: Option<&str>) -> anyhow::Result<Box<dyn Clock>> {
    match at {
        None => Ok(Box::new(SystemClock)),
        Some(text) => {
            let now = parse_rfc3339(text)
                .with_context(|| format!("--at: {text:?} is not YYYY-MM-DDTHH:MM:SSZ"))?;
            Ok(Box::new(FixedClock(now)))
        }
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
    let clock = clock_at(args.at.as_deref())?;
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
