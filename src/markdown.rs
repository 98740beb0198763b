//! Text from data (slice names, file names, messages) placed into the
//! Markdown that goes into pull-request comments: escaped so that a `|`
//! cannot break a table and HTML in a slice name is shown, not rendered;
//! and the one Markdown table, as `terminal::table` is the one on the
//! terminal, so that a document gives its rows and not a table's shape.

use std::ops::RangeBounds;

/// `text` as literal Markdown text, safe in a table cell.
pub fn text(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '\n' | '\r' => escaped.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' | '!' => {
                escaped.push('\\');
                escaped.push(character);
            }
            other => escaped.push(other),
        }
    }
    escaped
}

/// `text` as an inline code span, safe in a table cell: the fence is longer
/// than any run of backticks inside, and `|` is escaped as GitHub's tables
/// require.
pub fn code(text: &str) -> String {
    let flat = text.replace(['\n', '\r'], " ").replace('|', "\\|");
    let longest = flat
        .split(|character| character != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if flat.starts_with('`') || flat.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{flat}{pad}{fence}")
}

/// A GitHub table of `header` and `rows` (cells already escaped), the
/// `right` columns right-aligned, each line ending in a newline. An empty
/// cell is written as one space.
pub fn table<S: AsRef<str>>(
    header: &[S],
    rows: impl IntoIterator<Item = Vec<String>>,
    right: impl RangeBounds<usize>,
) -> String {
    table_aligned(header, rows, |column| right.contains(&column))
}

/// [`table`], the columns for which `right` holds right-aligned.
pub fn table_aligned<S: AsRef<str>>(
    header: &[S],
    rows: impl IntoIterator<Item = Vec<String>>,
    right: impl Fn(usize) -> bool,
) -> String {
    let mut out = line(header);
    out.push('|');
    for column in 0..header.len() {
        out.push_str(if right(column) { "---:|" } else { "---|" });
    }
    out.push('\n');
    for row in rows {
        out.push_str(&line(&row));
    }
    out
}

fn line<S: AsRef<str>>(cells: &[S]) -> String {
    let mut line = String::from("|");
    for cell in cells {
        let cell = cell.as_ref();
        if !cell.is_empty() {
            line.push(' ');
            line.push_str(cell);
        }
        line.push_str(" |");
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_breakers_and_html_are_escaped() {
        assert_eq!(
            text("a|b <script>alert(1)</script>"),
            "a\\|b &lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(text("line\nbreak *bold*"), "line break \\*bold\\*");
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a|b"), "`a\\|b`");
        assert_eq!(code("x`y"), "``x`y``");
        assert_eq!(code("`edge"), "`` `edge ``");
    }

    #[test]
    fn a_table_aligns_its_right_columns_and_writes_an_empty_cell_as_a_space() {
        let rows = vec![vec!["a".to_owned(), "1".to_owned(), String::new()]];
        assert_eq!(
            table(&["", "n", "x"], rows, 1..2),
            "| | n | x |\n|---|---:|---|\n| a | 1 | |\n"
        );
    }
}
