//! What log lines hold: each row of a JSON-lines or CSV log as a JSON
//! object, and its values at dotted paths (through JSON text met on the
//! way), read as text, numbers, token counts and time stamps.

use std::borrow::Cow;

use serde_json::Value;

use super::fields::parse_timestamp;

pub(super) type Problem = (String, String);

/// The value at a dotted path; a JSON text met on the way (CSV cells,
/// LiteLLM's `metadata` column) is parsed and followed.
pub(super) fn at<'a>(
    object: &'a serde_json::Map<String, Value>,
    path: &str,
) -> Option<Cow<'a, Value>> {
    let mut parts = path.split('.');
    let mut value: Cow<'a, Value> = Cow::Borrowed(object.get(parts.next()?)?);
    for part in parts {
        let next = match value {
            Cow::Borrowed(Value::String(text)) => {
                let parsed: Value = serde_json::from_str(text).ok()?;
                step(&parsed, part).cloned().map(Cow::Owned)
            }
            Cow::Owned(Value::String(text)) => {
                let parsed: Value = serde_json::from_str(&text).ok()?;
                step(&parsed, part).cloned().map(Cow::Owned)
            }
            Cow::Borrowed(inner) => step(inner, part).map(Cow::Borrowed),
            Cow::Owned(inner) => step(&inner, part).cloned().map(Cow::Owned),
        };
        value = next?;
    }
    (!value.is_null()).then_some(value)
}

/// One step of a path: a key of an object, or an index of an array.
pub(super) fn step<'a>(value: &'a Value, part: &str) -> Option<&'a Value> {
    match value {
        Value::Array(items) => items.get(part.parse::<usize>().ok()?),
        other => other.get(part),
    }
}

pub(super) fn text_at(object: &serde_json::Map<String, Value>, path: &str) -> Option<String> {
    match at(object, path)?.as_ref() {
        Value::String(text) if !text.trim().is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

pub(super) fn number_at(
    object: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<Option<f64>, Problem> {
    match at(object, path).as_deref() {
        None => Ok(None),
        Some(Value::Number(number)) => Ok(number.as_f64()),
        Some(Value::String(text)) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| (path.to_owned(), format!("{text:?} is not a number"))),
        Some(other) => Err((path.to_owned(), format!("{other} is not a number"))),
    }
}

pub(super) fn tokens_at(
    object: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<Option<u64>, Problem> {
    match number_at(object, path)? {
        // Beyond 1e15 a count is a unit or parsing error, and a cast would
        // saturate it silently.
        Some(value) if value > 1e15 && value.is_finite() => Err((
            path.to_owned(),
            format!("{value} tokens is more than any request has (at most 1e15)"),
        )),
        Some(value) if value >= 0.0 && value.fract() == 0.0 => Ok(Some(value as u64)),
        Some(value) => Err((
            path.to_owned(),
            format!("{value} is not a whole number of tokens"),
        )),
        None => Ok(None),
    }
}

pub(super) fn required(
    object: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<String, Problem> {
    text_at(object, path).ok_or_else(|| (path.to_owned(), "missing".to_owned()))
}

pub(super) fn timestamp_at(
    object: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<Option<i64>, Problem> {
    match at(object, path).as_deref() {
        None => Ok(None),
        Some(Value::Number(number)) => number.as_i64().map(Some).ok_or_else(|| {
            (
                path.to_owned(),
                format!("{number} is not epoch milliseconds"),
            )
        }),
        Some(Value::String(text)) => parse_timestamp(text)
            .map(Some)
            .map_err(|problem| (path.to_owned(), problem)),
        Some(other) => Err((path.to_owned(), format!("{other} is not a timestamp"))),
    }
}

/// The last user message of an OpenAI chat conversation.
pub fn last_user_message(messages: &Value) -> Option<String> {
    messages.as_array()?.iter().rev().find_map(|message| {
        (message.get("role")?.as_str()? == "user").then(|| match message.get("content")? {
            Value::String(text) => Some(text.clone()),
            // Content parts: their text, joined.
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|part| part.get("text")?.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        })?
    })
}

pub(super) fn messages_at(object: &serde_json::Map<String, Value>, path: &str) -> Option<Value> {
    let value = at(object, path)?.into_owned();
    match value {
        Value::String(text) => serde_json::from_str(&text).ok(),
        other => Some(other),
    }
    .filter(Value::is_array)
}

pub(super) fn first_choice_finish(
    object: &serde_json::Map<String, Value>,
    response: &str,
) -> Option<String> {
    let response = at(object, response)?.into_owned();
    let response = match response {
        Value::String(text) => serde_json::from_str(&text).ok()?,
        other => other,
    };
    Some(
        response
            .get("choices")?
            .get(0)?
            .get("finish_reason")?
            .as_str()?
            .to_owned(),
    )
}
