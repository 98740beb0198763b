//! Graded results with any number of tiers. Each tier NAME has `NAME_ok`
//! and `cost_NAME` (and optionally `NAME_ms`, `NAME_ttft_ms`, `NAME_model`,
//! `audited_ok_NAME`), the tiers named cheapest first by `--tiers` or by the
//! Parquet key-value metadata [`TIERS_KEY`]; a cascade has a verifier score
//! `score_NAME` and cost `cost_verifier_NAME` for each non-final stage (the
//! first stage may use the two-tier `score` and `cost_verifier`). A file
//! without tiers is the two-tier `small`, `large` table.
//!
//! The first tier's columns are read in the two-tier table's small columns
//! and the last tier's in its large ones, so every check the readers make
//! applies to them; the tiers between and the later stages' scores arrive
//! as carried columns and are checked here, with the same messages.

use std::path::Path;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array};
use arrow::datatypes::DataType;

use super::assemble::{ColumnNames, MAX_COST_USD};
use super::error::ReadError;
use super::graded::{Column, GradedBatch};

/// Parquet key-value metadata naming a file's tiers, cheapest first,
/// comma-separated.
pub const TIERS_KEY: &str = "routeval.graded.tiers";

/// A table's tiers, cheapest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiers(Vec<String>);

/// Whether `name` can name a tier: letters, digits, `-` and `_`.
pub fn is_tier_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Tiers {
    /// `a,b,c`: at least two distinct names of letters, digits, `-` and `_`.
    pub fn parse(text: &str) -> Result<Tiers, String> {
        let names: Vec<String> = text.split(',').map(|name| name.trim().to_owned()).collect();
        if names.len() < 2 {
            return Err(format!("{text:?}: name at least two tiers, cheapest first"));
        }
        for (index, name) in names.iter().enumerate() {
            if !is_tier_name(name) {
                return Err(format!(
                    "{name:?} is not a tier name (letters, digits, - and _)"
                ));
            }
            if names[..index].contains(name) {
                return Err(format!("tier {name:?} is named twice"));
            }
            // Their columns are the two-tier table's, so they keep their ends.
            if name == "small" && index != 0 {
                return Err("tier \"small\" can only be the first (cheapest)".to_owned());
            }
            if name == "large" && index != names.len() - 1 {
                return Err("tier \"large\" can only be the last (strongest)".to_owned());
            }
        }
        Ok(Tiers(names))
    }

    pub fn two_tier() -> Tiers {
        Tiers(vec!["small".to_owned(), "large".to_owned()])
    }

    pub fn names(&self) -> &[String] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn first(&self) -> &str {
        &self.0[0]
    }

    fn last(&self) -> &str {
        &self.0[self.0.len() - 1]
    }

    /// `base` with the first tier's columns read as the small ones and the
    /// last tier's as the large ones.
    pub fn column_names(&self, mut base: ColumnNames) -> ColumnNames {
        let (first, last) = (self.first(), self.last());
        let renames = [
            (Column::SmallOk, format!("{first}_ok")),
            (Column::LargeOk, format!("{last}_ok")),
            (Column::CostSmall, format!("cost_{first}")),
            (Column::CostLarge, format!("cost_{last}")),
            (Column::SmallMs, format!("{first}_ms")),
            (Column::SmallTtftMs, format!("{first}_ttft_ms")),
            (Column::LargeMs, format!("{last}_ms")),
            (Column::LargeTtftMs, format!("{last}_ttft_ms")),
            (Column::SmallModel, format!("{first}_model")),
            (Column::LargeModel, format!("{last}_model")),
            (Column::AuditedOkSmall, format!("audited_ok_{first}")),
            (Column::AuditedOkLarge, format!("audited_ok_{last}")),
        ];
        for (column, name) in renames {
            if name != column.name() && !base.mapped.iter().any(|(mapped, _)| *mapped == column) {
                base.mapped.push((column, name));
                base.mapped_by = "--tiers";
            }
        }
        base
    }

    /// The column holding stage `stage`'s verifier score, and the one
    /// holding its cost.
    pub fn stage_columns(&self, stage: usize) -> (String, String) {
        let name = &self.0[stage];
        (format!("score_{name}"), format!("cost_verifier_{name}"))
    }
}

