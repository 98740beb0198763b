//! Labelled prompts: the input of `routeval run` and the references `grade`
//! grades against. One prompt a row, in JSON lines (primary), CSV or
//! Parquet: `id`, `slice`, `prompt` or `messages`, `reference`, `rubric`,
//! and free metadata. Every row is checked, and the rubric it names must
//! exist, before anything is sent to a model.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Format, RowLocation};
use crate::schema::InputError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

/// One labelled prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetRow {
    pub id: String,
    pub slice: String,
    /// The conversation to send; a `prompt` is one user message.
    pub messages: Vec<Message>,
    pub reference: Option<String>,
    pub rubric: String,
    /// Every other field, kept for reports and the simulated endpoint.
    pub metadata: Map<String, Value>,
    pub location: RowLocation,
}

/// A row before checking: where it is, and its fields.
type RawRow = (RowLocation, Map<String, Value>);

/// Reads every row of `path` and checks it; `rubrics` are the names a row
/// may give in `rubric`.
pub fn read_dataset(
    path: &Path,
    rubrics: &BTreeSet<String>,
) -> Result<Vec<DatasetRow>, InputError> {
    let mut rows = Vec::new();
    for_each_row(path, rubrics, |row| {
        rows.push(row);
        Ok(())
    })?;
    Ok(rows)
}

/// Streams the checked rows of `path` to `visit` in file order, holding one
/// row at a time (plus the ids seen, to refuse duplicates).
pub fn for_each_row(
    path: &Path,
    rubrics: &BTreeSet<String>,
    visit: impl FnMut(DatasetRow) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    for_each_checked_row(path, Some(rubrics), visit)
}

/// [`for_each_row`] for readers that need only the prompts, such as a
/// replay of their prefixes: any rubric name is accepted.
pub fn for_each_prompt(
    path: &Path,
    visit: impl FnMut(DatasetRow) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    for_each_checked_row(path, None, visit)
}

fn for_each_checked_row(
    path: &Path,
    rubrics: Option<&BTreeSet<String>>,
    mut visit: impl FnMut(DatasetRow) -> Result<(), InputError>,
) -> Result<u64, InputError> {
    let unreadable = |message: String| InputError::Unreadable {
        path: path.to_owned(),
        message,
    };
    if path.is_dir() {
        return Err(unreadable("is a directory, not a dataset file".to_owned()));
    }
    Format::detect(path)?;
    // Ids by 64-bit hash, so that a million prompts cost megabytes, not the
    // strings; equal hashes are confirmed against the earlier row's id.
    let hasher = super::id_hasher();
    let mut seen: HashMap<u64, RowLocation> = HashMap::new();
    let mut count = 0u64;
    let mut check = |(location, object): RawRow| -> Result<(), InputError> {
        let row = check_row(path, location, object, rubrics)?;
        match seen.entry(hasher.hash_one(&row.id)) {
            Entry::Vacant(entry) => {
                entry.insert(location);
            }
            Entry::Occupied(entry) => {
                let first = *entry.get();
                if id_at(path, first)?.as_deref() == Some(row.id.as_str()) {
                    return Err(InputError::Invalid {
                        path: path.to_owned(),
                        location,
                        field: "id".to_owned(),
                        problem: format!("duplicate id {:?}, first at {first}", row.id),
                    });
                }
            }
        }
        count += 1;
        visit(row)
    };
    super::for_each_object(path, |location, object| check((location, object)))?;
    if count == 0 {
        return Err(InputError::Empty {
            path: path.to_owned(),
            nothing: "the dataset has no rows",
        });
    }
    Ok(count)
}

/// The id of the row at `wanted`, as `check_row` reads it.
fn id_at(path: &Path, wanted: RowLocation) -> Result<Option<String>, InputError> {
    let mut found = None;
    let mut visit = |(location, mut object): RawRow| -> Result<(), InputError> {
        if location == wanted {
            found = object.remove("id").map(|id| match id {
                Value::String(text) => text,
                other => other.to_string(),
            });
        }
        Ok(())
    };
    super::for_each_object(path, |location, object| visit((location, object)))?;
    Ok(found)
}

