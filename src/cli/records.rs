//! `routeval records import`.

use crate::atomic::{Named, Output, check_outputs, write_atomically};
use crate::exit_codes::Outcome;
use crate::records::{ImportFormat, ImportOptions, RECORDS_OUTPUT, import_records};

use super::args::{RecordsCommand, RecordsFormatArg, RecordsImportArgs};
use super::print::println;
use super::replay::milliseconds;

pub fn run(command: RecordsCommand) -> anyhow::Result<Outcome> {
    match command {
        RecordsCommand::Import(args) => import(&args),
    }
}

fn import(args: &RecordsImportArgs) -> anyhow::Result<Outcome> {
    let format = match args.from {
        RecordsFormatArg::Litellm => ImportFormat::Litellm,
        RecordsFormatArg::OpenaiLog => ImportFormat::OpenaiLog,
        RecordsFormatArg::Generic => ImportFormat::Generic,
        RecordsFormatArg::Run => ImportFormat::Run,
    };
    if args.map.is_some() && format != ImportFormat::Generic {
        anyhow::bail!("--map renames the fields of --from generic only");
    }
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
    };
    let mut count = 0;
    // A bad row fails the write: the staged file goes, nothing lands.
    write_atomically(&args.out, |file| {
        count = import_records(&options, file)?;
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
    println(&format!(
        "imported {count} request records: {}",
        args.out.display()
    ))?;
    Ok(Outcome::Passed)
}