/// The tiers a Parquet file's metadata names, if it names any.
pub fn tiers_in_metadata(path: &Path) -> Result<Option<Tiers>, ReadError> {
    if super::Format::detect(path)? != super::Format::Parquet {
        return Ok(None);
    }
    let value = super::open_parquet(path)?
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|pairs| pairs.iter().find(|pair| pair.key == TIERS_KEY))
        .and_then(|pair| pair.value.clone());
    value
        .map(|text| {
            Tiers::parse(&text).map_err(|problem| ReadError::MissingColumn {
                path: path.to_owned(),
                column: TIERS_KEY.to_owned(),
                hint: format!(" (metadata: {problem})"),
            })
        })
        .transpose()
}

/// One batch's columns for k tiers.
#[derive(Debug, Clone)]
pub struct TieredColumns {
    /// Per tier, cheapest first.
    pub ok: Vec<BooleanArray>,
    pub cost: Vec<Float64Array>,
    /// Cascade: each non-final stage's verifier score; predictive: the
    /// router's score alone.
    pub scores: Vec<Float64Array>,
    /// Cascade: each non-final stage's verifier cost.
    pub verifier_cost: Vec<Float64Array>,
}

/// The k-tier columns of a batch read with [`Tiers::column_names`]; with
/// `cascade`, each non-final stage's verifier score and cost too.
pub fn tiered_columns(
    batch: &GradedBatch,
    tiers: &Tiers,
    cascade: bool,
    path: &Path,
) -> Result<TieredColumns, ReadError> {
    let carried = |name: &str| {
        batch
            .extra
            .iter()
            .find(|(field, _)| field.name() == name)
            .map(|(_, array)| array)
    };
    let missing = |column: String, hint: &str| ReadError::MissingColumn {
        path: path.to_owned(),
        column,
        hint: hint.to_owned(),
    };
    let k = tiers.len();
    let mut ok = vec![batch.small_ok.clone()];
    let mut cost = vec![batch.cost_small.clone()];
    for name in &tiers.names()[1..k - 1] {
        let (flag, price) = (format!("{name}_ok"), format!("cost_{name}"));
        let hint = " (a tier named by --tiers or the file's metadata)";
        let flags = carried(&flag).ok_or_else(|| missing(flag.clone(), hint))?;
        ok.push(booleans(flags, batch, path, &flag)?);
        let prices = carried(&price).ok_or_else(|| missing(price.clone(), hint))?;
        cost.push(costs(prices, batch, path, &price)?);
    }
    ok.push(batch.large_ok.clone());
    cost.push(batch.cost_large.clone());
    let (scores, verifier_cost) = match cascade {
        false => (vec![batch.score.clone()], Vec::new()),
        true => {
            let mut scores = Vec::with_capacity(k - 1);
            let mut verifier_cost = Vec::with_capacity(k - 1);
            for stage in 0..k - 1 {
                let (score, price) = tiers.stage_columns(stage);
                let stage_score = match carried(&score) {
                    Some(array) => numbers(array, batch, path, &score, f64::MIN, f64::MAX)?,
                    // The first stage may keep the two-tier `score`.
                    None if stage == 0 && batch.score.null_count() == 0 => batch.score.clone(),
                    None => {
                        return Err(missing(score, " (the verifier score of a cascade stage)"));
                    }
                };
                scores.push(stage_score);
                verifier_cost.push(match carried(&price) {
                    Some(array) => costs(array, batch, path, &price)?,
                    None if stage == 0 => batch.cost_verifier.clone(),
                    None => Float64Array::from(vec![0.0; batch.num_rows()]),
                });
            }
            (scores, verifier_cost)
        }
    };
    Ok(TieredColumns {
        ok,
        cost,
        scores,
        verifier_cost,
    })
}

fn invalid(
    batch: &GradedBatch,
    path: &Path,
    column: &str,
    index: usize,
    problem: String,
) -> ReadError {
    ReadError::InvalidValue {
        path: path.to_owned(),
        location: batch.location(index),
        column: column.to_owned(),
        problem,
    }
}

