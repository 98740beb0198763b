//! serve's corridor held against the code: a request's record is written by
//! one consumer of its turn's events (`src/serve/witness/`), and the
//! request path is declared in one place (`src/serve/stack/mod.rs`), so a
//! change to how a step is recorded, or to which layers a request meets,
//! is made in one file.

use std::path::{Path, PathBuf};

use crate::common::rust_files;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names of the `pub` fields of the struct `name` in `file`.
fn fields_of(file: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let opening = format!("pub struct {name}");
    let body: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with(&opening))
        .skip(1)
        .take_while(|line| !line.starts_with('}'))
        .collect();
    assert!(!body.is_empty(), "{} has no {opening}", file.display());
    body.iter()
        .filter_map(|line| {
            let field = line.trim().strip_prefix("pub ")?;
            let (field, _) = field.split_once(':')?;
            Some(field.trim().to_owned())
        })
        .collect()
}

/// Every place in `code` where a value whose name ends in `record` has one
/// of `fields` assigned or changed in place: `record.route = …`,
/// `served.record.reason = …`, `record.tenant.take()`, `record.messages
/// .replace(…)`. Comparisons (`==`) are reads.
fn writes_of(code: &str, fields: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("record.") {
        let after = &rest[at + "record.".len()..];
        let after = after.strip_prefix("record.").unwrap_or(after);
        let field: String = after
            .chars()
            .take_while(|character| character.is_alphanumeric() || *character == '_')
            .collect();
        let tail = after[field.len()..].trim_start();
        let assigned = tail.starts_with('=') && !tail.starts_with("==");
        let compound = ["+=", "-=", "*=", "/="]
            .iter()
            .any(|operator| tail.starts_with(operator));
        let changed = [
            ".take()",
            ".replace(",
            ".insert(",
            ".get_or_insert",
            ".push",
        ]
        .iter()
        .any(|method| tail.starts_with(method));
        if fields.contains(&field) && (assigned || compound || changed) {
            found.push(format!("record.{field}{}", &tail[..tail.len().min(12)]));
        }
        rest = &rest[at + "record.".len()..];
    }
    found
}

/// A line without its `//` comment, so that a doc naming a field does not
/// count as writing it.
fn code_of(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

#[test]
fn a_requests_record_is_written_only_by_the_witness() {
    let source = repository().join("src");
    let mut fields = fields_of(&source.join("records/record.rs"), "Record<'a>");
    fields.extend(fields_of(&source.join("serve/served.rs"), "ServedRecord"));
    for expected in [
        "route",
        "reason",
        "status",
        "ttft_ms",
        "decided_route",
        "tenant",
    ] {
        assert!(fields.iter().any(|field| field == expected), "{fields:?}");
    }
    let witness = source.join("serve/witness");
    let mut files = Vec::new();
    rust_files(&source.join("serve"), &mut files);
    let writing: Vec<String> = files
        .iter()
        .filter(|file| !file.starts_with(&witness) && !file.ends_with("serve/served.rs"))
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let name = file.display().to_string();
            text.lines()
                .enumerate()
                .flat_map(|(number, line)| {
                    writes_of(code_of(line), &fields)
                        .into_iter()
                        .map(|write| format!("{name}:{}: {write}", number + 1))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(writing.is_empty(), "{writing:#?}");
}

#[test]
fn the_scan_finds_assignments_and_changes_in_place_and_not_reads() {
    let fields = vec!["route".to_owned(), "tenant".to_owned(), "reason".to_owned()];
    assert_eq!(writes_of("record.route = x;", &fields).len(), 1);
    assert_eq!(
        writes_of("served.record.reason = Some(r);", &fields).len(),
        1
    );
    assert_eq!(writes_of("let t = record.tenant.take();", &fields).len(), 1);
    assert_eq!(writes_of("if record.route == \"a\" {}", &fields).len(), 0);
    assert_eq!(writes_of("let r = &record.route;", &fields).len(), 0);
    assert_eq!(writes_of("record.id = x;", &fields).len(), 0);
    assert_eq!(code_of("let a = 1; // record.route = b"), "let a = 1; ");
}

/// The router's paths and layers are declared where the stack is drawn:
/// no other file of serve adds a route, a route layer or a fallback.
#[test]
fn the_request_path_is_declared_in_the_stack_alone() {
    let source = repository().join("src/serve");
    let stack = source.join("stack/mod.rs");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    let declaring: Vec<String> = files
        .iter()
        .filter(|file| **file != stack)
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.lines().map(code_of).any(|line| {
                line.contains("Router::new")
                    || line.contains(".route_layer(")
                    || line.contains(".fallback(")
                    || line.contains(".route(\"/")
            })
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(declaring.is_empty(), "{declaring:?}");
    let drawn = std::fs::read_to_string(&stack).unwrap();
    assert!(drawn.contains("Router::new") && drawn.contains(".route_layer("));
}
