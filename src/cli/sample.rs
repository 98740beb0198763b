//! `routeval sample`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use crate::atomic::{Named, Output, check_outputs, write_bytes_atomically};
use crate::exit_codes::Outcome;
use crate::sample::{SAMPLE_OUTPUT, SampleOptions, sample};

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
    #[arg(long, value_name = "FILE")]
    pub records: PathBuf,

    /// Prompts to take from each slice.
    #[arg(long, value_name = "N")]
    pub per_slice: usize,

    /// Only records from this time on: RFC 3339 or epoch milliseconds.
    #[arg(long, value_name = "T")]
    pub since: Option<String>,

    /// How to spread each slice's draw.
    #[arg(long, value_enum, default_value_t = StratifyArg::Score)]
    pub stratify: StratifyArg,

    /// With --stratify score: the number of strata.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub strata: usize,

    /// Seed of the draw.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// The rubric of every sampled prompt; the default compares each tier's
    /// answer with the strongest tier's (the prompts have no reference).
    #[arg(long, value_name = "NAME", default_value = "pairwise")]
    pub rubric: String,

    /// The dataset to write (JSON lines), for `routeval run`.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(args: &SampleArgs) -> anyhow::Result<Outcome> {
    check_outputs(
        &[Output::new(&args.out, "--out", &SAMPLE_OUTPUT)],
        &[Named::new(&args.records, "--records")],
    )?;
    if args.per_slice == 0 {
        bail!("--per-slice must be at least 1");
    }
    if args.strata == 0 || args.strata > 100 {
        bail!("--strata must be from 1 to 100, got {}", args.strata);
    }
    if args.rubric.trim().is_empty() {
        bail!("--rubric is empty");
    }
    let since_ms = args
        .since
        .as_deref()
        .map(|text| {
            crate::records::parse_timestamp(text)
                .map_err(|problem| anyhow::anyhow!("--since {problem}"))
        })
        .transpose()?;
    let options = SampleOptions {
        records: args.records.clone(),
        per_slice: args.per_slice,
        since_ms,
        strata: match args.stratify {
            StratifyArg::Score => args.strata,
            StratifyArg::None => 1,
        },
        seed: args.seed,
        rubric: args.rubric.clone(),
    };
    let (prompts, summary) = sample(&options)?;
    if prompts.is_empty() {
        bail!(
            "{}: no records with a prompt to sample{}; nothing written",
            args.records.display(),
            if since_ms.is_some() {
                " since --since"
            } else {
                ""
            }
        );
    }
    let mut text = String::new();
    for prompt in &prompts {
        text.push_str(&serde_json::to_string(prompt)?);
        text.push('\n');
    }
    write_bytes_atomically(&args.out, text.as_bytes())
        .with_context(|| format!("{}: cannot write (--out)", args.out.display()))?;
    let taken: Vec<String> = summary
        .slices
        .iter()
        .map(|(slice, (eligible, taken))| format!("{slice} {taken} of {eligible}"))
        .collect();
    println(&format!(
        "sampled {} prompts ({}) from {} records: {} duplicates, {} without a prompt, {} before --since, {} secrets redacted; wrote {}",
        prompts.len(),
        taken.join(", "),
        summary.records,
        summary.duplicates,
        summary.without_prompt,
        summary.too_old,
        summary.redactions,
        args.out.display()
    ))?;
    Ok(Outcome::Passed)
}