fn booleans(
    array: &ArrayRef,
    batch: &GradedBatch,
    path: &Path,
    column: &str,
) -> Result<BooleanArray, ReadError> {
    let mut values = Vec::with_capacity(array.len());
    for index in 0..array.len() {
        if array.is_null(index) {
            return Err(invalid(
                batch,
                path,
                column,
                index,
                "missing value".to_owned(),
            ));
        }
        let value = match array.data_type() {
            DataType::Boolean => array.as_boolean().value(index),
            DataType::Utf8 => match array
                .as_string::<i32>()
                .value(index)
                .trim()
                .to_ascii_lowercase()
                .as_str()
            {
                "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(invalid(
                        batch,
                        path,
                        column,
                        index,
                        format!("expected true or false, found {other:?}"),
                    ));
                }
            },
            other => {
                return Err(ReadError::WrongType {
                    path: path.to_owned(),
                    column: column.to_owned(),
                    found: other.to_string(),
                    expected: "bool",
                });
            }
        };
        values.push(value);
    }
    Ok(BooleanArray::from(values))
}

fn numbers(
    array: &ArrayRef,
    batch: &GradedBatch,
    path: &Path,
    column: &str,
    low: f64,
    high: f64,
) -> Result<Float64Array, ReadError> {
    let cast = match array.data_type() {
        DataType::Utf8 => None,
        data_type if data_type.is_numeric() => {
            Some(arrow::compute::cast(array, &DataType::Float64).expect("numbers cast to f64"))
        }
        other => {
            return Err(ReadError::WrongType {
                path: path.to_owned(),
                column: column.to_owned(),
                found: other.to_string(),
                expected: "f64",
            });
        }
    };
    let mut values = Vec::with_capacity(array.len());
    for index in 0..array.len() {
        if array.is_null(index) {
            return Err(invalid(
                batch,
                path,
                column,
                index,
                "missing value".to_owned(),
            ));
        }
        let value = match &cast {
            Some(cast) => cast
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(index),
            None => {
                let text = array.as_string::<i32>().value(index);
                text.trim().parse::<f64>().map_err(|_| {
                    invalid(
                        batch,
                        path,
                        column,
                        index,
                        format!("expected a number, found {text:?}"),
                    )
                })?
            }
        };
        if !value.is_finite() || value < low || value > high {
            let problem = if low == 0.0 {
                format!("must be between 0 and {high} USD, found {value}")
            } else {
                format!("must be finite, found {value}")
            };
            return Err(invalid(batch, path, column, index, problem));
        }
        values.push(value);
    }
    Ok(Float64Array::from(values))
}

fn costs(
    array: &ArrayRef,
    batch: &GradedBatch,
    path: &Path,
    column: &str,
) -> Result<Float64Array, ReadError> {
    numbers(array, batch, path, column, 0.0, MAX_COST_USD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_lists_are_checked() {
        assert_eq!(
            Tiers::parse("mini, mid,large").unwrap().names(),
            ["mini", "mid", "large"]
        );
        assert!(Tiers::parse("large").unwrap_err().contains("at least two"));
        assert!(Tiers::parse("a,a").unwrap_err().contains("named twice"));
        assert!(
            Tiers::parse("a,b c")
                .unwrap_err()
                .contains("not a tier name")
        );
        assert!(
            Tiers::parse("small,large,xl")
                .unwrap_err()
                .contains("\"large\" can only be the last")
        );
    }

    #[test]
    fn the_first_and_last_tiers_read_as_small_and_large() {
        let names = Tiers::parse("mini,mid,frontier")
            .unwrap()
            .column_names(ColumnNames::default());
        assert_eq!(names.source(Column::SmallOk), "mini_ok");
        assert_eq!(names.source(Column::CostLarge), "cost_frontier");
        assert_eq!(names.source(Column::Score), "score");
        let two = Tiers::two_tier().column_names(ColumnNames::default());
        assert_eq!(two, ColumnNames::default(), "small, large is today's table");
    }
}
