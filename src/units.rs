//! The bounded quantities the stages take: a quality target, a confidence,
//! a share of requests drawn, a fraction of rows, a margin, a proportion of
//! requests allowed, a positive or non-negative number and a span of time.
//! (A count of at least one is the standard library's `NonZeroU32`,
//! `NonZeroU64` or `NonZeroUsize`, which clap reads the same way.)
//!
//! Each is checked when it is made, from a flag (`FromStr`, which clap uses
//! as the flag's value parser) or from a number (`new`), so a stage never
//! sees a target of 1.5 or a confidence of 0. `Display` writes the number as
//! it was given, so documents and messages read as before.

use std::fmt;
use std::str::FromStr;

/// A value outside its quantity's range, or not a number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{given}: {what}")]
pub struct OutOfRange {
    given: String,
    what: &'static str,
}

/// Where a bounded number may lie.
#[derive(Debug, Clone, Copy)]
enum Bounds {
    /// (0, 1]
    OpenClosed,
    /// (0, 1)
    Open,
    /// [0, 1]
    Closed,
    /// (0, ∞)
    Positive,
    /// [0, ∞)
    NonNegative,
}

impl Bounds {
    fn holds(self, value: f64) -> bool {
        match self {
            Bounds::OpenClosed => value > 0.0 && value <= 1.0,
            Bounds::Open => value > 0.0 && value < 1.0,
            Bounds::Closed => (0.0..=1.0).contains(&value),
            Bounds::Positive => value.is_finite() && value > 0.0,
            Bounds::NonNegative => value.is_finite() && value >= 0.0,
        }
    }
}

macro_rules! bounded {
    ($(#[$doc:meta])* $name:ident, $bounds:expr, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
        pub struct $name(f64);

        impl $name {
            pub fn new(value: f64) -> Result<Self, OutOfRange> {
                if $bounds.holds(value) {
                    Ok(Self(value))
                } else {
                    Err(OutOfRange {
                        given: value.to_string(),
                        what: $what,
                    })
                }
            }

            pub fn get(self) -> f64 {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = OutOfRange;

            fn from_str(text: &str) -> Result<Self, OutOfRange> {
                let out_of_range = || OutOfRange {
                    given: text.to_owned(),
                    what: $what,
                };
                let value = text.trim().parse::<f64>().map_err(|_| out_of_range())?;
                Self::new(value).map_err(|_| out_of_range())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, formatter)
            }
        }

        impl From<$name> for f64 {
            fn from(value: $name) -> f64 {
                value.0
            }
        }
    };
}

bounded!(
    /// The quality a slice must reach: above 0 and at most 1.
    Target,
    Bounds::OpenClosed,
    "a target is above 0 and at most 1 (0.9)"
);

bounded!(
    /// The confidence of a test or an interval: strictly between 0 and 1.
    Confidence,
    Bounds::Open,
    "a confidence is between 0 and 1 (0.95)"
);

bounded!(
    /// A share of records or requests drawn: above 0 and at most 1.
    Share,
    Bounds::OpenClosed,
    "a share is above 0 and at most 1 (0.1)"
);

bounded!(
    /// A part of the rows set aside, or a width: strictly between 0 and 1.
    Fraction,
    Bounds::Open,
    "a fraction is between 0 and 1 (0.2)"
);

bounded!(
    /// A difference of two qualities allowed: from 0 to 1.
    Margin,
    Bounds::Closed,
    "a margin is at least 0 and at most 1 (0.01)"
);

bounded!(
    /// A share of requests allowed, from none to all: from 0 to 1.
    Proportion,
    Bounds::Closed,
    "a proportion is at least 0 and at most 1 (0.1)"
);

bounded!(
    /// A rate, a deadline or a wait that must be more than nothing: a finite
    /// number above 0.
    Positive,
    Bounds::Positive,
    "expected a number above 0"
);

bounded!(
    /// A price, a spread or a wait that may be nothing: a finite number of
    /// at least 0.
    NonNegative,
    Bounds::NonNegative,
    "expected a number of at least 0"
);

impl Confidence {
    /// The error rate the confidence leaves: 1 − confidence.
    pub fn delta(self) -> f64 {
        1.0 - self.0
    }
}

/// A span of time written `1500ms`, `90s`, `30m` or `1h`; a bare number is
/// seconds. Zero is a span; a negative one is not.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Span {
    milliseconds: f64,
}

/// A span that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadSpan {
    #[error("{0}: unknown unit {1:?}; use ms, s, m or h")]
    Unit(String, String),
    #[error("{0}: expected a duration such as 90s, 30m or 1h")]
    Number(String),
    #[error("{0}: expected a span of at least 1ms")]
    Empty(String),
}

impl Span {
    pub fn from_milliseconds(milliseconds: f64) -> Option<Span> {
        (milliseconds.is_finite() && milliseconds >= 0.0).then_some(Span { milliseconds })
    }

    pub fn milliseconds(self) -> f64 {
        self.milliseconds
    }

    /// The span in whole milliseconds, rounded to the nearest.
    pub fn whole_milliseconds(self) -> u64 {
        self.milliseconds.round() as u64
    }

    /// A span of at least one whole millisecond, for a flag where nothing
    /// is no answer (a window's width): the parser clap is given.
    pub fn at_least_a_millisecond(text: &str) -> Result<Span, BadSpan> {
        let span: Span = text.parse()?;
        if span.whole_milliseconds() == 0 {
            return Err(BadSpan::Empty(text.trim().to_owned()));
        }
        Ok(span)
    }
}

