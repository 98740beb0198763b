//! `routeval grade`.

use std::io::Write;

use crate::exit_codes::Outcome;
use crate::grade::{ScoreSource, grade_run, load_rubrics};
use crate::schema::write_graded_parquet;

use super::args::GradeArgs;

pub fn run(args: GradeArgs) -> anyhow::Result<Outcome> {
    let rubrics = load_rubrics(&args.rubrics)?;
    let graded = grade_run(&args.run, args.dataset.as_deref(), &rubrics, &args.out)?;
    write_graded_parquet(&graded.table, &args.out)?;
    let rows = graded
        .slices
        .iter()
        .map(|(slice, (prompts, small, large))| {
            let share = |count: &u64| format!("{:.3}", *count as f64 / *prompts as f64);
            vec![
                slice.clone(),
                prompts.to_string(),
                share(small),
                share(large),
            ]
        });
    let table = crate::calibrate::table(vec!["slice", "prompts", "small ok", "large ok"], rows);
    let source = match graded.score_source {
        ScoreSource::Verifier => "the verifier's reject probability",
        ScoreSource::SelfConsistency => "self-consistency of the small tier's samples",
        ScoreSource::None => "none (0); `routeval router train --scored-out` fills it",
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{table}");
    let _ = writeln!(out, "score: {source}");
    let _ = writeln!(out, "wrote {}", args.out.display());
    Ok(Outcome::Passed)
}
