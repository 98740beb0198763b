//! The command line: clap's argument structs, their conversion into each
//! stage's typed options, and the mapping of outcomes to exit codes. No other
//! module knows about clap.

mod args;
mod calibrate;
mod candidate;
mod columns;
mod demo;
mod demo_inputs;
mod drift;
mod evaluate;
mod gate;
mod grade;
mod import;
mod print;
mod records;
mod replay;
mod report;
mod reporter;
mod router;
mod run;
mod sample;
mod serve;
mod serve_sim;
mod shell;
mod simulate;

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

pub use args::{Cli, Command};
pub use demo::{DEMO_MARKER, DEMO_OUTPUTS};

use crate::exit_codes::{Outcome, USAGE_OR_INPUT};

impl Cli {
    /// Parses `args` (the program's name first) as the binary does: a
    /// value that looks like a negative number (`--target -0.1`) is a
    /// value, which the flag's own check then judges, not an unknown flag.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches;
        let matches = negative_numbers(Cli::command()).try_get_matches_from(args)?;
        Cli::from_arg_matches(&matches)
    }
}

fn negative_numbers(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            if arg.get_action().takes_values() {
                arg.allow_negative_numbers(true)
            } else {
                arg
            }
        })
        .mut_subcommands(negative_numbers)
}

/// clap's message as one line: its first block (with what clap lists below
/// its first line, the missing arguments, kept on it), then its tips ("a
/// similar argument exists: '--results'"); the usage and help lines that
/// follow are left out.
fn one_line(rendered: &str) -> String {
    let message: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let tips: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("tip:"))
        .collect();
    let mut line = if message.is_empty() {
        "error: invalid arguments".to_owned()
    } else {
        message.join(" ")
    };
    for tip in tips {
        line.push_str(" (");
        line.push_str(tip);
        line.push(')');
    }
    line
}

/// Parses the process arguments, runs the command, and reports errors as one
/// line on stderr.
pub fn main() -> ExitCode {
    let cli = match Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => error.exit(),
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "{}", one_line(&error.to_string()));
            return ExitCode::from(USAGE_OR_INPUT);
        }
    };
    // Every command but the servers (serve rolls its records on SIGTERM,
    // serve-sim stops when killed) stops at
    // once on a signal, taking its unfinished files with it; while `run` is
    // under way (alone or as a demo step) it stops in its own orderly way.
    if !matches!(cli.command, Command::ServeSim(_) | Command::Serve(_)) {
        stop_cleanly_on_signals();
    }
    match run(cli) {
        Ok(outcome) => outcome.into(),
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "error: {}", error_line(&error));
            let interrupted = error
                .chain()
                .any(<dyn std::error::Error>::is::<crate::exit_codes::Interrupted>);
            ExitCode::from(if interrupted {
                crate::exit_codes::INTERRUPTED
            } else {
                USAGE_OR_INPUT
            })
        }
    }
}

/// Whether `run` is under way: its engine answers signals itself, saving
/// what finished so that the same command resumes.
static RUN_UNDER_WAY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Installs, before the command starts, a watcher of SIGTERM, SIGINT and
/// SIGHUP that removes the temporary files of writes under way and exits 3
/// with one line, instead of the signal's default death that leaves them
/// (or, once a run's engine has listened for them, no death at all).
fn stop_cleanly_on_signals() {
    let (ready, installed) = std::sync::mpsc::channel::<()>();
    let watcher = std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let (Ok(mut terminate), Ok(mut interrupt), Ok(mut hang_up)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::hangup()),
                ) else {
                    return;
                };
                let _ = ready.send(());
                let name = loop {
                    let name = tokio::select! {
                        _ = terminate.recv() => "SIGTERM",
                        _ = interrupt.recv() => "SIGINT",
                        _ = hang_up.recv() => "SIGHUP",
                    };
                    if !RUN_UNDER_WAY.load(std::sync::atomic::Ordering::SeqCst) {
                        break name;
                    }
                };
                crate::atomic::remove_temporaries();
                let _ = writeln!(
                    std::io::stderr(),
                    "error: stopped by {name}; outputs not yet in place were removed"
                );
                std::process::exit(i32::from(crate::exit_codes::INTERRUPTED));
            });
        });
    if watcher.is_ok() {
        // The handlers are in place before the command writes anything.
        let _ = installed.recv();
    }
}

/// The error and its causes on one line. A cause that the message before it
/// already quotes (typed errors name their I/O or Parquet cause) is not
/// repeated.
pub fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let reporter = cli.output.reporter();
    match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Run(args) => {
            RUN_UNDER_WAY.store(true, std::sync::atomic::Ordering::SeqCst);
            let ran = run::run(args, reporter);
            RUN_UNDER_WAY.store(false, std::sync::atomic::Ordering::SeqCst);
            ran
        }
        Command::Merge(args) => run::merge(args),
        Command::Grade(args) => grade::run(args, reporter.as_ref()),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Gate(args) => gate::run(args, reporter.as_ref()),
        Command::Keygen(args) => gate::keygen(args),
        Command::Verify(args) => gate::verify(args),
        Command::Simulate(args) => simulate::run(args, reporter.as_ref()),
        Command::Drift(args) => drift::run(args),
        Command::Report(args) => report::run(args),
        Command::Router(command) => router::run(command),
        Command::Import(command) => import::run(command),
        Command::ServeSim(args) => serve_sim::run(args),
        Command::Serve(args) => serve::run(args, &cli.output),
        Command::Evaluate(args) => evaluate::run(args),
        Command::Replay(command) => replay::run(command),
        Command::Records(command) => records::run(command),
        Command::Sample(args) => sample::run(&args),
        Command::Completions(args) => shell::completions(args.shell, Cli::command()),
        Command::Man(args) => shell::man(&args.command, Cli::command()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_line_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let typed = crate::rubric::RubricError::Io {
            path: "rubrics".into(),
            source: io,
        };
        let error = anyhow::Error::new(typed).context("grade");
        assert_eq!(
            super::error_line(&error),
            "grade: rubrics: cannot read: no such file"
        );
        let io = std::io::Error::other("disk full");
        let plain = anyhow::Error::new(io).context("out.parquet: cannot write");
        assert_eq!(
            super::error_line(&plain),
            "out.parquet: cannot write: disk full"
        );
    }
}