impl FromStr for Span {
    type Err = BadSpan;

    fn from_str(text: &str) -> Result<Span, BadSpan> {
        let text = text.trim();
        let split = text
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        if number.is_empty() {
            return Err(BadSpan::Number(text.to_owned()));
        }
        let scale = match unit {
            "ms" => 1.0,
            "" | "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return Err(BadSpan::Unit(text.to_owned(), unit.to_owned())),
        };
        number
            .parse::<f64>()
            .ok()
            .and_then(|value| Span::from_milliseconds(value * scale))
            .ok_or_else(|| BadSpan::Number(text.to_owned()))
    }
}

/// `value` with `decimals` places, as a table shows it; one too large to
/// read that way, such as a cost of 1e308 a route claimed, in scientific
/// notation, so no table cell runs to hundreds of digits.
pub fn readable(value: f64, decimals: usize) -> String {
    if value.is_finite() && value.abs() >= 1e9 {
        format!("{value:.3e}")
    } else {
        format!("{value:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_too_large_to_read_in_a_table_is_written_in_scientific_notation() {
        assert_eq!(readable(0.001234567, 5), "0.00123");
        assert_eq!(readable(123_456_789.0, 0), "123456789");
        assert_eq!(readable(1e308, 5), "1.000e308");
        assert_eq!(readable(-2.5e12, 2), "-2.500e12");
    }

    #[test]
    fn each_quantity_takes_its_range_and_names_itself_when_outside() {
        assert_eq!("1".parse::<Target>().unwrap().get(), 1.0);
        assert_eq!(
            "0".parse::<Target>().unwrap_err().to_string(),
            "0: a target is above 0 and at most 1 (0.9)"
        );
        assert_eq!(
            "nan".parse::<Target>().unwrap_err().to_string(),
            "nan: a target is above 0 and at most 1 (0.9)"
        );
        assert_eq!(
            "1".parse::<Confidence>().unwrap_err().to_string(),
            "1: a confidence is between 0 and 1 (0.95)"
        );
        assert_eq!("0.95".parse::<Confidence>().unwrap().delta(), 1.0 - 0.95);
        assert_eq!("1".parse::<Share>().unwrap().get(), 1.0);
        assert_eq!(
            "0".parse::<Share>().unwrap_err().to_string(),
            "0: a share is above 0 and at most 1 (0.1)"
        );
        assert_eq!(
            "1".parse::<Fraction>().unwrap_err().to_string(),
            "1: a fraction is between 0 and 1 (0.2)"
        );
        assert_eq!("0".parse::<Margin>().unwrap().get(), 0.0);
        assert_eq!("0".parse::<Proportion>().unwrap().get(), 0.0);
        assert_eq!(
            "1.5".parse::<Proportion>().unwrap_err().to_string(),
            "1.5: a proportion is at least 0 and at most 1 (0.1)"
        );
        assert_eq!(
            "-0.1".parse::<Margin>().unwrap_err().to_string(),
            "-0.1: a margin is at least 0 and at most 1 (0.01)"
        );
        assert_eq!(
            Target::new(1.5).unwrap_err().to_string(),
            "1.5: a target is above 0 and at most 1 (0.9)"
        );
        assert_eq!("2500".parse::<Positive>().unwrap().get(), 2500.0);
        for refused in ["0", "-1", "inf", "NaN"] {
            assert_eq!(
                refused.parse::<Positive>().unwrap_err().to_string(),
                format!("{refused}: expected a number above 0")
            );
        }
        assert_eq!("0".parse::<NonNegative>().unwrap().get(), 0.0);
        for refused in ["-0.5", "inf"] {
            assert_eq!(
                refused.parse::<NonNegative>().unwrap_err().to_string(),
                format!("{refused}: expected a number of at least 0")
            );
        }
    }

    #[test]
    fn a_quantity_is_written_as_it_was_given() {
        assert_eq!("0.80".parse::<Target>().unwrap().to_string(), "0.8");
        assert_eq!(Confidence::new(0.9).unwrap().to_string(), 0.9.to_string());
    }

    #[test]
    fn a_window_is_at_least_a_millisecond() {
        assert_eq!(
            Span::at_least_a_millisecond("1ms").unwrap().milliseconds(),
            1.0
        );
        for nothing in ["0s", "0.2ms"] {
            assert_eq!(
                Span::at_least_a_millisecond(nothing)
                    .unwrap_err()
                    .to_string(),
                format!("{nothing}: expected a span of at least 1ms")
            );
        }
    }

    #[test]
    fn spans_read_every_unit_and_a_bare_number_is_seconds() {
        let cases = [
            ("1500ms", 1500.0),
            ("90s", 90_000.0),
            ("90", 90_000.0),
            ("0.5s", 500.0),
            ("30m", 1_800_000.0),
            ("1h", 3_600_000.0),
            ("0", 0.0),
        ];
        for (text, milliseconds) in cases {
            assert_eq!(
                text.parse::<Span>().unwrap().milliseconds(),
                milliseconds,
                "{text}"
            );
        }
        assert_eq!(
            "90x".parse::<Span>().unwrap_err().to_string(),
            "90x: unknown unit \"x\"; use ms, s, m or h"
        );
        assert_eq!(
            "soon".parse::<Span>().unwrap_err().to_string(),
            "soon: expected a duration such as 90s, 30m or 1h"
        );
        assert_eq!(
            "-5s".parse::<Span>().unwrap_err().to_string(),
            "-5s: expected a duration such as 90s, 30m or 1h"
        );
    }
}
