//! `routeval serve-sim`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::exit_codes::Outcome;
use crate::rubric::load_rubrics;
use crate::schema::read_dataset;
use crate::units::NonNegative;
use crate::upstream_sim::{FaultProfile, Knowledge, SimModel, SimSettings, spawn};

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
    #[arg(long, value_name = "RATE", default_value = "0")]
    pub tokens_per_second: NonNegative,

    /// Spread of time to first token and generation speed: the σ of a
    /// log-normal factor each request draws around the values above.
    #[arg(long, value_name = "SIGMA", default_value = "0")]
    pub latency_sigma: NonNegative,

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

/// The server `args` ask for, its flags checked.
pub fn settings(args: &ServeSimArgs) -> anyhow::Result<SimSettings> {
    Ok(SimSettings {
        seed: args.seed,
        ttft_ms: args.ttft_ms,
        tokens_per_second: args.tokens_per_second.get(),
        latency_sigma: args.latency_sigma.get(),
        faults: match &args.faults {
            Some(path) => FaultProfile::load(path)?,
            None => FaultProfile::default(),
        },
        models: SimModel::with_skills(SimModel::defaults(), &args.skills)
            .map_err(anyhow::Error::msg)?,
        ..SimSettings::default()
    })
}

pub fn run(args: ServeSimArgs) -> anyhow::Result<Outcome> {
    let settings = settings(&args)?;
    crate::schema::InputError::check_present(&args.dataset)?;
    let rubrics: BTreeSet<String> = load_rubrics(&args.rubrics)?.into_keys().collect();
    let rows = read_dataset(&args.dataset, &rubrics)?;
    let ambiguous = Knowledge::ambiguous(&rows);
    if let Some(first) = ambiguous.first() {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {}: id \"{first}\" (and {} more) asks an earlier row's prompt with another reference; serve-sim knows prompts by their text and answers each such prompt as its last row",
            args.dataset.display(),
            ambiguous.len() - 1
        );
    }
    let models: Vec<String> = settings
        .models
        .iter()
        .map(|model| model.name.clone())
        .collect();
    let running = spawn(settings, &rows, args.listen)?;
    super::print::println(&format!(
        "serving {} prompts on http://{}/v1 (models: {})",
        rows.len(),
        running.address,
        models.join(", ")
    ))?;
    running.wait();
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<SimSettings> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::ServeSim(args) = cli.command else {
            panic!("{argv} is a serve-sim command");
        };
        settings(&args)
    }

    #[test]
    fn flags_become_settings() {
        let settings = parse(
            "routeval serve-sim --dataset d.jsonl --seed 7 --ttft-ms 40 --tokens-per-second 90 --latency-sigma 0.3 --skill sim-small=0.6 --skill sim-huge=0.99",
        )
        .unwrap();
        assert_eq!(
            (
                settings.seed,
                settings.ttft_ms,
                settings.tokens_per_second,
                settings.latency_sigma
            ),
            (7, 40, 90.0, 0.3)
        );
        let skill = |name: &str| {
            settings
                .models
                .iter()
                .find(|model| model.name == name)
                .map(|model| model.skill)
        };
        assert_eq!(skill("sim-small"), Some(0.6));
        assert_eq!(skill("sim-large"), Some(0.92));
        assert_eq!(skill("sim-huge"), Some(0.99));
        assert_eq!(
            parse("routeval serve-sim --dataset d").unwrap().models,
            SimModel::defaults()
        );
    }

    #[test]
    fn out_of_range_flags_are_named() {
        for (argv, problem) in [
            (
                "routeval serve-sim --dataset d --tokens-per-second inf",
                "error: invalid value 'inf' for '--tokens-per-second <RATE>': inf: expected a number of at least 0",
            ),
            (
                "routeval serve-sim --dataset d --latency-sigma NaN",
                "error: invalid value 'NaN' for '--latency-sigma <SIGMA>': NaN: expected a number of at least 0",
            ),
        ] {
            let seen = parse(argv).unwrap_err().to_string();
            assert!(seen.starts_with(problem), "{argv}: {seen}");
        }
        let error = parse("routeval serve-sim --dataset d --skill sim-small")
            .unwrap_err()
            .to_string();
        assert!(error.contains("sim-small"), "{error}");
    }
}
