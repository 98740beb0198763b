//! TOML parse errors come as a header, a snippet of the file and the reason
//! on separate lines; routeval reports every error on one line.

/// `TOML parse error at line 3, column 1: unknown field `x`, expected ...`
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| {
            let snippet = line.starts_with('|')
                || line
                    .split_once('|')
                    .is_some_and(|(number, _)| number.trim().chars().all(|c| c.is_ascii_digit()));
            !line.is_empty() && !snippet
        })
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn keeps_the_position_and_the_reason() {
        let message = "TOML parse error at line 3, column 1\n  |\n3 | tolerence = 1\n  | ^^^^^^^^^\nunknown field `tolerence`, expected `tolerance`\n";
        assert_eq!(
            one_line(message),
            "TOML parse error at line 3, column 1: unknown field `tolerence`, expected `tolerance`"
        );
    }
}
