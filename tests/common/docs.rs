//! The pages users read, and the code blocks they show.

use std::path::{Path, PathBuf};

/// README.md, the pages under docs/ and the READMEs of the folders users
/// read.
pub fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    pages.sort();
    pages.extend(["README.md", "ci/README.md", "reports/README.md"].map(|name| root.join(name)));
    pages
}

/// A page's name as the repository spells it, for messages.
pub fn page_name(page: &Path) -> String {
    page.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(page)
        .display()
        .to_string()
}

/// A fenced code block: the line its fence opens on, its info string
/// (`sh`, `console`, `sh bench`, `usage`, …) and its text.
#[derive(Debug)]
pub struct CodeBlock {
    pub line: usize,
    pub info: String,
    pub text: String,
}

pub fn code_blocks(page: &str) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<CodeBlock> = None;
    for (index, line) in page.lines().enumerate() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            match open.take() {
                Some(block) => blocks.push(block),
                None => {
                    open = Some(CodeBlock {
                        line: index + 1,
                        info: fence.trim().to_owned(),
                        text: String::new(),
                    });
                }
            }
            continue;
        }
        if let Some(block) = &mut open {
            block.text.push_str(line);
            block.text.push('\n');
        }
    }
    blocks
}
