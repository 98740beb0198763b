//! The graded-results table: its columns, their Arrow types, and the
//! normalised, validated batches the readers hand to stages.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};

/// Version of the graded-results table. Written into Parquet metadata under
/// [`SCHEMA_VERSION_KEY`]; readers refuse newer versions. Version 2 names
/// more than two tiers in the metadata; a two-tier table is written as
/// version 1, which every routeval reads, so only a table an older routeval
/// would misread as two tiers is refused by it.
pub const SCHEMA_VERSION: u32 = 2;

/// The version of a two-tier table.
pub const TWO_TIER_SCHEMA_VERSION: u32 = 1;

/// Parquet key-value metadata key holding [`SCHEMA_VERSION`].
pub const SCHEMA_VERSION_KEY: &str = "routeval.graded.schema_version";

/// What every writer of graded results (`grade`, `import`, `simulate`,
/// `router score` and `join`) writes, and so the only file it replaces.
pub const GRADED_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a graded-results table",
    crate::atomic::Replaces::Table(SCHEMA_VERSION_KEY),
);

/// The logical type of a known column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    Utf8,
    Float64,
    Boolean,
}

impl ColumnKind {
    pub fn data_type(self) -> DataType {
        match self {
            ColumnKind::Utf8 => DataType::Utf8,
            ColumnKind::Float64 => DataType::Float64,
            ColumnKind::Boolean => DataType::Boolean,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ColumnKind::Utf8 => "utf8",
            ColumnKind::Float64 => "f64",
            ColumnKind::Boolean => "bool",
        }
    }
}

/// A column of the graded-results table that routeval knows the meaning of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    Id,
    Slice,
    Score,
    SmallOk,
    LargeOk,
    CostSmall,
    CostLarge,
    CostVerifier,
    CostRouter,
    SmallMs,
    SmallTtftMs,
    LargeMs,
    LargeTtftMs,
    VerifierMs,
    RouterMs,
    SmallModel,
    LargeModel,
    VerifierModel,
    AuditedOkSmall,
    AuditedOkLarge,
}

impl Column {
    /// Every known column, in the table's canonical order.
    pub const ALL: [Column; 20] = [
        Column::Id,
        Column::Slice,
        Column::Score,
        Column::SmallOk,
        Column::LargeOk,
        Column::CostSmall,
        Column::CostLarge,
        Column::CostVerifier,
        Column::CostRouter,
        Column::SmallMs,
        Column::SmallTtftMs,
        Column::LargeMs,
        Column::LargeTtftMs,
        Column::VerifierMs,
        Column::RouterMs,
        Column::SmallModel,
        Column::LargeModel,
        Column::VerifierModel,
        Column::AuditedOkSmall,
        Column::AuditedOkLarge,
    ];

    /// A human's verdict on each tier's answer, for the rows someone
    /// audited (null elsewhere): what corrects the grader's own error.
    pub const AUDITS: [Column; 2] = [Column::AuditedOkSmall, Column::AuditedOkLarge];

    pub const LATENCIES: [Column; 6] = [
        Column::SmallMs,
        Column::SmallTtftMs,
        Column::LargeMs,
        Column::LargeTtftMs,
        Column::VerifierMs,
        Column::RouterMs,
    ];

    /// The model version each tier's endpoint reported for the row.
    pub const MODELS: [Column; 3] = [
        Column::SmallModel,
        Column::LargeModel,
        Column::VerifierModel,
    ];

    /// Optional columns read only when a stage asks for details.
    pub fn is_detail(self) -> bool {
        Column::LATENCIES.contains(&self) || Column::MODELS.contains(&self)
    }

    pub fn name(self) -> &'static str {
        match self {
            Column::Id => "id",
            Column::Slice => "slice",
            Column::Score => "score",
            Column::SmallOk => "small_ok",
            Column::LargeOk => "large_ok",
            Column::CostSmall => "cost_small",
            Column::CostLarge => "cost_large",
            Column::CostVerifier => "cost_verifier",
            Column::CostRouter => "cost_router",
            Column::SmallMs => "small_ms",
            Column::SmallTtftMs => "small_ttft_ms",
            Column::LargeMs => "large_ms",
            Column::LargeTtftMs => "large_ttft_ms",
            Column::VerifierMs => "verifier_ms",
            Column::RouterMs => "router_ms",
            Column::SmallModel => "small_model",
            Column::LargeModel => "large_model",
            Column::VerifierModel => "verifier_model",
            Column::AuditedOkSmall => "audited_ok_small",
            Column::AuditedOkLarge => "audited_ok_large",
        }
    }

    pub fn kind(self) -> ColumnKind {
        match self {
            Column::Id
            | Column::Slice
            | Column::SmallModel
            | Column::LargeModel
            | Column::VerifierModel => ColumnKind::Utf8,
            Column::SmallOk | Column::LargeOk | Column::AuditedOkSmall | Column::AuditedOkLarge => {
                ColumnKind::Boolean
            }
            _ => ColumnKind::Float64,
        }
    }

    /// Whether a file must have this column. Optional cost columns read as 0
    /// where absent or null; optional latencies stay null.
    pub fn required(self) -> bool {
        matches!(
            self,
            Column::Id
                | Column::Slice
                | Column::Score
                | Column::SmallOk
                | Column::LargeOk
                | Column::CostSmall
                | Column::CostLarge
        )
    }

    pub fn is_cost(self) -> bool {
        matches!(
            self,
            Column::CostSmall | Column::CostLarge | Column::CostVerifier | Column::CostRouter
        )
    }

    pub fn from_name(name: &str) -> Option<Column> {
        Column::ALL.into_iter().find(|column| column.name() == name)
    }

    /// The column's Arrow field. The score is required as a column but may
    /// be null: `grade` of a run with no verifier leaves it empty for a
    /// router to fill, and stages that need it refuse the nulls.
    pub fn field(self) -> Field {
        let nullable = !self.required() || self == Column::Score;
        Field::new(self.name(), self.kind().data_type(), nullable)
    }
}

