//! What a request's record keeps of its conversation (`--records-prompts`),
//! applied as the record is journaled. The prompt is kept once: a record
//! whose `messages` hold it as their last user message leaves `prompt`
//! null, and every reader takes it from `messages` ([`crate::records`]).

use super::super::settings::RecordsPrompts;
use super::ServedRecord;

/// Applies `choice` to a record about to be journaled.
pub(super) fn keep(choice: RecordsPrompts, record: &mut ServedRecord) {
    let record = &mut record.record;
    if choice == RecordsPrompts::None {
        record.prompt = None;
        record.messages = None;
        return;
    }
    let held = record.messages.as_deref().and_then(|messages| {
        crate::records::last_user_message(&serde_json::from_str(messages).ok()?)
    });
    if held.is_some() && held.as_deref() == record.prompt.as_deref() {
        record.prompt = None;
    }
    match choice {
        RecordsPrompts::Full | RecordsPrompts::None => {}
        RecordsPrompts::Redacted => {
            if let Some(prompt) = &mut record.prompt {
                *prompt = crate::records::redact(prompt).0.into();
            }
            if let Some(messages) = &mut record.messages {
                *messages = redacted_json(messages).into();
            }
        }
    }
}

/// `json` with the secrets in each of its strings redacted; text that is
/// not JSON is redacted as text.
fn redacted_json(json: &str) -> String {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => *text = crate::records::redact(text).0,
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(walk),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(mut value) => {
            walk(&mut value);
            value.to_string()
        }
        Err(_) => crate::records::redact(json).0,
    }
}
