//! The size limits of docs/architecture.md held against `src/`: no file
//! over 700 lines and no function over 100, so that each reads in one
//! sitting. A function is counted from its `fn` line to its closing brace,
//! doc comments and attributes left out; braces in strings, characters and
//! comments do not count.

use std::path::Path;

use crate::common::rust_files;

const MAX_FILE_LINES: usize = 700;
const MAX_FUNCTION_LINES: usize = 100;

fn sources() -> Vec<(String, String)> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&source, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let name = format!("src/{}", file.strip_prefix(&source).unwrap().display());
            (name, text)
        })
        .collect()
}

/// `text` with every comment, string and character literal blanked to
/// spaces, newlines kept, so that only code's braces remain.
fn code_only(text: &str) -> String {
    let characters: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let blank = |character: char| if character == '\n' { '\n' } else { ' ' };
    let mut index = 0;
    while index < characters.len() {
        let here = characters[index];
        let next = characters.get(index + 1).copied();
        let start = index;
        if here == '/' && next == Some('/') {
            while index < characters.len() && characters[index] != '\n' {
                index += 1;
            }
        } else if here == '/' && next == Some('*') {
            index += 2;
            while index < characters.len()
                && !(characters[index] == '*' && characters.get(index + 1) == Some(&'/'))
            {
                index += 1;
            }
            index = (index + 2).min(characters.len());
        } else if here == 'r'
            && matches!(next, Some('"' | '#'))
            && !identifier_before(&characters, index)
        {
            // A raw string: r"..." or r#"..."#, closed by as many hashes.
            let mut hashes = 0;
            index += 1;
            while characters.get(index) == Some(&'#') {
                hashes += 1;
                index += 1;
            }
            if characters.get(index) == Some(&'"') {
                index += 1;
                loop {
                    if index >= characters.len() {
                        break;
                    }
                    if characters[index] == '"'
                        && (1..=hashes).all(|offset| characters.get(index + offset) == Some(&'#'))
                    {
                        index += 1 + hashes;
                        break;
                    }
                    index += 1;
                }
            }
        } else if here == '"' {
            index += 1;
            while index < characters.len() && characters[index] != '"' {
                index += if characters[index] == '\\' { 2 } else { 1 };
            }
            index += 1;
        } else if here == '\'' && (next == Some('\\') || characters.get(index + 2) == Some(&'\'')) {
            // A character literal; a lifetime (`'a`) has no closing quote.
            index += 1;
            while index < characters.len() && characters[index] != '\'' {
                index += if characters[index] == '\\' { 2 } else { 1 };
            }
            index += 1;
        } else {
            code.push(here);
            index += 1;
            continue;
        }
        let end = index.min(characters.len());
        code.extend(
            characters[start..end]
                .iter()
                .map(|&character| blank(character)),
        );
    }
    code
}

fn identifier_before(characters: &[char], index: usize) -> bool {
    index > 0 && (characters[index - 1].is_alphanumeric() || characters[index - 1] == '_')
}

/// Whether a line of code starts a function: `fn`, after any of `pub`,
/// `pub(...)`, `const`, `async`, `unsafe` and `extern "..."`.
fn starts_function(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for qualifier in ["const ", "async ", "unsafe ", "extern "] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest).trim_start();
        }
        if let Some(after) = rest.strip_prefix("pub") {
            rest = match after.trim_start().strip_prefix('(') {
                Some(inside) => inside.split_once(')').map_or(inside, |(_, after)| after),
                None => after,
            }
            .trim_start();
        }
        if rest == before {
            break;
        }
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name
        .find(|character: char| !(character.is_alphanumeric() || character == '_'))
        .unwrap_or(name.len());
    Some(&name[..end])
}

/// Each function of `text` longer than `limit` lines: its name, first line
/// (from 1) and length.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = starts_function(line) else {
            continue;
        };
        let mut depth = 0usize;
        let mut opened = false;
        let mut end = None;
        'lines: for (offset, line) in lines[start..].iter().enumerate() {
            for character in line.chars() {
                match character {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth -= 1;
                        if opened && depth == 0 {
                            end = Some(start + offset);
                            break 'lines;
                        }
                    }
                    // A declaration without a body (a trait's).
                    ';' if !opened => break 'lines,
                    _ => {}
                }
            }
        }
        if let Some(end) = end
            && end - start + 1 > limit
        {
            found.push((name.to_owned(), start + 1, end - start + 1));
        }
    }
    found
}

#[test]
fn no_file_of_src_is_over_700_lines() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter_map(|(name, text)| {
            let lines = text.lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("  {name}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines; split each by concern:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_of_src_is_over_100_lines() {
    let long: Vec<String> = sources()
        .into_iter()
        .flat_map(|(file, text)| {
            long_functions(&text, MAX_FUNCTION_LINES)
                .into_iter()
                .map(move |(name, line, lines)| format!("  {file}:{line} {name}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines; give a part a name of its own:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_scan_counts_code_braces_only() {
    let body = "    let x = 1;\n".repeat(3);
    let text = format!(
        "/// doc {{\npub(crate) async fn short() {{\n{body}}}\n\nfn braces_in_text<'a>(a: &'a str) -> char {{\n    let _ = \"}}\\\"}}\";\n    let _ = r#\"}}\"#;\n    // }}\n    /* }} */\n    let _ = '}}';\n    '{{'\n}}\n\nfn long() {{\n{}}}\n\ntrait T {{\n    fn declared(&self);\n}}\n",
        "    let y = {};\n".repeat(4)
    );
    assert_eq!(
        long_functions(&text, 3),
        [
            ("short".to_owned(), 2, 5),
            ("braces_in_text".to_owned(), 8, 8),
            ("long".to_owned(), 17, 6),
        ]
    );
    assert!(long_functions(&text, 8).is_empty());
}
