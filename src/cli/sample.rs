//! `routeval sample`.

use anyhow::{Context, bail};

use crate::atomic::{Named, Output, check_outputs, write_bytes_atomically};
use crate::exit_codes::Outcome;
use crate::sample::{SAMPLE_OUTPUT, SampleOptions, sample};

use super::args::{SampleArgs, StratifyArg};
use super::print::println;

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
