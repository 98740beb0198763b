//! `routeval serve-sim`.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::bail;

use crate::exit_codes::Outcome;
use crate::rubric::load_rubrics;
use crate::schema::read_dataset;
use crate::serve_sim::{FaultProfile, Knowledge, SimModel, SimSettings, spawn};

use super::args::ServeSimArgs;

pub fn run(args: ServeSimArgs) -> anyhow::Result<Outcome> {
    if !(args.tokens_per_second.is_finite() && args.tokens_per_second >= 0.0) {
        bail!(
            "--tokens-per-second must be a non-negative number, got {}",
            args.tokens_per_second
        );
    }
    if !(args.latency_sigma.is_finite() && args.latency_sigma >= 0.0) {
        bail!(
            "--latency-sigma must be a non-negative number, got {}",
            args.latency_sigma
        );
    }
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
    let settings = SimSettings {
        seed: args.seed,
        ttft_ms: args.ttft_ms,
        tokens_per_second: args.tokens_per_second,
        latency_sigma: args.latency_sigma,
        faults: match &args.faults {
            Some(path) => FaultProfile::load(path)?,
            None => FaultProfile::default(),
        },
        models: SimModel::with_skills(SimModel::defaults(), &args.skills)
            .map_err(anyhow::Error::msg)?,
        ..SimSettings::default()
    };
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
