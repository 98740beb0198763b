//! The floors of docs/architecture.md held against the code: every
//! `crate::` path in `src/` names a module on a lower floor than its own,
//! every module of `src/` stands on exactly one floor, the files of one
//! folder import each other without a cycle, and nothing below `cli` knows
//! about clap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::rust_files;

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

/// Each line's code with its index: a line that opens a `{...}` group of
/// paths joined with the lines up to its statement's end, since a `use`
/// may span lines, and scanned from its first line, so that messages name
/// where it starts.
fn statements(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().map(code_of).collect();
    lines
        .iter()
        .enumerate()
        .map(|(number, line)| {
            let statement = if line.contains("::{") {
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
            (number, statement)
        })
        .collect()
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
        for (number, statement) in statements(&text) {
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

/// Which columns a stage reads, and with which details, is the stage's
/// own fact: a command hands it the names its flags give, never a reader's
/// options.
#[test]
fn cli_builds_no_readers_options() {
    let cli = repository().join("src/cli");
    let mut files = Vec::new();
    rust_files(&cli, &mut files);
    let building: Vec<String> = files
        .iter()
        .filter(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(code_of)
                .any(|line| line.contains("ReadOptions"))
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(building.is_empty(), "{building:?}");
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

/// A Markdown table's rule (`|---|`) is written by `markdown::table`
/// alone: a document gives its header and rows, never a table's shape.
#[test]
fn every_markdown_table_is_drawn_by_markdown() {
    let source = repository().join("src");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    let drawing: Vec<String> = files
        .iter()
        .filter(|file| !file.ends_with("src/markdown.rs"))
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.lines().any(|line| line.contains("|---"))
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(drawing.is_empty(), "{drawing:?}");
}

/// A file's module path: `src/serve/http.rs` is `serve::http`,
/// `src/serve/mod.rs` is `serve`.
fn module_path(source: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(source).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_str().unwrap().to_owned())
        .collect();
    if path
        .last()
        .is_some_and(|last| ["mod", "lib", "main"].contains(&last.as_str()))
    {
        path.pop();
    }
    path
}

/// The paths a file's code imports or names, from the crate's root:
/// `crate::`, `super::` (repeated) and `self::` paths, each item of a
/// `{...}` group its own path.
fn imported_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(['c', 's']) {
        let before = rest[..at].chars().next_back();
        let text = &rest[at..];
        let head = identifier_at(text);
        rest = &rest[at + head.len().max(1)..];
        // A path's start: not inside a word, nor a later `super` of one.
        let starts_word = !before
            .is_some_and(|character| character.is_ascii_alphanumeric() || character == '_')
            && !code[..code.len() - text.len()].ends_with("::");
        if !starts_word || !rest.starts_with("::") {
            continue;
        }
        let mut base: Vec<String> = match head {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let mut tail = &rest[2..];
        while let Some(after) = tail.strip_prefix("super::") {
            base.pop();
            tail = after;
        }
        match extend_path(&mut base, tail) {
            Some(group) => paths.extend(use_group(&base, group)),
            None => paths.push(base),
        }
    }
    paths
}

/// Pushes the segments of the path `text` starts with (`a::b::c`) onto
/// `path`; the text after the `{` of the group it goes on into, if it does.
fn extend_path<'t>(path: &mut Vec<String>, mut text: &'t str) -> Option<&'t str> {
    loop {
        if let Some(group) = text.strip_prefix('{') {
            return Some(group);
        }
        let segment = identifier_at(text);
        if segment.is_empty() {
            return None;
        }
        path.push(segment.to_owned());
        text = text[segment.len()..].strip_prefix("::")?;
    }
}

/// The paths of a `{...}` group's items (the text after its `{`), nested
/// groups expanded, each below `base`.
fn use_group(base: &[String], group: &str) -> Vec<Vec<String>> {
    let mut items = Vec::new();
    let (mut depth, mut item_start) = (0usize, 0);
    for (index, character) in group.char_indices() {
        match character {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[item_start..index]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[item_start..index]);
                item_start = index + 1;
            }
            _ => {}
        }
    }
    let mut paths = Vec::new();
    for item in items {
        let mut path = base.to_vec();
        match extend_path(&mut path, item.trim()) {
            Some(inner) => paths.extend(use_group(&path, inner)),
            None if item.trim().is_empty() => {}
            None => paths.push(path),
        }
    }
    paths
}