/// The Arrow schema of the known columns. Files may carry more columns after
/// these; they are kept in order after the known ones.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(
        Column::ALL
            .into_iter()
            .map(Column::field)
            .collect::<Vec<_>>(),
    ))
}

/// A validated slice of rows, with every known column under its canonical name
/// and type. Required columns have no nulls, scores are finite, costs finite
/// and non-negative (absent optional costs are zeros).
#[derive(Debug, Clone)]
pub struct GradedBatch {
    /// Index (from 0) of this batch's first row in the whole file.
    pub first_row: u64,
    /// For text formats, the 1-based source line of each row, so later errors
    /// can point into the file.
    pub lines: Option<Arc<[u64]>>,
    pub id: StringArray,
    pub slice: StringArray,
    pub score: Float64Array,
    pub small_ok: BooleanArray,
    pub large_ok: BooleanArray,
    pub cost_small: Float64Array,
    pub cost_large: Float64Array,
    pub cost_verifier: Float64Array,
    pub cost_router: Float64Array,
    /// The latency columns in [`Column::LATENCIES`] order; `None` where the
    /// file has no such column or it was not requested.
    pub latencies: [Option<Float64Array>; 6],
    /// The model-version columns in [`Column::MODELS`] order, likewise.
    pub models: [Option<StringArray>; 3],
    /// The human verdicts in [`Column::AUDITS`] order, where the file has
    /// them (null on rows nobody audited).
    pub audited: [Option<BooleanArray>; 2],
    /// Columns routeval does not know, carried through unchanged.
    pub extra: Vec<(FieldRef, ArrayRef)>,
}

impl GradedBatch {
    pub fn num_rows(&self) -> usize {
        self.id.len()
    }

    /// Where row `index` of this batch sits in its file, for messages.
    pub fn location(&self, index: usize) -> RowLocation {
        match &self.lines {
            Some(lines) => RowLocation::Line(lines[index]),
            None => RowLocation::Row(self.first_row + index as u64 + 1),
        }
    }

    /// The rows `mask` keeps, as a batch whose first row is `first_row` of
    /// its (new) file.
    pub fn filter(&self, mask: &BooleanArray, first_row: u64) -> GradedBatch {
        fn keep<A: Array + Clone + 'static>(array: &A, mask: &BooleanArray) -> A {
            let kept = arrow::compute::filter(array, mask).expect("a mask of the batch's length");
            kept.as_any()
                .downcast_ref::<A>()
                .expect("filter keeps the array's type")
                .clone()
        }
        GradedBatch {
            first_row,
            lines: self.lines.as_ref().map(|lines| {
                lines
                    .iter()
                    .zip(mask.iter())
                    .filter(|(_, kept)| kept == &Some(true))
                    .map(|(line, _)| *line)
                    .collect()
            }),
            id: keep(&self.id, mask),
            slice: keep(&self.slice, mask),
            score: keep(&self.score, mask),
            small_ok: keep(&self.small_ok, mask),
            large_ok: keep(&self.large_ok, mask),
            cost_small: keep(&self.cost_small, mask),
            cost_large: keep(&self.cost_large, mask),
            cost_verifier: keep(&self.cost_verifier, mask),
            cost_router: keep(&self.cost_router, mask),
            latencies: self
                .latencies
                .clone()
                .map(|latency| latency.map(|array| keep(&array, mask))),
            models: self
                .models
                .clone()
                .map(|model| model.map(|array| keep(&array, mask))),
            audited: self
                .audited
                .clone()
                .map(|audited| audited.map(|array| keep(&array, mask))),
            extra: self
                .extra
                .iter()
                .map(|(field, array)| {
                    let kept = arrow::compute::filter(array.as_ref(), mask)
                        .expect("a mask of the batch's length");
                    (field.clone(), kept)
                })
                .collect(),
        }
    }

    /// The batch as one Arrow record batch: known columns in canonical order,
    /// the optional detail columns the file has, then the carried columns.
    pub fn to_record_batch(&self, present: &Present) -> RecordBatch {
        let mut fields: Vec<FieldRef> = Vec::new();
        let mut arrays: Vec<ArrayRef> = Vec::new();
        let mut push = |column: Column, array: ArrayRef| {
            fields.push(Arc::new(column.field()));
            arrays.push(array);
        };
        push(Column::Id, Arc::new(self.id.clone()));
        push(Column::Slice, Arc::new(self.slice.clone()));
        push(Column::Score, Arc::new(self.score.clone()));
        push(Column::SmallOk, Arc::new(self.small_ok.clone()));
        push(Column::LargeOk, Arc::new(self.large_ok.clone()));
        push(Column::CostSmall, Arc::new(self.cost_small.clone()));
        push(Column::CostLarge, Arc::new(self.cost_large.clone()));
        push(Column::CostVerifier, Arc::new(self.cost_verifier.clone()));
        push(Column::CostRouter, Arc::new(self.cost_router.clone()));
        for ((column, latency), include) in Column::LATENCIES
            .into_iter()
            .zip(&self.latencies)
            .zip(present.latencies)
        {
            if include {
                let array = latency
                    .clone()
                    .unwrap_or_else(|| Float64Array::new_null(self.num_rows()));
                push(column, Arc::new(array));
            }
        }
        for ((column, model), include) in Column::MODELS
            .into_iter()
            .zip(&self.models)
            .zip(present.models)
        {
            if include {
                let array = model
                    .clone()
                    .unwrap_or_else(|| StringArray::new_null(self.num_rows()));
                push(column, Arc::new(array));
            }
        }
        for ((column, audited), include) in Column::AUDITS
            .into_iter()
            .zip(&self.audited)
            .zip(present.audited)
        {
            if include {
                let array = audited
                    .clone()
                    .unwrap_or_else(|| BooleanArray::new_null(self.num_rows()));
                push(column, Arc::new(array));
            }
        }
        for (field, array) in &self.extra {
            fields.push(field.clone());
            arrays.push(array.clone());
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .expect("graded batch columns share one length by construction")
    }
}

