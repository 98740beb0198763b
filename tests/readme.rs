//! README's walk through the pipeline, run as a reader runs it: each
//! command of its console block in a directory holding the example data,
//! each command's output compared with what README shows (`[..]` stands for
//! any text within a line: a digest, an id, a date).

use std::path::Path;

use crate::common::{binary, shell_words};

/// The commands of README's walk-through block, each with the output shown
/// under it.
fn walkthrough() -> Vec<(String, Vec<String>)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("## The pipeline on the example data")
        .nth(1)
        .expect("README has the walk-through");
    let block = section
        .split("```console\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the walk-through has a console block");
    let mut commands: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => commands.push((command.to_owned(), Vec::new())),
            None => commands
                .last_mut()
                .expect("the block starts with a command")
                .1
                .push(line.to_owned()),
        }
    }
    commands
}

/// Whether `line` is what `expected` shows, `[..]` matching any text.
fn matches(expected: &str, line: &str) -> bool {
    let pieces: Vec<&str> = expected.split("[..]").collect();
    let Some(rest) = line.strip_prefix(pieces[0]) else {
        return false;
    };
    if pieces.len() == 1 {
        return rest.is_empty();
    }
    let mut rest = rest;
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(pieces[pieces.len() - 1])
}

#[test]
fn the_readme_walk_through_prints_what_readme_shows() {
    let directory = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets"),
        directory.path().join("datasets"),
    )
    .unwrap();
    let commands = walkthrough();
    let names: Vec<String> = commands
        .iter()
        .map(|(command, _)| shell_words(command)[1].clone())
        .collect();
    assert_eq!(
        names,
        ["calibrate", "keygen", "gate", "verify", "report", "drift"]
    );
    for (command, expected) in &commands {
        let words = shell_words(command);
        assert_eq!(words[0], "routeval", "{command}");
        let output = std::process::Command::new(binary())
            .args(&words[1..])
            .current_dir(directory.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{command}\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            printed.len(),
            expected.len(),
            "{command}: README shows\n{}\nit prints\n{stdout}",
            expected.join("\n")
        );
        for (line, shown) in printed.iter().zip(expected) {
            assert!(
                matches(shown, line),
                "{command}: README shows\n{shown}\nit prints\n{line}"
            );
        }
    }
    assert!(
        directory
            .path()
            .join("reports/example/report.html")
            .is_file()
    );
}

#[test]
fn wildcards_match_within_a_line_only() {
    assert!(matches(
        "sha256 [..], expires [..]",
        "sha256 ab12, expires 2026"
    ));
    assert!(matches("exact", "exact"));
    assert!(!matches("exact", "exact and more"));
    assert!(!matches("a [..] c", "a b d"));
}
