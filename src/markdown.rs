//! Text from data (slice names, file names, messages) placed into the
//! Markdown that goes into pull-request comments: escaped so that a `|`
//! cannot break a table and HTML in a slice name is shown, not rendered.

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
}