/// For each folder of `src/`, the arrows between its files and sub-folders
/// (a sub-folder standing for everything in it), and where each is.
fn sibling_arrows() -> BTreeMap<(Vec<String>, String, String), Vec<String>> {
    let source = repository().join("src");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|file| module_path(&source, file))
        .collect();
    let mut arrows: BTreeMap<(Vec<String>, String, String), Vec<String>> = BTreeMap::new();
    for file in &files {
        let module = module_path(&source, file);
        let text = std::fs::read_to_string(file).unwrap();
        for (number, statement) in statements(&text) {
            for path in imported_paths(&statement, &module) {
                let Some(named) = (1..=path.len())
                    .rev()
                    .map(|length| path[..length].to_vec())
                    .find(|prefix| modules.contains(prefix))
                else {
                    continue;
                };
                // The folder both stand in, and the child of it each is.
                let common = module
                    .iter()
                    .zip(&named)
                    .take_while(|(one, other)| one == other)
                    .count();
                if common >= module.len() || common >= named.len() {
                    continue;
                }
                arrows
                    .entry((
                        module[..common].to_vec(),
                        module[common].clone(),
                        named[common].clone(),
                    ))
                    .or_default()
                    .push(format!(
                        "src/{}:{}",
                        file.strip_prefix(&source).unwrap().display(),
                        number + 1
                    ));
            }
        }
    }
    arrows
}

/// The cycles of a folder's graph: its strongly connected components of
/// more than one node, each sorted.
fn cycles(arrows: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = arrows.iter().flat_map(|(from, to)| [from, to]).collect();
    let reaches = |from: &String| {
        let mut seen = BTreeSet::from([from.clone()]);
        let mut frontier = vec![from.clone()];
        while let Some(node) = frontier.pop() {
            for (_, to) in arrows.iter().filter(|(one, _)| *one == node) {
                if seen.insert(to.clone()) {
                    frontier.push(to.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|node| (*node, reaches(node))).collect();
    let mut components: BTreeSet<Vec<String>> = BTreeSet::new();
    for node in &nodes {
        let component: Vec<String> = nodes
            .iter()
            .filter(|other| reach[*node].contains(**other) && reach[**other].contains(*node))
            .map(|other| (*other).clone())
            .collect();
        if component.len() > 1 {
            components.insert(component);
        }
    }
    components.into_iter().collect()
}

#[test]
fn the_files_of_one_folder_import_each_other_without_a_cycle() {
    let arrows = sibling_arrows();
    let mut folders: BTreeMap<&Vec<String>, BTreeSet<(String, String)>> = BTreeMap::new();
    for (folder, from, to) in arrows.keys() {
        folders
            .entry(folder)
            .or_default()
            .insert((from.clone(), to.clone()));
    }
    let mut found = BTreeMap::new();
    for (folder, graph) in &folders {
        for cycle in cycles(graph) {
            let name = format!(
                "{}: {}",
                if folder.is_empty() {
                    "crate".to_owned()
                } else {
                    folder.join("::")
                },
                cycle.join(", ")
            );
            let places: Vec<String> = arrows
                .iter()
                .filter(|((one, from, to), _)| {
                    one == *folder && cycle.contains(from) && cycle.contains(to)
                })
                .map(|((_, from, to), places)| format!("  {from} -> {to}: {}", places.join(", ")))
                .collect();
            found.insert(name, places);
        }
    }
    let cycles: Vec<String> = found
        .iter()
        .map(|(name, places)| format!("{name}\n{}", places.join("\n")))
        .collect();
    assert!(
        cycles.is_empty(),
        "files that import each other:\n{}",
        cycles.join("\n")
    );
    // The scan is alive: it sees serve's request path above its record.
    assert!(arrows.contains_key(&(
        vec!["serve".to_owned()],
        "journal".to_owned(),
        "served".to_owned()
    )));
}

#[test]
fn the_file_scan_reads_super_self_and_grouped_paths() {
    let module = ["serve".to_owned(), "http".to_owned()];
    assert_eq!(
        imported_paths(
            "use super::{decision::admit, reply::{begin, error}};",
            &module
        ),
        [
            vec!["serve", "decision", "admit"],
            vec!["serve", "reply", "begin"],
            vec!["serve", "reply", "error"]
        ]
    );
    assert_eq!(
        imported_paths("let x = super::super::stats::mean(y);", &module),
        [vec!["stats", "mean"]]
    );
    assert_eq!(
        imported_paths(
            "use self::journal::Journal; use crate::records;",
            &module[..1]
        ),
        [vec!["serve", "journal", "Journal"], vec!["records"]]
    );
    let arrows: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .map(|(from, to)| ((*from).to_owned(), (*to).to_owned()))
        .collect();
    assert_eq!(cycles(&arrows), [vec!["a", "b", "c"]]);
}
