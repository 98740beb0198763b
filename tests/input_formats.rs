//! The readers on what real files contain: types that convert, optional
//! columns, carried columns, and the round trip through routeval's writer.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, DictionaryArray, Float32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field, Int32Type, Schema};
use routeval::schema::{ColumnNames, ReadOptions, read_graded, write_graded_parquet};

use crate::common::{record_batch, synthetic_rows, write_parquet_batch};

fn carry_all() -> ReadOptions {
    ReadOptions {
        names: ColumnNames::default(),
        carry_extra: true,
        details: true,
        score_optional: false,
        carry_read_only: false,
    }
}

#[test]
fn parquet_integer_ids_dictionary_slices_and_f32_scores_are_accepted() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("typed.parquet");
    let rows = synthetic_rows(&["a", "b"], 3, 12);
    let batch = record_batch(&rows);
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|field| field.as_ref().clone())
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[0] = Arc::new(Int64Array::from_iter_values(100..106));
    fields[0] = Field::new("id", DataType::Int64, false);
    let slices: DictionaryArray<Int32Type> = rows.iter().map(|row| row.slice.as_str()).collect();
    fields[1] = Field::new("slice", slices.data_type().clone(), false);
    columns[1] = Arc::new(slices);
    columns[2] = Arc::new(Float32Array::from_iter_values(
        rows.iter().map(|row| row.score as f32),
    ));
    fields[2] = Field::new("score", DataType::Float32, false);
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    write_parquet_batch(&path, &batch);

    let table = read_graded(&path, &carry_all()).unwrap();
    let first = &table.batches[0];
    assert_eq!(first.id.value(0), "100");
    assert_eq!(first.slice.value(5), "b");
    assert_eq!(first.score.value(1), f64::from(rows[1].score as f32));
}

#[test]
fn absent_optional_costs_are_zero_and_latencies_stay_null() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("minimal.csv");
    std::fs::write(
        &path,
        "id,slice,score,small_ok,large_ok,cost_small,cost_large,small_ms\n\
         a,s,0.1,true,false,0.001,0.01,\n\
         b,s,0.9,FALSE,1,0.002,0.02,350.5\n",
    )
    .unwrap();
    let table = read_graded(&path, &carry_all()).unwrap();
    let batch = &table.batches[0];
    assert_eq!(batch.cost_verifier.values().to_vec(), [0.0, 0.0]);
    assert_eq!(batch.cost_router.values().to_vec(), [0.0, 0.0]);
    let small_ms = batch.latencies[0].as_ref().unwrap();
    assert!(small_ms.is_null(0));
    assert_eq!(small_ms.value(1), 350.5);
    assert_eq!(
        table.present.latencies,
        [true, false, false, false, false, false]
    );
    assert!(!batch.small_ok.value(1) && batch.large_ok.value(1));
}

#[test]
fn unknown_columns_are_carried_through_a_parquet_round_trip() {
    let directory = tempfile::tempdir().unwrap();
    let source = directory.path().join("graded.jsonl");
    std::fs::write(
        &source,
        concat!(
            r#"{"id":"a","slice":"s","score":0.5,"small_ok":true,"large_ok":false,"cost_small":0.001,"cost_large":0.01,"prompt":"2+2?","tags":["math"]}"#,
            "\n",
            r#"{"id":"b","slice":"s","score":0.7,"small_ok":false,"large_ok":true,"cost_small":0.001,"cost_large":0.01,"tenant":"acme"}"#,
            "\n"
        ),
    )
    .unwrap();
    let table = read_graded(&source, &carry_all()).unwrap();
    let written = directory.path().join("graded.parquet");
    write_graded_parquet(&table, &written).unwrap();
    let reread = read_graded(&written, &carry_all()).unwrap();

    let extra: Vec<(String, ArrayRef)> = reread.batches[0]
        .extra
        .iter()
        .map(|(field, array)| (field.name().clone(), array.clone()))
        .collect();
    let names: Vec<&str> = extra.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["prompt", "tags", "tenant"]);
    let text = |index: usize| {
        extra[index]
            .1
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .clone()
    };
    assert_eq!(text(0).value(0), "2+2?");
    assert!(text(0).is_null(1));
    assert_eq!(text(1).value(0), r#"["math"]"#);
    assert_eq!(text(2).value(1), "acme");
    assert_eq!(reread.batches[0].score.values().to_vec(), [0.5, 0.7]);
}

#[test]
fn csv_quoted_fields_keep_their_commas() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("quoted.csv");
    std::fs::write(
        &path,
        "id,slice,score,small_ok,large_ok,cost_small,cost_large,note\n\
         \"a,1\",\"billing, EU\",0.5,true,true,0,0,\"said \"\"hi\"\"\"\n",
    )
    .unwrap();
    let table = read_graded(&path, &carry_all()).unwrap();
    let batch = &table.batches[0];
    assert_eq!(batch.id.value(0), "a,1");
    assert_eq!(batch.slice.value(0), "billing, EU");
    let note = batch.extra[0]
        .1
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(note.value(0), "said \"hi\"");
}

