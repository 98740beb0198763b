//! `routeval records import`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};

use crate::atomic::{Named, Output, check_outputs, write_atomically};
use crate::exit_codes::Outcome;
use crate::records::{
    Deployments, ImportFormat, ImportOptions, Imported, RECORDS_OUTPUT, import_records,
};

use super::print::println;
use super::replay::milliseconds;

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
    pub interval: String,

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

fn import(args: &RecordsImportArgs) -> anyhow::Result<Outcome> {
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
    let deployments = args
        .config
        .as_deref()
        .map(|path| -> anyhow::Result<Deployments> {
            let bytes = std::fs::read(path)
                .with_context(|| format!("{}: cannot read (--config)", path.display()))?;
            let config: crate::routes::RouteConfig = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a route config (--config)", path.display()))?;
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
                config_sha256: crate::digest::sha256_hex(&bytes),
                fallbacks: table
                    .fallbacks
                    .iter()
                    .map(|fallback| (fallback.route.clone(), fallback.to.clone()))
                    .collect(),
            })
        })
        .transpose()?;
    let mut inputs = vec![Named::new(&args.input, "--input")];
    let responses = args.input.join(crate::schema::RESPONSES_FILE);
    if format == ImportFormat::Run {
        inputs.push(Named::new(&responses, "--input"));
    }
    check_outputs(&[Output::new(&args.out, "--out", &RECORDS_OUTPUT)], &inputs)?;
    let interval_ms = milliseconds("--interval", &args.interval)?.round() as u64;
    let options = ImportOptions {
        format,
        input: args.input.clone(),
        map: args.map.clone(),
        slice_field: args.slice_field.clone(),
        interval_ms,
        deployments,
    };
    let mut imported = Imported::default();
    // A bad row fails the write: the staged file goes, nothing lands.
    write_atomically(&args.out, |file| {
        imported = import_records(&options, file)?;
        Ok(())
    })
    .map_err(|error| {
        // A bad input row names its own file; anything else is the output's.
        if error.downcast_ref::<crate::schema::InputError>().is_some() {
            error
        } else {
            error.context(format!("{}: cannot write (--out)", args.out.display()))
        }
    })?;
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
