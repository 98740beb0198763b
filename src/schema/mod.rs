//! The tables and documents that connect the pipeline's stages, defined once.
//!
//! The graded-results table ([`graded`]) has one row per labelled prompt: its
//! slice, the router or verifier score, whether each tier's answer was
//! acceptable and what each call cost. Stages read it with [`read_graded`] or,
//! when they only need one pass, [`for_each_graded_batch`], from Parquet
//! (primary), CSV or JSON lines; [`write_graded_parquet`] writes it. The
//! reader validates every row, so a stage never sees a NaN score, a negative
//! cost or a duplicate id. `docs/schema.md` documents the same columns, and a
//! test holds the two together.

mod assemble;
mod audits;
pub mod calibration;
mod call_tier;
pub mod candidate_replay;
pub mod comparison;
mod dataset;
mod document_file;
pub mod drift;
pub mod drift_records;
mod error;
mod evaluation;
pub mod fallback;
mod format;
pub mod gate_report;
pub mod graded;
pub mod hedge;
mod ids;
mod labels;
mod manifest;
mod metrics;
mod pin;
pub mod policy;
mod read;
mod read_parquet;
mod read_text;
pub mod replay;
mod responses;
mod scores;
mod table_files;
mod tiered;
mod write;

pub use assemble::{ColumnNames, MAX_COST_USD, ReadOptions};
pub use audits::{
    AUDIT_COLUMNS, AUDITS_OUTPUT_CSV, AUDITS_OUTPUT_LINES, AUDITS_SCHEMA_VERSION, AuditRow,
    SliceRows, audits_are_csv, audits_to_bytes, read_audits, slice_rows,
};
pub use calibration::{
    AUDIT_HEADER, AuditDraw, AuditSummary, Baselines, CALIBRATION_OUTPUT,
    CALIBRATION_SCHEMA_VERSION, CalibrationDocument, FrontierPoint, GLOBAL_SLICE, Guarantee,
    Holdout, HoldoutResult, HoldoutVerdict, InputFile, Point, Scope, SliceCalibration, Threshold,
    TierCertification, TierTest, TieredChoice, TieredPoint, audit_rows,
};
pub use call_tier::CallTier;
pub use candidate_replay::{
    BETTING_SEQUENCE, CANDIDATE_REPLAY_KIND, CANDIDATE_REPLAY_OUTPUT,
    CANDIDATE_REPLAY_SCHEMA_VERSION, CandidateReplay, Estimate, Estimators, LabelsUsed, LoggedBy,
    SliceEstimate,
};
pub use comparison::{
    COMPARISON_STATE_KIND, COMPARISON_STATE_OUTPUT, COMPARISON_STATE_SCHEMA_VERSION, Comparison,
    ComparisonBudget, ComparisonLook, ComparisonState, ComparisonVerdict,
};
pub use dataset::{DatasetRow, Message, Role, for_each_prompt, for_each_row, read_dataset};
pub use document_file::{DocumentError, DocumentFile, read_document, read_state_document};
pub use drift::{
    ConfigRef, DRIFT_OUTPUT, DRIFT_SCHEMA_VERSION, DriftDocument, ScoreShift, SequentialDrift,
    SequentialSlice, SliceDrift, Verdict,
};
pub use drift_records::{
    BinnedShift, RECORDS_DRIFT_OUTPUT, RECORDS_DRIFT_SCHEMA_VERSION, RecordsDriftDocument,
    RecordsRouteDrift, RecordsSliceDrift, RouteWindow, SliceWindow,
};
pub use error::{InputError, ReadError};
pub use evaluation::{EVALUATION_SCHEMA_VERSION, EvaluationDocument, RoutingQuality};
pub use fallback::{
    BreakerCalibration, BreakerPoint, BreakerSettings, FALLBACK_OUTPUT, FALLBACK_SCHEMA_VERSION,
    FallbackDocument, FallbackLatencySource, Learning, PolicyOutcome,
};
pub use format::Format;
pub use gate_report::{
    BaselineRef, CandidateReport, CertifiedScores, CostChange, Emitted, Failure,
    GATE_MARKDOWN_HEADER, GATE_MARKDOWN_OUTPUT, GATE_REPORT_FILE, GATE_REPORT_OUTPUT,
    GATE_REPORT_SCHEMA_VERSION, GateReport, ProductionEvidence, ProductionQuality, Rollback, Rule,
    ScoresFrom, SliceRegression, comparison_rows,
};
pub use graded::{
    Column, ColumnKind, GRADED_OUTPUT, GradedBatch, Present, RowLocation, SCHEMA_VERSION,
    ScoreColumn,
};
pub use hedge::{HEDGE_OUTPUT, HEDGE_SCHEMA_VERSION, HedgeDocument, HedgeRow};
pub use ids::{DuplicateIds, id_hasher};
pub use labels::{
    LABEL_SET_OUTPUT, LABEL_SET_SCHEMA_VERSION, LabelRow, drawn_for_audit, drawn_for_label,
    read_labels,
};
pub use manifest::{
    FileDigest, MANIFEST_FILE, MANIFEST_OUTPUT, MANIFEST_SCHEMA_VERSION, Manifest, TierCounts,
};
pub use metrics::{ExplorationPrice, Metrics};
pub use pin::floating_alias;
pub use policy::{Policy, escalates};
pub use read::{
    FileSummary, GradedTable, for_each_graded_batch, for_each_graded_batch_parallel, read_graded,
};
pub use replay::{
    Calibration, Chosen, Grid, Headline, PolicyResult, PoolSummary, QueueQuantiles, REPLAY_OUTPUT,
    REPLAY_SCHEMA_VERSION, ReplayDocument, Scored, TraceSummary, TtftQuantiles, Window,
};
pub use responses::{
    RESPONSES_FILE, RESPONSES_OUTPUT, RESPONSES_SCHEMA, RESPONSES_SCHEMA_VERSION, ResponseRow,
    ResponsesWriter, read_all_responses, read_responses,
};
pub use scores::{read_scores, score_of};
pub use table_files::{
    CsvFile, UniqueKeys, arrow_error, for_each_csv_record, for_each_json_object, for_each_json_row,
    for_each_line, for_each_object, json_lines, open_parquet, parquet_error,
};
pub use tiered::{
    TIERS_KEY, TieredColumns, Tiers, is_tier_name, tiered_columns, tiers_in_metadata,
};
pub use write::{stage_graded_parquet, write_graded_parquet};