/// Which optional detail columns a file has (and a stage read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Present {
    pub latencies: [bool; 6],
    pub models: [bool; 3],
    pub audited: [bool; 2],
}

/// The name of the column a router's scores go into (`--into`): `score`
/// or a column the graded-results table does not define, so a router never
/// overwrites an outcome or a cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreColumn(String);

impl ScoreColumn {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for ScoreColumn {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        if name.trim().is_empty() {
            return Err("a column name cannot be empty".to_owned());
        }
        match Column::from_name(name) {
            Some(column) if column != Column::Score => Err(format!(
                "\"{name}\" is a column of the graded-results table; name `score` or a new column"
            )),
            _ => Ok(Self(name.to_owned())),
        }
    }
}

impl std::fmt::Display for ScoreColumn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a row sits in its source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLocation {
    /// 1-based data row (Parquet).
    Row(u64),
    /// 1-based physical line (CSV, JSON lines).
    Line(u64),
}

impl RowLocation {
    /// The 1-based row or line.
    pub fn number(self) -> u64 {
        match self {
            RowLocation::Row(number) | RowLocation::Line(number) => number,
        }
    }
}

impl std::fmt::Display for RowLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowLocation::Row(row) => write!(f, "row {row}"),
            RowLocation::Line(line) => write!(f, "line {line}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid batch whose rows differ only in their ids.
    pub(crate) fn batch_with_ids(first_row: u64, ids: &[&str]) -> GradedBatch {
        let rows = ids.len();
        let floats = || Float64Array::from(vec![0.5; rows]);
        let bools = || BooleanArray::from(vec![true; rows]);
        GradedBatch {
            first_row,
            lines: None,
            id: StringArray::from(ids.to_vec()),
            slice: StringArray::from(vec!["s"; rows]),
            score: floats(),
            small_ok: bools(),
            large_ok: bools(),
            cost_small: floats(),
            cost_large: floats(),
            cost_verifier: floats(),
            cost_router: floats(),
            latencies: Default::default(),
            models: Default::default(),
            audited: Default::default(),
            extra: Vec::new(),
        }
    }

    #[test]
    fn column_names_round_trip() {
        for column in Column::ALL {
            assert_eq!(Column::from_name(column.name()), Some(column));
        }
        assert_eq!(Column::from_name("prompt"), None);
    }

    #[test]
    fn record_batch_keeps_canonical_order_then_extras() {
        let mut batch = batch_with_ids(0, &["a"]);
        batch.extra.push((
            Arc::new(Field::new("prompt", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec!["hi"])),
        ));
        let present = Present {
            latencies: [true, false, false, false, false, false],
            models: [false, true, false],
            audited: [false, false],
        };
        let record = batch.to_record_batch(&present);
        let names: Vec<_> = record
            .schema()
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "id",
                "slice",
                "score",
                "small_ok",
                "large_ok",
                "cost_small",
                "cost_large",
                "cost_verifier",
                "cost_router",
                "small_ms",
                "large_model",
                "prompt"
            ]
        );
        assert!(record.column(9).is_null(0));
        assert!(record.column(10).is_null(0));
    }
}
