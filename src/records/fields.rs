//! Where each field of a record is read from (`--map field=column`), and
//! how a record's time stamps read: epoch milliseconds, whole and in range,
//! or RFC 3339.

use super::schema::RECORD_COLUMNS;

/// Where each field of a record is read from: its own name, or the column
/// `--map field=column` names.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldNames(Vec<String>);

impl Default for FieldNames {
    fn default() -> Self {
        FieldNames(
            RECORD_COLUMNS
                .iter()
                .map(|column| column.name.to_owned())
                .collect(),
        )
    }
}

impl FieldNames {
    /// `field=column,field=column`, over the default names.
    pub fn parse(map: &str) -> Result<FieldNames, String> {
        let mut names = FieldNames::default();
        for pair in map.split(',').filter(|pair| !pair.trim().is_empty()) {
            let (field, column) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?}: expected FIELD=COLUMN"))?;
            let (field, column) = (field.trim(), column.trim());
            let index = RECORD_COLUMNS
                .iter()
                .position(|known| known.name == field)
                .ok_or_else(|| {
                    format!("{field:?} is not a record field (docs/schema.md, \"Request records\")")
                })?;
            if column.is_empty() {
                return Err(format!("{field}: the column name is empty"));
            }
            names.0[index] = column.to_owned();
        }
        Ok(names)
    }

    pub(super) fn source(&self, field: usize) -> &str {
        &self.0[field]
    }
}

/// Milliseconds since 1970 from a number that must be whole and fit: a
/// float column's `1764504000000.0` reads, `1764504000000.5` and `1e30` do
/// not (a cast would truncate the one and lose the other).
pub(super) fn whole_milliseconds(text: &str) -> Result<i64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not epoch milliseconds"))?;
    whole_milliseconds_of(value, text)
}

/// `value` as whole epoch milliseconds, named `shown` when it is not.
pub(super) fn whole_milliseconds_of(value: f64, shown: &str) -> Result<i64, String> {
    // Floats from -2^63 up to, not including, 2^63 convert exactly.
    let bound = 2f64.powi(63);
    if value.fract() != 0.0 || !(-bound..bound).contains(&value) {
        return Err(format!(
            "{shown} is not whole epoch milliseconds within range"
        ));
    }
    Ok(value as i64)
}

/// Milliseconds since 1970 from epoch milliseconds or RFC 3339 text.
pub fn parse_timestamp(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("{text:?} is too large for epoch milliseconds"));
    }
    crate::clock::parse_timestamp_ms(text).ok_or_else(|| {
        format!("{text:?} is neither RFC 3339 (2026-11-30T12:00:00.250Z) nor epoch milliseconds")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::schema::field::{ROUTE, SLICE};

    #[test]
    fn timestamps_read_as_rfc_3339_with_fractions_and_offsets_or_epoch_milliseconds() {
        assert_eq!(parse_timestamp("1764504000250"), Ok(1_764_504_000_250));
        assert_eq!(
            parse_timestamp("2025-11-30T12:00:00.250Z"),
            Ok(1_764_504_000_250)
        );
        assert_eq!(
            parse_timestamp("2025-11-30T13:00:00.25+01:00"),
            Ok(1_764_504_000_250)
        );
        assert_eq!(
            parse_timestamp("2025-11-30 12:00:00.250000"),
            Ok(1_764_504_000_250)
        );
        assert!(parse_timestamp("yesterday").is_err());
        assert!(parse_timestamp("2025-13-30T12:00:00Z").is_err());
    }

    #[test]
    fn a_map_renames_fields_and_refuses_unknown_ones() {
        let names = FieldNames::parse("slice=tenant, route=deployment").unwrap();
        assert_eq!(names.source(SLICE), "tenant");
        assert_eq!(names.source(ROUTE), "deployment");
        assert!(FieldNames::parse("customer=slice").is_err());
    }
}
