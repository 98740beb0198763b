//! Every `routeval` command README.md and the pages under docs/ show parses
//! with the real CLI, so a renamed flag, command or value fails here rather
//! than leaving the docs wrong. A command in a code block must parse whole;
//! one quoted in prose may leave out required flags, but every flag and
//! value it names must exist. Placeholders (`FILE`, `N`, `<ROUTE>`) stand
//! for any value.

use clap::Parser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use routeval::cli::Cli;

use crate::common::{page_name, pages, shell_words};

/// A command as a page shows it: where, its words, and whether it stands
/// whole in a code block.
#[derive(Debug)]
struct Shown {
    line: usize,
    text: String,
    whole: bool,
}

/// The `routeval` part of a shell line: after `$ ` and variable
/// assignments, before a pipe, a redirect, a `&&` or a comment.
fn routeval_part(line: &str) -> Option<String> {
    let line = line.trim().trim_start_matches("$ ");
    let line = line
        .strip_prefix("cargo run --release -- ")
        .map(|rest| format!("routeval {rest}"))
        .unwrap_or_else(|| line.to_owned());
    let start = line.find("routeval ")?;
    // Only a command: `routeval` first, or after variable assignments.
    let before = &line[..start];
    if !before.split_whitespace().all(|word| word.contains('=')) {
        return None;
    }
    let mut command = &line[start..];
    for end in [" | ", " && ", " > ", " 2>", " ; ", " # ", " || ", " &"] {
        if let Some(at) = command.find(end) {
            command = &command[..at];
        }
    }
    Some(
        command
            .trim_end_matches(['`', ')', '.', ',', ':'])
            .trim()
            .to_owned(),
    )
}

fn shown(text: &str) -> Vec<Shown> {
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut pending: Option<(usize, String)> = None;
    // Prose by paragraph: a quoted command may wrap across lines.
    let mut paragraph: Option<(usize, String)> = None;
    let end_paragraph = |paragraph: &mut Option<(usize, String)>, commands: &mut Vec<Shown>| {
        if let Some((line, text)) = paragraph.take() {
            for span in text.split('`').skip(1).step_by(2) {
                // A command: `routeval` and a command's name.
                let named = span
                    .strip_prefix("routeval ")
                    .and_then(|rest| rest.split(' ').next())
                    .is_some_and(|name| {
                        !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    });
                if let (true, Some(command)) = (named, routeval_part(span)) {
                    commands.push(Shown {
                        line,
                        text: command,
                        whole: false,
                    });
                }
            }
        }
    };
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            end_paragraph(&mut paragraph, &mut commands);
            in_block = !in_block;
            continue;
        }
        if in_block {
            let (start, joined) = match pending.take() {
                Some((start, so_far)) => (start, format!("{so_far} {}", line.trim())),
                None => (index + 1, line.to_owned()),
            };
            if let Some(open) = joined.strip_suffix('\\') {
                pending = Some((start, open.trim_end().to_owned()));
                continue;
            }
            if let Some(command) = routeval_part(&joined) {
                commands.push(Shown {
                    line: start,
                    text: command,
                    whole: true,
                });
            }
            continue;
        }
        if line.trim().is_empty() {
            end_paragraph(&mut paragraph, &mut commands);
            continue;
        }
        match &mut paragraph {
            Some((_, text)) => {
                text.push(' ');
                text.push_str(line.trim());
            }
            None => paragraph = Some((index + 1, line.trim().to_owned())),
        }
    }
    end_paragraph(&mut paragraph, &mut commands);
    commands
}

/// A word that stands for a value: `FILE`, `N`, `<ROUTE>`, `A,B,...`.
fn placeholder(value: &str) -> bool {
    let value = value.trim_matches(|character| character == '<' || character == '>');
    value.contains("...")
        || value.contains('…')
        || (!value.is_empty()
            && value.chars().all(|character| {
                character.is_ascii_uppercase() || "_,.|0123456789-".contains(character)
            })
            && value
                .chars()
                .any(|character| character.is_ascii_uppercase()))
}

/// Why a shown command does not parse, or `None` when it does (or, quoted
/// in prose, when it only leaves things out).
fn problem(command: &Shown) -> Option<String> {
    // Usage notation: `[--flag X]` is a flag that may be given, `a|b` one of
    // several values.
    let words: Vec<String> = shell_words(&command.text)
        .into_iter()
        .map(|word| {
            let word = word.trim_matches(|c| c == '[' || c == ']').to_owned();
            match word.split_once('|') {
                Some((first, _)) if !word.starts_with('-') => first.to_owned(),
                _ => word,
            }
        })
        .collect();
    let error = Cli::try_parse_from(&words).err()?;
    let allowed: &[ErrorKind] = if command.whole {
        &[ErrorKind::DisplayHelp, ErrorKind::DisplayVersion]
    } else {
        &[
            ErrorKind::DisplayHelp,
            ErrorKind::DisplayVersion,
            ErrorKind::MissingRequiredArgument,
            ErrorKind::MissingSubcommand,
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand,
            ErrorKind::ArgumentConflict,
        ]
    };
    if allowed.contains(&error.kind()) {
        return None;
    }
    if matches!(error.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue)
        && let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidValue)
        // Prose may name a flag without its value.
        && (placeholder(value) || (value.is_empty() && !command.whole))
    {
        return None;
    }
    Some(
        error
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[test]
fn every_command_the_docs_show_parses() {
    let mut seen = 0;
    let mut problems = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for command in shown(&text) {
            seen += 1;
            if let Some(problem) = problem(&command) {
                problems.push(format!(
                    "{}:{}: {}: {problem}",
                    page_name(&page),
                    command.line,
                    command.text
                ));
            }
        }
    }
    eprintln!("{seen} commands shown in the docs");
    assert!(
        seen > 120,
        "only {seen} commands found: is the extraction broken?"
    );
    assert!(
        problems.is_empty(),
        "{} of {seen} commands do not parse:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn a_renamed_flag_is_caught() {
    let renamed = Shown {
        line: 1,
        text: "routeval calibrate --results r.csv --taget 0.9".to_owned(),
        whole: false,
    };
    assert!(problem(&renamed).unwrap().contains("--taget"));
    let placeholders = Shown {
        line: 1,
        text: "routeval calibrate --results FILE --target Q".to_owned(),
        whole: true,
    };
    assert_eq!(problem(&placeholders), None);
    let fragment = Shown {
        line: 1,
        text: "routeval gate --serve-url URL".to_owned(),
        whole: false,
    };
    assert_eq!(problem(&fragment), None);
}
