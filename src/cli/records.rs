//! `routeval records import`.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};

use crate::exit_codes::Outcome;
use crate::records::{Deployments, ImportFormat, LogImportOptions, import_into};

use super::print::println;
use crate::routes::RouteConfig;
use crate::schema::{DocumentFile, read_document};
use crate::units::Span;

#[derive(Debug, Subcommand)]
pub enum RecordsCommand {
    /// Convert LiteLLM spend logs, OpenAI-style log lines, any table by
    /// --map, or a routeval run into the request-record table (Parquet).
    Import(RecordsImportArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordsFormatArg {
    /// Rows of LiteLLM's LiteLLM_SpendLogs table (JSON lines or CSV).
    Litellm,
    /// LiteLLM's StandardLoggingPayload, one per call and attempt, as its
    /// S3, GCS and generic-API loggers write it (JSON lines).
    LitellmStandard,
    /// One `{"request": ..., "response": ...}` object per line.
    OpenaiLog,
    /// The records' own fields, renamed by --map.
    Generic,
    /// A routeval run directory (`routeval run --out`).
    Run,
}

#[derive(Debug, Args)]
pub struct RecordsImportArgs {
    /// What the input is.
    #[arg(long, value_enum)]
    pub from: RecordsFormatArg,

    /// The file (or, for `run`, the run directory) to convert.
    #[arg(long, value_name = "PATH")]
    pub input: PathBuf,

    /// Generic: `field=column,...` for fields under other names.
    #[arg(long, value_name = "MAP")]
    pub map: Option<String>,

    /// The field naming each request's slice: a dotted path into the row
    /// (`team_id`, `metadata.user_api_key_team_alias`, `request.user`).
    #[arg(long, value_name = "PATH")]
    pub slice_field: Option<String>,

    /// Run: the time between consecutive prompts' records (a batch run
    /// records no arrivals).
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub interval: Span,

    /// The request-record table to write (Parquet).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// LiteLLM: the signed route config the export came from, so its
    /// deployment ids (`<logical model>/<route>`, `<logical model>#<route>`)
    /// read back as route names under the logical model.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(command: RecordsCommand) -> anyhow::Result<Outcome> {
    match command {
        RecordsCommand::Import(args) => import(&args),
    }
}

/// The import `args` ask for, its flags checked, and where it goes.
pub fn options(args: &RecordsImportArgs) -> anyhow::Result<LogImportOptions> {
    let format = match args.from {
        RecordsFormatArg::Litellm => ImportFormat::Litellm,
        RecordsFormatArg::LitellmStandard => ImportFormat::LitellmStandard,
        RecordsFormatArg::OpenaiLog => ImportFormat::OpenaiLog,
        RecordsFormatArg::Generic => ImportFormat::Generic,
        RecordsFormatArg::Run => ImportFormat::Run,
    };
    if args.map.is_some() && format != ImportFormat::Generic {
        anyhow::bail!("--map renames the fields of --from generic only");
    }
    if args.config.is_some()
        && !matches!(
            format,
            ImportFormat::Litellm | ImportFormat::LitellmStandard
        )
    {
        anyhow::bail!(
            "--config maps LiteLLM deployment ids: it is for --from litellm and litellm-standard only"
        );
    }
    let interval_ms = args.interval.whole_milliseconds();
    Ok(LogImportOptions {
        format,
        input: args.input.clone(),
        map: args.map.clone(),
        slice_field: args.slice_field.clone(),
        interval_ms,
        deployments: args.config.as_deref().map(deployments).transpose()?,
    })
}

/// The deployments a LiteLLM export of the signed config at `path` names.
fn deployments(path: &Path) -> anyhow::Result<Deployments> {
    let DocumentFile {
        document: config,
        sha256,
    } = read_document::<RouteConfig>(path, "a route config", Some("--config"))?;
    let table = &config.table;
    Ok(Deployments {
        logical_model: table.logical_model.clone(),
        routes: table
            .routes
            .iter()
            .map(|route| route.name.clone())
            .collect(),
        logical_route: match &table.policy {
            crate::routes::ResolvedPolicy::Single { route } => Some(route.clone()),
            _ => None,
        },
        config_version: config.version,
        config_sha256: sha256,
        fallbacks: table
            .fallbacks
            .iter()
            .map(|fallback| (fallback.route.clone(), fallback.to.clone()))
            .collect(),
    })
}

fn import(args: &RecordsImportArgs) -> anyhow::Result<Outcome> {
    let imported = import_into(&options(args)?, &args.out)?;
    let mut notes = Vec::new();
    if imported.folded_attempts > 0 {
        notes.push(format!(
            "{} billed retry attempts folded into their requests",
            imported.folded_attempts
        ));
    }
    if imported.kept_attempts > 0 {
        notes.push(format!(
            "{} attempts abandoned by requests that fell back, kept as records on the route they left",
            imported.kept_attempts
        ));
    }
    let folded = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    println(&format!(
        "imported {} request records{folded}: {}",
        imported.records,
        args.out.display()
    ))?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &str) -> anyhow::Result<LogImportOptions> {
        let cli = Cli::try_parse_from(argv.split_whitespace())?;
        let Command::Records(RecordsCommand::Import(args)) = cli.command else {
            panic!("{argv} is a records import command");
        };
        options(&args)
    }

    #[test]
    fn flags_become_options() {
        assert_eq!(
            parse(
                "routeval records import --from run --input runs/a --out r.parquet --interval 250ms"
            )
            .unwrap(),
            LogImportOptions {
                format: ImportFormat::Run,
                input: "runs/a".into(),
                map: None,
                slice_field: None,
                interval_ms: 250,
                deployments: None,
            }
        );
        let generic = parse(
            "routeval records import --from generic --input t.csv --out r.parquet --map id=request_id --slice-field team",
        )
        .unwrap();
        assert_eq!(generic.format, ImportFormat::Generic);
        assert_eq!(generic.map.as_deref(), Some("id=request_id"));
        assert_eq!(generic.slice_field.as_deref(), Some("team"));
        assert_eq!(generic.interval_ms, 1000);
    }

    #[test]
    fn a_flag_for_another_format_is_one_line_naming_it() {
        for (argv, problem) in [
            (
                "routeval records import --from litellm --input l.jsonl --out r --map id=x",
                "--map renames the fields of --from generic only",
            ),
            (
                "routeval records import --from run --input runs/a --out r --config c.json",
                "--config maps LiteLLM deployment ids: it is for --from litellm and litellm-standard only",
            ),
        ] {
            assert_eq!(parse(argv).unwrap_err().to_string(), problem, "{argv}");
        }
        let error = parse("routeval records import --from run --input a --out r --interval soon")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error.lines().next(),
            Some(
                "error: invalid value 'soon' for '--interval <DURATION>': soon: expected a duration such as 90s, 30m or 1h"
            )
        );
    }
}
