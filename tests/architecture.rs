//! The floors of docs/architecture.md held against the code: every
//! `crate::` path in `src/` names a module on a lower floor than its own,
//! every module of `src/` stands on exactly one floor, and nothing below
//! `cli` knows about clap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The floors of the table in docs/architecture.md, top first: each
/// floor's name and the modules in its second column.
fn floors() -> Vec<(String, Vec<String>)> {
    let page = std::fs::read_to_string(repository().join("docs/architecture.md")).unwrap();
    let mut lines = page
        .lines()
        .skip_while(|line| !line.starts_with("| floor |"));
    lines
        .next()
        .expect("docs/architecture.md has the floors table");
    lines
        .skip(1)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let modules = cells[2]
                .split(',')
                .map(|module| module.trim().trim_matches('`').to_owned())
                .collect();
            (cells[1].to_owned(), modules)
        })
        .collect()
}

/// The top-level modules of the library: the folders and files of `src/`
/// but the crate roots.
fn modules_in_src() -> BTreeSet<String> {
    std::fs::read_dir(repository().join("src"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            if path.is_dir() {
                Some(name)
            } else {
                let module = name.strip_suffix(".rs")?;
                (module != "lib" && module != "main").then(|| module.to_owned())
            }
        })
        .collect()
}

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// A line without its `//` comment (doc comments and links included), so
/// that only code counts. A `//` inside a string literal ends nothing.
fn code_of(line: &str) -> &str {
    let mut in_string = false;
    let mut previous = '\0';
    for (index, character) in line.char_indices() {
        match character {
            '"' if previous != '\\' => in_string = !in_string,
            '/' if !in_string && previous == '/' => return &line[..index - 1],
            _ => {}
        }
        previous = character;
    }
    line
}

fn identifier_at(text: &str) -> &str {
    let end = text
        .find(|character: char| !(character.is_ascii_alphanumeric() || character == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules a file's code names: `crate::NAME` anywhere, and
/// each first segment of `crate::{a, b::c, ...}`.
fn named_modules(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|character| character.is_ascii_alphanumeric() || character == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            for (index, character) in group.char_indices() {
                match character {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    character if item_start && !character.is_whitespace() => {
                        named.push(identifier_at(&group[index..]).to_owned());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            named.push(identifier_at(rest).to_owned());
        }
    }
    named
}

/// Every arrow between top-level modules: (from, to) and where it is.
fn arrows() -> BTreeMap<(String, String), Vec<String>> {
    let source = repository().join("src");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    let mut arrows: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&source).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let from = first.to_str().unwrap().trim_end_matches(".rs").to_owned();
        if from == "lib" || from == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // A `use` may span lines: join the code first, keeping line numbers
        // for the messages by scanning each statement from its first line.
        let lines: Vec<&str> = text.lines().map(code_of).collect();
        for (number, line) in lines.iter().enumerate() {
            let statement = if line.contains("crate::{") {
                lines[number..]
                    .iter()
                    .take_while(|line| !line.contains(';'))
                    .chain(lines[number..].iter().find(|line| line.contains(';')))
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                (*line).to_owned()
            };
            for to in named_modules(&statement) {
                if to != from {
                    arrows.entry((from.clone(), to)).or_default().push(format!(
                        "src/{}:{}",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    arrows
}

#[test]
fn every_import_goes_down_a_floor() {
    // The graph first, so that it prints even on a tree that breaks a rule.
    let arrows = arrows();
    let mut graph: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((from, to), places) in &arrows {
        let files: BTreeSet<&str> = places
            .iter()
            .map(|place| {
                place
                    .rsplit_once(':')
                    .map_or(place.as_str(), |(file, _)| file)
            })
            .collect();
        graph
            .entry(from.as_str())
            .or_default()
            .push(format!("{to}({})", files.len()));
    }
    println!("the import graph between top-level modules (files using each):");
    for (from, to) in &graph {
        println!("{from} -> {}", to.join(" "));
    }

    let floors = floors();
    assert!(floors.len() >= 5, "{floors:?}");
    let mut floor_of = BTreeMap::new();
    for (height, (floor, modules)) in floors.iter().rev().enumerate() {
        for module in modules {
            let earlier = floor_of.insert(module.clone(), (height, floor.clone()));
            assert!(earlier.is_none(), "{module} stands on two floors");
        }
    }
    let in_src = modules_in_src();
    let placed: BTreeSet<String> = floor_of.keys().cloned().collect();
    assert_eq!(
        in_src, placed,
        "docs/architecture.md must place every module of src/, and only those"
    );

    let wrong: Vec<String> = arrows
        .iter()
        .filter_map(|((from, to), places)| {
            let (from_height, from_floor) = &floor_of[from];
            let Some((to_height, to_floor)) = floor_of.get(to) else {
                return Some(format!("{from} -> {to}: not a module of src/ ({places:?})"));
            };
            (to_height >= from_height).then(|| {
                format!(
                    "{from} ({from_floor}) -> {to} ({to_floor}): {}",
                    places.join(", ")
                )
            })
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "imports that go up or sideways:\n{}",
        wrong.join("\n")
    );
    // The scan itself is alive: the stages do use the kernel and the tables.
    assert!(arrows.contains_key(&("gate".to_owned(), "policy".to_owned())));
    assert!(arrows.contains_key(&("calibrate".to_owned(), "schema".to_owned())));
}

#[test]
fn only_cli_knows_about_clap() {
    let source = repository().join("src");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    let knowing: Vec<String> = files
        .iter()
        .filter(|file| !file.starts_with(source.join("cli")) && !file.ends_with("main.rs"))
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.lines()
                .map(code_of)
                .any(|line| line.contains("clap::") || line.contains("clap_"))
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(knowing.is_empty(), "{knowing:?}");
}

#[test]
fn the_scan_reads_grouped_and_inline_paths() {
    assert_eq!(
        named_modules("use crate::{policy::{Curve, thin}, schema::Metrics, stats};"),
        ["policy", "schema", "stats"]
    );
    assert_eq!(
        named_modules(
            r#"#[serde(deserialize_with = "crate::version::known")] x: routeval_crate::x"#
        ),
        ["version"]
    );
    assert_eq!(code_of("let a = 1; // crate::gate"), "let a = 1; ");
    assert_eq!(
        code_of(r#"let url = "http://x"; "#),
        r#"let url = "http://x"; "#
    );
}

#[test]
fn test_modules_share_helpers_only_through_common() {
    let tests = repository().join("tests");
    let mut files = Vec::new();
    rust_files(&tests, &mut files);
    let borrowing: Vec<String> = files
        .iter()
        .filter(|file| !file.starts_with(tests.join("common")))
        .filter(|file| !file.ends_with("lib.rs") && !file.ends_with("architecture.rs"))
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let name = file.display().to_string();
            text.lines()
                .map(code_of)
                .flat_map(named_modules)
                .filter(|module| module != "common")
                .map(move |module| format!("{name} uses crate::{module}"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(borrowing.is_empty(), "{borrowing:#?}");
}

#[test]
fn every_terminal_table_is_drawn_by_terminal() {
    let source = repository().join("src");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    let drawing: Vec<String> = files
        .iter()
        .filter(|file| !file.ends_with("terminal.rs"))
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.lines()
                .map(code_of)
                .any(|line| line.contains("tabled::"))
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(drawing.is_empty(), "{drawing:?}");
}
