//! `routeval grade`: flags to options, then the per-slice table.

use std::path::PathBuf;

use clap::Args;

use crate::events::{Event, Level, Reporter};
use crate::exit_codes::Outcome;
use crate::grade::{GradeOptions, ScoreSource, grade};

use super::print::println;
use super::run::CacheArgs;

#[derive(Debug, Args)]
pub struct GradeArgs {
    /// A run directory from `routeval run`.
    #[arg(long, value_name = "DIR")]
    pub run: PathBuf,

    /// The rubrics the dataset names.
    #[arg(long, value_name = "DIR", default_value = "rubrics")]
    pub rubrics: PathBuf,

    /// The run's dataset, if it moved since the run (its digest must match).
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,

    /// The run's config, if it moved since the run (its digest must match);
    /// its `[judge]` answers `llm_judge` checks.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The judge's answers are cached like a run's.
    #[command(flatten)]
    pub cache: CacheArgs,

    /// Grade without the prompts whose small or large call failed (counted
    /// in the output) instead of refusing the run.
    #[arg(long)]
    pub allow_missing: bool,

    /// The graded-results table (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn options(args: GradeArgs) -> GradeOptions {
    GradeOptions {
        cache_dir: args.cache.directory(),
        run: args.run,
        rubrics: args.rubrics,
        dataset: args.dataset,
        config: args.config,
        allow_missing: args.allow_missing,
        out: args.out,
    }
}

pub fn run(args: GradeArgs, reporter: &dyn Reporter) -> anyhow::Result<Outcome> {
    let options = options(args);
    let graded = grade(&options, reporter)?;
    let (run, judging) = (&graded.run, &graded.judging);
    let source = match run.score_source {
        ScoreSource::Verifier => "the verifier's reject probability",
        ScoreSource::SelfConsistency => "self-consistency of the small tier's samples",
        ScoreSource::None => {
            "none (null): the run had no verifier and one sample; `routeval router train --scored-out` fills it"
        }
    };
    println(&run.slice_table())?;
    println(&format!("score: {source}"))?;
    if judging.calls > 0 {
        println(&format!(
            "judge: {} checks, {} calls ({} cached), ${:.4}",
            judging.checks, judging.calls, judging.cached, judging.cost_usd
        ))?;
    }
    if run.pairwise_disagreements > 0 {
        println(&format!(
            "pairwise: {} comparisons whose two orders disagreed (the judge's position bias) counted as ties",
            run.pairwise_disagreements
        ))?;
    }
    if run.dropped > 0 {
        println(&format!(
            "dropped {} prompts whose call to a tier failed (--allow-missing)",
            run.dropped
        ))?;
    }
    println(&format!("wrote {}", options.out.display()))?;
    if judging.errors > 0 {
        reporter.report(Event::Message {
            stage: "grade",
            level: Level::Warning,
            text: format!(
                "{} judged checks failed because the judge failed or answered unreadably (see the detail column)",
                judging.errors
            ),
        });
    }
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> GradeOptions {
        let cli = Cli::try_parse_from(argv.split_whitespace()).unwrap();
        let Command::Grade(args) = cli.command else {
            panic!("{argv} is a grade command");
        };
        options(args)
    }

    #[test]
    fn flags_become_options() {
        assert_eq!(
            parse("routeval grade --run runs/a --out g.parquet --cache-dir c"),
            GradeOptions {
                run: "runs/a".into(),
                rubrics: "rubrics".into(),
                dataset: None,
                config: None,
                cache_dir: Some("c".into()),
                allow_missing: false,
                out: "g.parquet".into(),
            }
        );
        assert_eq!(
            parse(
                "routeval grade --run r --out g.parquet --rubrics mine --dataset d.jsonl --config c.toml --no-cache --allow-missing"
            ),
            GradeOptions {
                run: "r".into(),
                rubrics: "mine".into(),
                dataset: Some("d.jsonl".into()),
                config: Some("c.toml".into()),
                cache_dir: None,
                allow_missing: true,
                out: "g.parquet".into(),
            }
        );
    }

    #[test]
    fn run_and_out_are_required() {
        for argv in ["routeval grade --out g.parquet", "routeval grade --run r"] {
            let error = Cli::try_parse_from(argv.split_whitespace()).unwrap_err();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{argv}"
            );
        }
    }
}
