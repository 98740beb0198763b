//! A table pre-aggregated in the warehouse by the fold's own keys
//! (docs/records-sql.md): each row a group's count, read as the records
//! would have been, so billions of rows never leave the warehouse.

use std::path::Path;

use super::MAX_TTFT_BIN;
use crate::schema::RowLocation;

/// One row of a pre-aggregated table.
#[derive(Debug, Clone, Default)]
pub(super) struct AggregateRow {
    pub(super) window_start_ms: i64,
    pub(super) slice: String,
    pub(super) logical_model: Option<String>,
    pub(super) route: String,
    pub(super) reason: Option<String>,
    pub(super) model: Option<String>,
    pub(super) score_bin: Option<i64>,
    pub(super) ttft_bin: Option<i64>,
    pub(super) requests: u64,
    /// Of `requests`, those the route failed (optional column).
    pub(super) failures: Option<u64>,
    pub(super) cost_usd: Option<f64>,
}

/// Streams a pre-aggregated table (CSV, JSON lines or Parquet) whose
/// columns docs/records-sql.md defines.
pub(super) fn read_aggregates(
    path: &Path,
    mut visit: impl FnMut(&AggregateRow),
) -> anyhow::Result<u64> {
    use crate::schema::InputError;
    let mut rows = 0u64;
    // Every count the fold keeps is at most the requests of all rows: if
    // their sum fits, no count wraps.
    let mut all_requests = 0u64;
    let mut take = |location: RowLocation, object: &serde_json::Map<String, serde_json::Value>| {
        let fields = Fields {
            path,
            location,
            object,
        };
        let row = fields.aggregate_row(&mut all_requests)?;
        rows += 1;
        visit(&row);
        Ok::<(), InputError>(())
    };
    crate::schema::for_each_object(path, |location, object| take(location, &object))?;
    if rows == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the file has no records",
        }
        .into());
    }
    Ok(rows)
}

/// One row's fields, read with the file and row named in every error.
struct Fields<'a> {
    path: &'a Path,
    location: RowLocation,
    object: &'a serde_json::Map<String, serde_json::Value>,
}

impl Fields<'_> {
    fn invalid(&self, field: &str, problem: String) -> crate::schema::InputError {
        crate::schema::InputError::Invalid {
            path: self.path.to_owned(),
            location: self.location,
            field: field.to_owned(),
            problem,
        }
    }

    fn text(&self, field: &str) -> Option<String> {
        match self.object.get(field)? {
            serde_json::Value::String(text) if !text.is_empty() => Some(text.clone()),
            serde_json::Value::Number(number) => Some(number.to_string()),
            _ => None,
        }
    }

    fn required(&self, field: &str) -> Result<String, crate::schema::InputError> {
        self.text(field)
            .ok_or_else(|| self.invalid(field, "missing".to_owned()))
    }

    fn integer(&self, field: &str) -> Result<Option<i64>, crate::schema::InputError> {
        match self.object.get(field) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::Number(number)) => number
                .as_i64()
                .or_else(|| {
                    number
                        .as_f64()
                        .filter(|v| v.fract() == 0.0)
                        .map(|v| v as i64)
                })
                .map(Some)
                .ok_or_else(|| self.invalid(field, format!("{number} is not a whole number"))),
            Some(serde_json::Value::String(text)) if text.is_empty() => Ok(None),
            Some(serde_json::Value::String(text)) => text
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.invalid(field, format!("{text:?} is not a whole number"))),
            Some(other) => Err(self.invalid(field, format!("{other} is not a whole number"))),
        }
    }

    /// The row, its requests added to `all_requests`.
    fn aggregate_row(
        &self,
        all_requests: &mut u64,
    ) -> Result<AggregateRow, crate::schema::InputError> {
        let window_text = self.required("window_start")?;
        let window_start_ms = crate::records::parse_timestamp(&window_text)
            .map_err(|problem| self.invalid("window_start", problem))?;
        let requests = self
            .integer("requests")?
            .ok_or_else(|| self.invalid("requests", "missing".to_owned()))?;
        if requests < 0 {
            return Err(self.invalid("requests", format!("{requests} is negative")));
        }
        *all_requests = all_requests.checked_add(requests as u64).ok_or_else(|| {
            self.invalid(
                "requests",
                "the rows' requests add up past 2^64: they are not counts".to_owned(),
            )
        })?;
        let failures = self.integer("failures")?;
        if let Some(failures) = failures
            && !(0..=requests).contains(&failures)
        {
            return Err(self.invalid(
                "failures",
                format!("{failures} is not between 0 and the row's {requests} requests"),
            ));
        }
        let ttft_bin = self.integer("ttft_bin")?;
        if let Some(bin) = ttft_bin
            && !(0..=MAX_TTFT_BIN).contains(&bin)
        {
            return Err(self.invalid(
                "ttft_bin",
                format!(
                    "{bin} is no first-token bin: floor(ln(max(ttft_ms, 1)) / ln(1.01)) is 0 to {MAX_TTFT_BIN}"
                ),
            ));
        }
        let cost_usd = match self.text("cost_usd") {
            None => None,
            Some(text) => Some(
                text.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        self.invalid("cost_usd", format!("{text:?} is not a non-negative number"))
                    })?,
            ),
        };
        Ok(AggregateRow {
            window_start_ms,
            slice: self.required("slice")?,
            logical_model: self.text("logical_model"),
            route: self.required("route")?,
            reason: self.text("reason"),
            model: self.text("model"),
            score_bin: self.integer("score_bin")?,
            ttft_bin,
            requests: requests as u64,
            failures: failures.map(|failures| failures as u64),
            cost_usd,
        })
    }
}
