//! `routeval replay replicas`.

use anyhow::{Context, bail};

use crate::atomic::{Named, check_outputs, write_bytes_atomically};
use crate::exit_codes::Outcome;
use crate::replay::replicas::{PolicySpec, Pool};
use crate::replay::{
    Objective, RunArrivals, Source, calibrate, render_calibration, render_policies, replay,
};
use crate::run::CallTier;

use super::args::{ObjectiveArg, ReplayCommand, ReplayTierArg, ReplicasArgs};
use super::print::print;

pub fn run(command: ReplayCommand) -> anyhow::Result<Outcome> {
    match command {
        ReplayCommand::Replicas(args) => replicas(&args),
    }
}

/// A duration as `500ms`, `90s`, `30m` or `1h`; a bare number is seconds.
pub fn milliseconds(flag: &str, text: &str) -> anyhow::Result<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "ms" => 1.0,
        "" | "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => bail!("{flag} {text}: unknown unit {unit:?}; use ms, s, m or h"),
    };
    match number.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value * scale),
        _ => bail!("{flag} {text}: expected a duration such as 90s, 30m or 1h"),
    }
}

/// The pool the flags describe.
pub fn pool(args: &ReplicasArgs) -> anyhow::Result<Pool> {
    let cache_blocks = match args.cache_blocks.as_str() {
        "inf" => None,
        text => Some(text.parse::<usize>().map_err(|_| {
            anyhow::anyhow!("--cache-blocks {text}: expected a number of blocks or inf")
        })?),
    };
    let window_ms = milliseconds("--window", &args.window)?;
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
        index_loss_at_ms: args
            .index_loss_at
            .as_deref()
            .map(|text| milliseconds("--index-loss-at", text))
            .transpose()?,
        kv_tokens: args.kv_tokens.unwrap_or_else(|| {
            cache_blocks.map_or(1 << 20, |blocks| {
                (blocks as u64 * u64::from(args.block_tokens)).max(1)
            })
        }),
        window_ms,
        seed: args.seed,
    };
    pool.check()?;
    Ok(pool)
}

fn replicas(args: &ReplicasArgs) -> anyhow::Result<Outcome> {
    let pool = pool(args)?;
    let policies = if args.policies.is_empty() {
        PolicySpec::defaults(pool.scrape_ms > 0.0)
    } else {
        args.policies
            .iter()
            .map(|given| PolicySpec::parse(given))
            .collect::<Result<Vec<_>, _>>()?
    };
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
        check_outputs(&[Named::new(out, "--out")], &inputs)?;
    }
    let source = match (&args.trace, &args.from_run) {
        (Some(trace), _) => Source::Trace(trace),
        (None, Some(run)) => Source::Run {
            run,
            dataset: args.dataset.as_deref(),
            arrivals: RunArrivals {
                tier: match args.tier {
                    ReplayTierArg::Small => CallTier::SMALL,
                    ReplayTierArg::Large => CallTier::LARGE,
                },
                rate: args.arrival_rate,
                seed: args.seed,
            },
        },
        (None, None) => bail!("give --trace FILE or --from-run DIR"),
    };
    let mut document = replay(&source, &pool, &policies)?;
    if args.calibrate {
        let objective = match args.objective {
            ObjectiveArg::P95Ttft => Objective::P95Ttft,
            ObjectiveArg::HitRate => Objective::HitRate,
        };
        document.calibration = Some(calibrate(&source, &pool, &policies, objective)?);
    }
    let mut json = serde_json::to_string_pretty(&document).expect("serialisable");
    json.push('\n');
    if let Some(out) = &args.out {
        write_bytes_atomically(out, json.as_bytes())
            .with_context(|| format!("--out {}", out.display()))?;
    }
    if args.json {
        print(&json)?;
    } else {
        print(&render_policies(&document))?;
        if let Some(calibration) = &document.calibration {
            print(&render_calibration(calibration))?;
        }
    }
    Ok(Outcome::Passed)
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
        assert_eq!(milliseconds("--window", "90").unwrap(), 90_000.0);
        assert_eq!(milliseconds("--window", "1h").unwrap(), 3_600_000.0);
        let error = milliseconds("--window", "5 days").unwrap_err().to_string();
        assert!(error.starts_with("--window 5 days: "), "{error}");
        let error = pool(&args(&["--trace", "t.jsonl", "--replicas", "0"]))
            .unwrap_err()
            .to_string();
        assert_eq!(error, "--replicas: must be at least 1");
    }
}