fn check_row(
    path: &Path,
    location: RowLocation,
    mut object: Map<String, Value>,
    rubrics: Option<&BTreeSet<String>>,
) -> Result<DatasetRow, InputError> {
    let invalid = |field: &str, problem: String| InputError::Invalid {
        path: path.to_owned(),
        location,
        field: field.to_owned(),
        problem,
    };
    let mut text = |field: &str, required: bool| -> Result<Option<String>, InputError> {
        match object.remove(field) {
            None | Some(Value::Null) if required => Err(invalid(field, "missing".to_owned())),
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if required && text.trim().is_empty() => {
                Err(invalid(field, "empty".to_owned()))
            }
            Some(Value::String(text)) => Ok(Some(text)),
            Some(Value::Number(number)) if field == "id" || field == "reference" => {
                Ok(Some(number.to_string()))
            }
            Some(other) => Err(invalid(field, format!("expected a string, found {other}"))),
        }
    };
    let id = text("id", true)?.expect("required");
    let slice = text("slice", true)?.expect("required");
    let rubric = text("rubric", true)?.expect("required");
    let reference = text("reference", false)?;
    let prompt = text("prompt", false)?;
    let messages = match (prompt, object.remove("messages")) {
        (Some(_), Some(value)) if !value.is_null() => {
            return Err(invalid(
                "messages",
                "give prompt or messages, not both".to_owned(),
            ));
        }
        (Some(prompt), _) if prompt.trim().is_empty() => {
            return Err(invalid("prompt", "empty".to_owned()));
        }
        (Some(prompt), _) => vec![Message {
            role: Role::User,
            content: prompt,
        }],
        (None, None | Some(Value::Null)) => {
            return Err(invalid(
                "prompt",
                "missing: give prompt or messages".to_owned(),
            ));
        }
        (None, Some(value)) => {
            // CSV and Parquet carry messages as JSON text.
            let value = match value {
                Value::String(text) => serde_json::from_str(&text)
                    .map_err(|error| invalid("messages", format!("not JSON: {error}")))?,
                other => other,
            };
            let messages: Vec<Message> = serde_json::from_value(value).map_err(|error| {
                invalid(
                    "messages",
                    format!("expected [{{\"role\", \"content\"}}]: {error}"),
                )
            })?;
            match messages.last() {
                None => return Err(invalid("messages", "empty".to_owned())),
                Some(last) if last.role != Role::User => {
                    return Err(invalid(
                        "messages",
                        "the last message must be the user's".to_owned(),
                    ));
                }
                Some(_) => messages,
            }
        }
    };
    if let Some(rubrics) = rubrics
        && !rubrics.contains(&rubric)
    {
        let known: Vec<&str> = rubrics.iter().map(String::as_str).collect();
        return Err(invalid(
            "rubric",
            format!("unknown rubric {rubric:?}; known: {}", known.join(", ")),
        ));
    }
    Ok(DatasetRow {
        id,
        slice,
        messages,
        reference,
        rubric,
        metadata: object,
        location,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn rubrics() -> BTreeSet<String> {
        ["exact", "refund"].into_iter().map(str::to_owned).collect()
    }

    fn read(name: &str, text: &str) -> Result<Vec<DatasetRow>, InputError> {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(name);
        std::fs::write(&path, text).unwrap();
        read_dataset(&path, &rubrics()).map_err(|error| {
            // Name the file without the temporary directory.
            let message = error
                .to_string()
                .replace(&directory.path().display().to_string(), "");
            InputError::Unreadable {
                path: PathBuf::new(),
                message,
            }
        })
    }

    fn error(name: &str, text: &str) -> String {
        match read(name, text).unwrap_err() {
            InputError::Unreadable { message, .. } => message,
            other => other.to_string(),
        }
    }

    #[test]
    fn prompts_messages_and_metadata() {
        let rows = read(
            "d.jsonl",
            concat!(
                r#"{"id": "a", "slice": "billing", "prompt": "Where is my refund?", "reference": "3-5 days", "rubric": "refund", "difficulty": 0.3}"#,
                "\n\n",
                r#"{"id": 7, "slice": "billing", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "rubric": "exact"}"#,
                "\n"
            ),
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].messages,
            [Message {
                role: Role::User,
                content: "Where is my refund?".into()
            }]
        );
        assert_eq!(rows[0].metadata["difficulty"], 0.3);
        assert_eq!(rows[1].id, "7");
        assert_eq!(rows[1].messages[0].role, Role::System);
        assert_eq!(rows[1].location, RowLocation::Line(3));
        assert_eq!(rows[1].reference, None);

        let csv = read(
            "d.csv",
            "id,slice,prompt,reference,rubric,difficulty\nq1,tech,\"Reset my password, please\",link,exact,0.2\n",
        )
        .unwrap();
        assert_eq!(csv[0].messages[0].content, "Reset my password, please");
        assert_eq!(csv[0].metadata["difficulty"], "0.2");
    }

    #[test]
    fn invalid_rows_name_the_file_line_and_field() {
        let cases = [
            (
                r#"{"slice": "s", "prompt": "p", "rubric": "exact"}"#,
                "/d.jsonl: line 1, field \"id\": missing",
            ),
            (
                r#"{"id": "a", "slice": "s", "rubric": "exact"}"#,
                "/d.jsonl: line 1, field \"prompt\": missing: give prompt or messages",
            ),
            (
                r#"{"id": "a", "slice": "s", "prompt": "p", "messages": [], "rubric": "exact"}"#,
                "/d.jsonl: line 1, field \"messages\": give prompt or messages, not both",
            ),
            (
                r#"{"id": "a", "slice": "s", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "rubric": "exact"}"#,
                "/d.jsonl: line 1, field \"messages\": the last message must be the user's",
            ),
            (
                r#"{"id": "a", "slice": "s", "prompt": "p", "rubric": "sentiment"}"#,
                "/d.jsonl: line 1, field \"rubric\": unknown rubric \"sentiment\"; known: exact, refund",
            ),
            (
                r#"{"id": "a", "slice": "", "prompt": "p", "rubric": "exact"}"#,
                "/d.jsonl: line 1, field \"slice\": empty",
            ),
            ("{not json", "/d.jsonl: line 1: not a JSON object"),
        ];
        for (line, expected) in cases {
            let message = error("d.jsonl", &format!("{line}\n"));
            assert!(message.starts_with(expected), "{message}");
        }
        let duplicate = error(
            "d.jsonl",
            "{\"id\": \"a\", \"slice\": \"s\", \"prompt\": \"p\", \"rubric\": \"exact\"}\n{\"id\": \"a\", \"slice\": \"s\", \"prompt\": \"q\", \"rubric\": \"exact\"}\n",
        );
        assert!(
            duplicate.ends_with("line 2, field \"id\": duplicate id \"a\", first at line 1"),
            "{duplicate}"
        );
        assert!(error("d.jsonl", "\n").ends_with("the dataset has no rows"));
    }
}
