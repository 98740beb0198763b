//! The GitHub Actions workflow shipped in `ci/` calls routeval with flags the
//! current command line accepts.

use clap::Parser;
use routeval::cli::Cli;

/// The workflow's `env:` values, such as `ROUTEVAL_TARGET: "0.9"`.
fn variables(workflow: &str) -> Vec<(String, String)> {
    workflow
        .lines()
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(": ")?;
            let value = value.split(" #").next()?.trim().trim_matches('"');
            name.chars()
                .all(|c| c.is_ascii_uppercase() || c == '_')
                .then(|| (name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Every `routeval …` command in the workflow, with the workflow's variables
/// substituted and other shell variables and expressions replaced by a
/// placeholder word.
fn commands(workflow: &str) -> Vec<Vec<String>> {
    let variables = variables(workflow);
    workflow
        .lines()
        .map(str::trim)
        .map(|line| line.strip_prefix("run: ").unwrap_or(line))
        .filter(|line| line.starts_with("routeval "))
        .map(|line| {
            let line = line.split(" > ").next().unwrap_or(line);
            shell_words(line)
                .into_iter()
                .map(|word| {
                    let mut word = word;
                    for (name, value) in &variables {
                        word = word.replace(&format!("${name}"), value);
                    }
                    if word.contains('$') {
                        "placeholder".to_owned()
                    } else {
                        word
                    }
                })
                .collect()
        })
        .collect()
}

/// Splits a command line into words, keeping double-quoted spaces.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for character in line.chars() {
        match character {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            other => word.push(other),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[test]
fn every_routeval_command_in_the_workflow_parses() {
    let workflow =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ci/routeval.yml")).unwrap();
    let commands = commands(&workflow);
    let names: Vec<&str> = commands.iter().map(|command| command[1].as_str()).collect();
    assert_eq!(
        names,
        ["calibrate", "gate", "report", "verify", "drift", "report"]
    );
    for command in &commands {
        if let Err(error) = Cli::try_parse_from(command) {
            panic!("{}: {error}", command.join(" "));
        }
    }
}