#[test]
fn newer_schema_versions_are_refused() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("future.parquet");
    let batch = record_batch(&synthetic_rows(&["s"], 2, 13));
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
            "routeval.graded.schema_version".to_owned(),
            "99".to_owned(),
        )]))
        .build();
    let file = std::fs::File::create(&path).unwrap();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let error = read_graded(&path, &carry_all()).unwrap_err();
    assert!(
        error.to_string().contains("schema version 99 is newer"),
        "{error}"
    );
}

#[test]
fn a_column_named_like_a_renamed_one_is_not_silently_carried() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("both.csv");
    std::fs::write(
        &path,
        "id,slice,score,p,small_ok,large_ok,cost_small,cost_large\na,s,0.1,0.9,true,true,0,0\n",
    )
    .unwrap();
    let options = ReadOptions {
        names: ColumnNames::new("p".to_owned(), "slice".to_owned()),
        ..carry_all()
    };
    let error = read_graded(&path, &options).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("collides with the column renamed by --score-col"),
        "{error}"
    );
    let calibrating = ReadOptions {
        carry_extra: false,
        ..options
    };
    let table = read_graded(&path, &calibrating).unwrap();
    assert_eq!(table.batches[0].score.value(0), 0.9);
}

mod round_trip {
    use proptest::prelude::*;
    use routeval::schema::{ReadOptions, read_graded};

    use crate::common::{Row, write_json_lines, write_parquet};

    fn rows() -> impl Strategy<Value = Vec<Row>> {
        let row = (
            prop_oneof![
                Just("billing"),
                Just("legal, EU"),
                Just("tech \"beta\""),
                Just("ünïcode")
            ],
            prop_oneof![-1e6..1e6f64, Just(0.0), Just(-0.0), Just(1e-300)],
            any::<bool>(),
            any::<bool>(),
            0.0..10.0f64,
            0.0..100.0f64,
            prop_oneof![Just(0.0), 0.0..0.01f64],
        );
        prop::collection::vec(row, 1..40).prop_map(|rows| {
            rows.into_iter()
                .enumerate()
                .map(
                    |(
                        index,
                        (slice, score, small_ok, large_ok, cost_small, cost_large, cost_router),
                    )| Row {
                        id: format!("id-{index}"),
                        slice: slice.to_owned(),
                        score,
                        small_ok,
                        large_ok,
                        cost_small,
                        cost_large,
                        cost_verifier: cost_small / 3.0,
                        cost_router,
                    },
                )
                .collect()
        })
    }

    /// The rows a file reads back as.
    fn read_back(path: &std::path::Path) -> Vec<Row> {
        let table = read_graded(path, &ReadOptions::default()).unwrap();
        let mut rows = Vec::new();
        for batch in &table.batches {
            for index in 0..batch.num_rows() {
                rows.push(Row {
                    id: batch.id.value(index).to_owned(),
                    slice: batch.slice.value(index).to_owned(),
                    score: batch.score.value(index),
                    small_ok: batch.small_ok.value(index),
                    large_ok: batch.large_ok.value(index),
                    cost_small: batch.cost_small.value(index),
                    cost_large: batch.cost_large.value(index),
                    cost_verifier: batch.cost_verifier.value(index),
                    cost_router: batch.cost_router.value(index),
                });
            }
        }
        rows
    }

    /// CSV writes the slices with commas and quotes through its quoting.
    fn write_quoted_csv(path: &std::path::Path, rows: &[Row]) {
        let mut writer = csv::Writer::from_path(path).unwrap();
        writer
            .write_record([
                "id",
                "slice",
                "score",
                "small_ok",
                "large_ok",
                "cost_small",
                "cost_large",
                "cost_verifier",
                "cost_router",
            ])
            .unwrap();
        for row in rows {
            writer
                .write_record([
                    row.id.clone(),
                    row.slice.clone(),
                    row.score.to_string(),
                    row.small_ok.to_string(),
                    row.large_ok.to_string(),
                    row.cost_small.to_string(),
                    row.cost_large.to_string(),
                    row.cost_verifier.to_string(),
                    row.cost_router.to_string(),
                ])
                .unwrap();
        }
        writer.flush().unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn every_format_reads_back_what_was_written(rows in rows()) {
            let directory = tempfile::tempdir().unwrap();
            let (csv, jsonl, parquet) = (
                directory.path().join("rows.csv"),
                directory.path().join("rows.jsonl"),
                directory.path().join("rows.parquet"),
            );
            write_quoted_csv(&csv, &rows);
            write_json_lines(&jsonl, &rows);
            write_parquet(&parquet, &rows);
            prop_assert_eq!(&read_back(&csv), &rows);
            prop_assert_eq!(&read_back(&jsonl), &rows);
            prop_assert_eq!(&read_back(&parquet), &rows);
        }
    }
}
