//! Pulling the final answer out of free text: the last number (or the first
//! after a marker such as GSM8K's `####`), and a multiple-choice letter.

use std::sync::LazyLock;

use regex::Regex;

static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)").expect("a valid pattern"));

/// The final number of `text` as written (thousands separators removed): the
/// first number after the last `marker` when the text has one, else the
/// last number in the text.
pub fn final_number(text: &str, marker: Option<&str>) -> Option<String> {
    let marked = marker.and_then(|marker| text.rfind(marker).map(|at| &text[at + marker.len()..]));
    let found = match marked {
        Some(after) => NUMBER.find(after),
        None => NUMBER.find_iter(text).last(),
    }?;
    let written = found.as_str().replace(',', "");
    let written = written.trim_end_matches('.').to_owned();
    (!written.is_empty() && written != "-").then_some(written)
}

/// The value of a number as [`final_number`] writes it.
pub fn value(written: &str) -> Option<f64> {
    written.parse().ok().filter(|value: &f64| value.is_finite())
}

/// A compiled finder of multiple-choice letters among `letters`.
#[derive(Debug, Clone)]
pub struct ChoiceFinder {
    patterns: Vec<Regex>,
}

impl ChoiceFinder {
    pub fn new(letters: &str) -> Result<ChoiceFinder, String> {
        if letters.is_empty() || !letters.chars().all(|letter| letter.is_ascii_uppercase()) {
            return Err(format!(
                "letters must be upper-case ASCII letters, got {letters:?}"
            ));
        }
        let class = format!("[{letters}]");
        // In order of how explicitly the answer is stated.
        let patterns = [
            format!(r"(?i:answer)(?:\s+is)?\s*[:\-]?\s*[\(\*\[]*({class})\b"),
            format!(r"(?m)^\s*[\(\*\[]*({class})[\)\]\.:\*]*\s*$"),
            format!(r"\(({class})\)"),
            format!(r"^\s*({class})[\)\.:]"),
        ];
        let patterns = patterns
            .iter()
            .map(|pattern| Regex::new(pattern).map_err(|error| error.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(ChoiceFinder { patterns })
    }

    /// The letter the text answers with, if it states one.
    pub fn find(&self, text: &str) -> Option<char> {
        self.patterns.iter().find_map(|pattern| {
            pattern
                .captures_iter(text)
                .last()
                .and_then(|captures| captures.get(1))
                .and_then(|letter| letter.as_str().chars().next())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_numbers() {
        let table = [
            ("so she makes 9 * $2 = $18 every day.", None, Some("18")),
            ("costs $1,234.50 in total", None, Some("1234.50")),
            ("#### 18", Some("####"), Some("18")),
            (
                "3 + 4 = 7\n#### 7\n\nNote: 12 more",
                Some("####"),
                Some("7"),
            ),
            ("no marker here, 42.", Some("####"), Some("42")),
            ("he is -54 miles away", None, Some("-54")),
            ("about .5 pounds", None, Some(".5")),
            ("no digits", None, None),
        ];
        for (text, marker, expected) in table {
            assert_eq!(final_number(text, marker).as_deref(), expected, "{text}");
        }
        assert_eq!(value("1234.50"), Some(1234.5));
        assert_eq!(value(".5"), Some(0.5));
    }

    #[test]
    fn choice_letters() {
        let finder = ChoiceFinder::new("ABCD").unwrap();
        let table = [
            ("The answer is (C).", Some('C')),
            ("Answer: B", Some('B')),
            ("After weighing the options...\n\nD", Some('D')),
            ("I think (A) is wrong, so the answer is B.", Some('B')),
            ("**C**", Some('C')),
            ("A. Paris is the capital", Some('A')),
            ("None of these apply.", None),
            ("The answer is E", None),
        ];
        for (text, expected) in table {
            assert_eq!(finder.find(text), expected, "{text}");
        }
        assert!(ChoiceFinder::new("abc").is_err());
    }
}
