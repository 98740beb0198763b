//! A routeval run as a replica trace, so a team can replay its own prompts:
//! each prompt's text (its messages, role and content, one after another)
//! cut into 2,048-character blocks (512 tokens at 4 characters per token)
//! whose ids chain, so prompts sharing a prefix share leading ids; token
//! counts from the tier's answers; arrivals drawn as a Poisson process at a
//! given rate, since a batch run records no arrival times.

use crate::units::Positive;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};

use super::trace::{CHARACTERS_PER_BLOCK, Request, text_blocks};
use crate::digest::sha256_file;
use crate::schema::CallTier;
use crate::schema::for_each_prompt;
use crate::schema::{MANIFEST_FILE, Manifest, RESPONSES_FILE, read_responses};
use crate::stats::random::{GOLDEN_GAMMA, splitmix64, unit_of};

/// How to turn a run into arrivals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunArrivals {
    /// Whose answers give the output lengths.
    pub tier: CallTier,
    /// Requests per second.
    pub rate: Positive,
    pub seed: u64,
}

/// Streams the run in directory `run` as requests, in prompt order.
/// `dataset` overrides the dataset path recorded in the run's manifest.
pub fn for_each_run_request(
    run: &Path,
    dataset: Option<&Path>,
    arrivals: RunArrivals,
    mut visit: impl FnMut(Request),
) -> anyhow::Result<u64> {
    let manifest = Manifest::load(&run.join(MANIFEST_FILE))?;
    let dataset = dataset.map_or_else(|| manifest.dataset.path.clone().into(), Path::to_owned);
    if sha256_file(&dataset)? != manifest.dataset.sha256 {
        bail!(
            "{}: the dataset changed since the run (sha256 differs from {})",
            dataset.display(),
            run.join(MANIFEST_FILE).display()
        );
    }
    let responses = run.join(RESPONSES_FILE);
    let mut tokens: HashMap<u64, (Option<u64>, Option<u64>)> = HashMap::new();
    for batch in read_responses(&responses, 8192)? {
        for row in batch? {
            if row.tier == arrivals.tier && row.sample == 0 && row.answered() {
                tokens.insert(row.prompt_index, (row.input_tokens, row.output_tokens));
            }
        }
    }
    if tokens.is_empty() {
        bail!(
            "{}: no answered {} calls to replay",
            responses.display(),
            arrivals.tier.name()
        );
    }
    let mut random = arrivals.seed ^ 0x5851_f42d_4c95_7f2d;
    let mut clock_ms = 0.0;
    let mut index = 0u64;
    let mut count = 0u64;
    for_each_prompt(&dataset, |row| {
        let position = index;
        index += 1;
        let Some(&(input, output)) = tokens.get(&position) else {
            return Ok(());
        };
        let text: String = row
            .messages
            .iter()
            .map(|message| format!("{:?}\n{}\n", message.role, message.content))
            .collect();
        let blocks = text_blocks(&text);
        let estimated = (text.chars().count() * 512).div_ceil(CHARACTERS_PER_BLOCK) as u64;
        let uniform = next_uniform(&mut random);
        clock_ms += -(1.0 - uniform).ln() / arrivals.rate.get() * 1000.0;
        count += 1;
        visit(Request {
            arrival_ms: clock_ms,
            input_tokens: saturate(input.unwrap_or(estimated)),
            output_tokens: saturate(output.unwrap_or(0)),
            blocks: Arc::from(blocks),
        });
        Ok(())
    })
    .with_context(|| format!("--from-run {}", run.display()))?;
    Ok(count)
}

fn saturate(tokens: u64) -> u32 {
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

/// A uniform draw in [0, 1) from splitmix64.
fn next_uniform(state: &mut u64) -> f64 {
    let draw = unit_of(splitmix64(*state));
    *state = state.wrapping_add(GOLDEN_GAMMA);
    draw
}
