//! `routeval completions` and `routeval man`: what a shell and `man` need,
//! generated from the same clap definitions the commands parse with, so they
//! cannot fall behind a flag.

use clap::Args;

use super::print::print;
use crate::exit_codes::Outcome;

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command, with its subcommand where it has them (`replay
    /// fallback`); without one, routeval's own page.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The completions of `command` (the whole command line) for `shell`.
pub fn completions(
    shell: clap_complete::Shell,
    mut command: clap::Command,
) -> anyhow::Result<Outcome> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "routeval", &mut script);
    print(&String::from_utf8(script)?)?;
    Ok(Outcome::Passed)
}

/// The page of `path` (`["replay", "fallback"]`) of `command` (the whole
/// command line), named `routeval-replay-fallback`; routeval's own without
/// one.
pub fn man(path: &[String], mut command: clap::Command) -> anyhow::Result<Outcome> {
    let mut name = "routeval".to_owned();
    for part in path {
        command = command
            .find_subcommand(part)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{name} has no command {part:?} (routeval man)"))?;
        name = format!("{name}-{part}");
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(command.name(name).version(env!("CARGO_PKG_VERSION")))
        .render(&mut page)?;
    print(&String::from_utf8(page)?)?;
    Ok(Outcome::Passed)
}
